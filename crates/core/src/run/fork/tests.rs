use serde_json::json;

use super::*;
use crate::run::decide::testing::*;

/// A parent log: frames numbered from 1.
fn log(events: Vec<Event>) -> ParentLog {
    let mut parent = ParentLog::default();
    for (i, event) in events.iter().enumerate() {
        parent.push(Seq::new(u64::try_from(i).unwrap() + 1).unwrap(), event);
    }
    parent
}

/// v1: draft → polish; the goal failed; v2 kept draft (completed) and added review after polish.
fn repaired() -> ParentLog {
    let mut v2 = plan(
        2,
        vec![
            node("draft", "writer", &["brief"], &["post_copy"]),
            node("polish", "editor", &["post_copy"], &["post_copy"]),
            node("review", "reviewer", &["post_copy"], &["verdict"]),
        ],
    );
    v2.nodes[0].status = NodeStatus::Completed;
    log(vec![
        run_started(),
        requested(1, None),
        generated(two_nodes(), None),                                // 3
        node_complete("draft", "writer", json!({"v": "draft-1"})),   // 4
        node_complete("polish", "editor", json!({"v": "polish-1"})), // 5
        requested(2, None),
        generated(v2, None),                                         // 7
        node_complete("polish", "editor", json!({"v": "polish-2"})), // 8
        node_complete("review", "reviewer", json!({"v": "ok"})),     // 9
    ])
}

fn statuses(fork: &ForkPlan) -> Vec<(String, NodeStatus)> {
    fork.plan.nodes.iter().map(|n| (n.id.to_string(), n.status)).collect()
}

fn reused(fork: &ForkPlan) -> Vec<(String, u64)> {
    fork.reused.iter().map(|r| (r.node_id.clone(), r.from.seq)).collect()
}

#[test]
fn from_a_version_reuses_only_what_was_done_before_that_version_ran() {
    let point = ForkPoint { from_version: Some(2), from_node: None, as_of: None };
    let fork = resolve("p", &repaired(), &point, &ForkChanges::default()).unwrap();
    assert_eq!(fork.plan.version, 1);
    assert_eq!(fork.plan.metadata.phase, Phase::Fork);
    assert_eq!(fork.forked_from, ForkedFrom { run_id: "p".into(), version: 2, node_id: None, as_of: None });
    // v2 kept draft; it marked polish, done under v1, to run again.
    assert_eq!(reused(&fork), [("draft".to_string(), 4)]);
    assert_eq!(
        statuses(&fork),
        [
            ("draft".to_string(), NodeStatus::Completed),
            ("polish".to_string(), NodeStatus::Pending),
            ("review".to_string(), NodeStatus::Pending)
        ]
    );
    assert_eq!(fork.reused[0].output, json!({"v": "draft-1"}));

    let first = resolve(
        "p",
        &repaired(),
        &ForkPoint { from_version: Some(1), from_node: None, as_of: None },
        &ForkChanges::default(),
    );
    assert_eq!(reused(&first.unwrap()), [], "nothing was done before version 1");
}

#[test]
fn without_a_point_everything_done_is_reused_and_a_node_reruns_with_what_follows_it() {
    let all = resolve("p", &repaired(), &ForkPoint::default(), &ForkChanges::default()).unwrap();
    assert_eq!(reused(&all), [("draft".to_string(), 4), ("polish".to_string(), 8), ("review".to_string(), 9)]);

    let point = ForkPoint { from_version: None, from_node: Some("polish".into()), as_of: None };
    let fork = resolve("p", &repaired(), &point, &ForkChanges::default()).unwrap();
    assert_eq!(reused(&fork), [("draft".to_string(), 4)]);
    assert_eq!(fork.forked_from.node_id.as_deref(), Some("polish"));

    // The step's own output given: it is reused with it, what follows runs again.
    let mine = ForkChanges { outputs: [("polish".to_string(), json!({"v": "mine"}))].into(), ..Default::default() };
    let fork = resolve("p", &repaired(), &point, &mine).unwrap();
    assert_eq!(reused(&fork), [("draft".to_string(), 4), ("polish".to_string(), 8)]);
    assert_eq!(statuses(&fork)[2], ("review".to_string(), NodeStatus::Pending));
}

#[test]
fn a_replaced_output_is_reused_as_given_and_what_follows_it_runs_again() {
    let changes = ForkChanges { outputs: [("draft".to_string(), json!({"v": "mine"}))].into(), ..Default::default() };
    let fork = resolve("p", &repaired(), &ForkPoint::default(), &changes).unwrap();
    assert_eq!(reused(&fork), [("draft".to_string(), 4)]);
    assert_eq!((fork.reused[0].output.clone(), fork.reused[0].from.replaced), (json!({"v": "mine"}), true));

    let inputs = ForkChanges { changed_inputs: ["post_copy".to_string()].into(), ..Default::default() };
    let fork = resolve("p", &repaired(), &ForkPoint::default(), &inputs).unwrap();
    assert_eq!(reused(&fork), [("draft".to_string(), 4)], "polish and review read post_copy");
}

#[test]
fn a_point_or_output_the_run_does_not_have_is_refused_with_its_pointer() {
    let refused = |point: ForkPoint, changes: ForkChanges| resolve("p", &repaired(), &point, &changes).unwrap_err();
    let version = refused(ForkPoint { from_version: Some(3), from_node: None, as_of: None }, ForkChanges::default());
    assert_eq!((version.pointer(), version.to_string().contains("1 to 2")), ("/fromVersion".into(), true));
    let node = refused(
        ForkPoint { from_version: Some(1), from_node: Some("review".into()), as_of: None },
        ForkChanges::default(),
    );
    assert_eq!(node.pointer(), "/fromNode");
    let early = ForkChanges { outputs: [("review".to_string(), json!({}))].into(), ..Default::default() };
    let not_done = refused(ForkPoint { from_version: Some(2), from_node: None, as_of: None }, early.clone());
    assert_eq!(
        (not_done.pointer(), matches!(not_done, ForkError::NotCompleted { .. })),
        ("/outputs/review".into(), true)
    );
    let again = refused(ForkPoint { from_version: None, from_node: Some("polish".into()), as_of: None }, early);
    assert!(matches!(again, ForkError::RunsAgain { .. }), "{again}");
    // Without `fromNode`: a given output after another given one, or after a changed input, whichever
    // comes first by name.
    let both = ForkChanges {
        outputs: [("draft".to_string(), json!({"v": "mine"})), ("polish".to_string(), json!({"v": "mine"}))].into(),
        ..ForkChanges::default()
    };
    assert_eq!(refused(ForkPoint::default(), both), ForkError::RunsAgain { node: "polish".into() });
    let after_input = ForkChanges {
        outputs: [("polish".to_string(), json!({"v": "mine"}))].into(),
        changed_inputs: ["brief".to_string()].into(),
    };
    assert_eq!(refused(ForkPoint::default(), after_input), ForkError::RunsAgain { node: "polish".into() });
    assert_eq!(
        resolve("p", &log(vec![run_started()]), &ForkPoint::default(), &ForkChanges::default()),
        Err(ForkError::NoPlan)
    );
}

#[test]
fn as_of_a_frame_the_fork_takes_the_version_current_then_and_what_was_done_by_then() {
    let at = |seq: u64| ForkPoint { as_of: Some(Seq::new(seq).unwrap()), ..ForkPoint::default() };
    let at_v2 = resolve("p", &repaired(), &at(7), &ForkChanges::default()).unwrap();
    let from_v2 = ForkPoint { from_version: Some(2), ..ForkPoint::default() };
    assert_eq!(reused(&at_v2), reused(&resolve("p", &repaired(), &from_v2, &ForkChanges::default()).unwrap()));
    assert_eq!(at_v2.forked_from.as_of, Some(7));

    let after_polish = resolve("p", &repaired(), &at(8), &ForkChanges::default()).unwrap();
    assert_eq!(reused(&after_polish), [("draft".to_string(), 4), ("polish".to_string(), 8)]);
    assert_eq!(statuses(&after_polish)[2], ("review".to_string(), NodeStatus::Pending));

    let in_v1 = resolve("p", &repaired(), &at(4), &ForkChanges::default()).unwrap();
    assert_eq!((in_v1.forked_from.version, reused(&in_v1)), (1, vec![("draft".to_string(), 4)]));
    assert_eq!(resolve("p", &repaired(), &at(2), &ForkChanges::default()), Err(ForkError::NoPlan));
    let beyond = resolve("p", &repaired(), &at(99), &ForkChanges::default()).unwrap_err();
    assert_eq!(beyond.pointer(), "/asOf");
}
