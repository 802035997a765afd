//! Runtime policies (`policies.runtime` of an envelope): rules that change a run while it executes.
//! A policy has a trigger (when it is looked at), an optional condition, and an action. Parsed at
//! the boundary into [`RuntimePolicy`] values; [`first_match`] picks the policy that fires. Pure:
//! no I/O, the coordinator carries the actions out.
//!
//! Supported here: triggers `onStart`, `onNodeComplete` (selector + condition) and
//! `onPostConditionFailed` (selector + `maxRetries`), actions `replan`, `fail`, `emit`, `goto`,
//! `pause` and `hitl` (after post-conditions: `replan`, `fail`, `emit`, `hitl`). The triggers
//! `onValidationFail`, `onTimeout`, `onMetricBelow` and `manual`, and any action outside these
//! lists, are rejected with a clear error (`unsupported`, `legacy_action`, `unknown_action`)
//! instead of being accepted and ignored.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::condition::dsl::{self, Catalog, Scope};
use crate::condition::{RUN_VAR, Rule};
use crate::hash::{HashMap, HashSet};
use crate::validation::FieldError;

/// A validated runtime policy.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimePolicy {
    pub id: String,
    pub enabled: bool,
    pub trigger: Trigger,
    pub action: Action,
}

/// When a policy is looked at.
#[derive(Debug, Clone, PartialEq)]
pub enum Trigger {
    /// Once per run, before the first node of its first plan starts.
    OnStart,
    /// After each node (not a human one) completes, if the node matches.
    OnNodeComplete { selector: Selector, condition: Option<PolicyCondition> },
    /// When a matching node's output fails its capability's post-conditions: `max_retries` more
    /// attempts (else the capability's own, else the configured number), then the action.
    OnPostConditionFailed { selector: Selector, max_retries: Option<u32> },
}

/// The name of a trigger, as policies and frames spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TriggerKind {
    OnStart,
    OnNodeComplete,
    OnPostConditionFailed,
}

impl TriggerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OnStart => "onStart",
            Self::OnNodeComplete => "onNodeComplete",
            Self::OnPostConditionFailed => "onPostConditionFailed",
        }
    }
}

impl std::fmt::Display for TriggerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Trigger {
    pub fn kind(&self) -> TriggerKind {
        match self {
            Self::OnStart => TriggerKind::OnStart,
            Self::OnNodeComplete { .. } => TriggerKind::OnNodeComplete,
            Self::OnPostConditionFailed { .. } => TriggerKind::OnPostConditionFailed,
        }
    }
}

/// Which nodes an `onNodeComplete` policy looks at: every given field must be equal.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selector {
    pub node_id: Option<String>,
    pub kind: Option<String>,
    pub capability_id: Option<String>,
}

/// A policy's condition, compiled.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyCondition {
    /// How it is shown: the canonical DSL, or the JSON-Logic text.
    pub expression: String,
    pub rule: Rule,
}

/// What a policy does when it fires.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Plan again (counted in the run's replan budget).
    Replan { rationale: Option<String> },
    /// End the run as failed.
    Fail { message: Option<String> },
    /// Announce `event` (a `policy_update` and a `log` frame); the run goes on.
    Emit { event: String, payload: Value },
    /// Run node `next` and every node after it again, at most `max_attempts` times per policy.
    Goto { next: String, max_attempts: u32 },
    /// Wait for an operator (`awaiting_hitl`); approving goes on.
    Pause { reason: Option<String> },
    /// Ask an operator: approving does `approve` (none: go on), rejecting does `reject` (none:
    /// the run fails, or replans with the operator's feedback).
    Hitl { rationale: Option<String>, approve: Option<Box<Action>>, reject: Option<Box<Action>> },
}

impl Action {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Replan { .. } => "replan",
            Self::Fail { .. } => "fail",
            Self::Emit { .. } => "emit",
            Self::Goto { .. } => "goto",
            Self::Pause { .. } => "pause",
            Self::Hitl { .. } => "hitl",
        }
    }
}

/// What a run's policies have done so far (rebuilt from the run's log when it resumes).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fired {
    /// The `onStart` policies were looked at (once per run).
    pub on_start: bool,
    /// How often each `goto` policy has fired.
    pub goto_attempts: HashMap<String, u32>,
}

impl Fired {
    /// Whether `policy` may not fire again: a `goto` that used its attempts.
    pub fn exhausted(&self, policy: &RuntimePolicy) -> bool {
        match &policy.action {
            Action::Goto { max_attempts, .. } => {
                self.goto_attempts.get(&policy.id).copied().unwrap_or(0) >= *max_attempts
            }
            _ => false,
        }
    }
}

/// A completed node as `onNodeComplete` policies see it.
pub struct CompletedNode<'a> {
    pub node_id: &'a str,
    pub capability_id: &'a str,
    pub kind: &'a str,
    pub stage: &'a str,
    pub output: &'a Value,
}

const TRIGGERS: &str = "onStart, onNodeComplete, onPostConditionFailed";

const LEGACY_ACTIONS: [(&str, &str); 7] = [
    ("goto_node", "goto"),
    ("retry_node", "goto"),
    ("replan_run", "replan"),
    ("hitl_pause", "hitl"),
    ("fail_run", "fail"),
    ("pause_run", "pause"),
    ("log_only", "emit"),
];

/// Parses `policies.runtime` (found at `at`), reporting every problem with its JSON Pointer.
pub fn parse(value: &Value, at: &str, catalog: &Catalog) -> Result<Vec<RuntimePolicy>, Vec<FieldError>> {
    let Some(entries) = value.as_array() else {
        return Err(vec![FieldError::new(at, "type", "runtime policies must be an array")]);
    };
    let mut errors = Vec::new();
    let mut policies = Vec::new();
    let mut ids = HashSet::default();
    for (i, entry) in entries.iter().enumerate() {
        let at = format!("{at}/{i}");
        match policy(entry, &at, catalog) {
            Ok(policy) if !ids.insert(policy.id.clone()) => errors.push(FieldError::new(
                format!("{at}/id"),
                "duplicate",
                format!("runtime policy id \"{}\" is used twice", policy.id),
            )),
            Ok(policy) => policies.push(policy),
            Err(problems) => errors.extend(problems),
        }
    }
    if errors.is_empty() { Ok(policies) } else { Err(errors) }
}

fn policy(entry: &Value, at: &str, catalog: &Catalog) -> Result<RuntimePolicy, Vec<FieldError>> {
    let Some(fields) = entry.as_object() else {
        return Err(vec![FieldError::new(at, "type", "a runtime policy must be an object")]);
    };
    let mut errors = Vec::new();
    let id = match fields.get("id").and_then(Value::as_str).map(str::trim) {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => {
            errors.push(FieldError::new(format!("{at}/id"), "required", "a runtime policy needs a non-empty `id`"));
            String::new()
        }
    };
    let enabled = match fields.get("enabled") {
        None => true,
        Some(Value::Bool(enabled)) => *enabled,
        Some(_) => {
            errors.push(FieldError::new(format!("{at}/enabled"), "type", "`enabled` must be a boolean"));
            true
        }
    };
    let trigger = trigger(fields.get("trigger").unwrap_or(&Value::Null), &format!("{at}/trigger"), catalog)
        .map_err(|e| errors.extend(e))
        .ok();
    let action = action(fields.get("action").unwrap_or(&Value::Null), &format!("{at}/action"))
        .map_err(|e| errors.extend(e))
        .ok();
    if let (Some(Trigger::OnPostConditionFailed { .. }), Some(action)) = (&trigger, &action)
        && !matches!(action, Action::Replan { .. } | Action::Fail { .. } | Action::Emit { .. } | Action::Hitl { .. })
    {
        errors.push(FieldError::new(
            format!("{at}/action/type"),
            "unsupported",
            format!("after failed post-conditions a policy may replan, fail, emit or hitl, not {}", action.name()),
        ));
    }
    match (trigger, action) {
        (Some(trigger), Some(action)) if errors.is_empty() => Ok(RuntimePolicy { id, enabled, trigger, action }),
        _ => Err(errors),
    }
}

fn trigger(value: &Value, at: &str, catalog: &Catalog) -> Result<Trigger, Vec<FieldError>> {
    let kind = value.get("kind").and_then(Value::as_str);
    match kind {
        Some("onStart") => Ok(Trigger::OnStart),
        Some("onNodeComplete") => {
            let selector = selector(value.get("selector"), &format!("{at}/selector"))?;
            let condition =
                value.get("condition").map(|c| condition(c, &format!("{at}/condition"), catalog)).transpose()?;
            Ok(Trigger::OnNodeComplete { selector, condition })
        }
        Some("onPostConditionFailed") => {
            let selector = selector(value.get("selector"), &format!("{at}/selector"))?;
            let max_retries = match value.get("maxRetries") {
                None => None,
                Some(n) => {
                    Some(n.as_u64().filter(|n| *n <= 10).and_then(|n| u32::try_from(n).ok()).ok_or_else(|| {
                        vec![FieldError::new(
                            format!("{at}/maxRetries"),
                            "range",
                            "`maxRetries` must be an integer 0..=10",
                        )]
                    })?)
                }
            };
            Ok(Trigger::OnPostConditionFailed { selector, max_retries })
        }
        Some(kind @ ("onValidationFail" | "onTimeout" | "onMetricBelow" | "manual")) => Err(vec![FieldError::new(
            format!("{at}/kind"),
            "unsupported",
            format!(
                "runtime policy trigger \"{kind}\" is not supported by this flexrun version; supported triggers: {TRIGGERS}"
            ),
        )]),
        Some(other) => Err(vec![FieldError::new(
            format!("{at}/kind"),
            "unknown_trigger",
            format!("unknown runtime policy trigger \"{other}\"; supported triggers: {TRIGGERS}"),
        )]),
        None => Err(vec![FieldError::new(format!("{at}/kind"), "required", "a trigger needs a `kind`")]),
    }
}

fn selector(value: Option<&Value>, at: &str) -> Result<Selector, Vec<FieldError>> {
    let Some(value) = value else { return Ok(Selector::default()) };
    let Some(fields) = value.as_object() else {
        return Err(vec![FieldError::new(at, "type", "a selector must be an object")]);
    };
    let mut errors = Vec::new();
    let mut text = |key: &str| match fields.get(key) {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            errors.push(FieldError::new(format!("{at}/{key}"), "type", format!("`{key}` must be a string")));
            None
        }
    };
    let selector = Selector { node_id: text("nodeId"), kind: text("kind"), capability_id: text("capabilityId") };
    for key in fields.keys().filter(|k| !["nodeId", "kind", "capabilityId"].contains(&k.as_str())) {
        errors.push(FieldError::new(
            format!("{at}/{key}"),
            "unknown_field",
            format!("a selector has `nodeId`, `kind` and `capabilityId`, not `{key}`"),
        ));
    }
    if errors.is_empty() { Ok(selector) } else { Err(errors) }
}

/// A condition: `{dsl}` (names relative to the node's output; `facets.*` and `run.*` as in goal
/// conditions), `{jsonLogic}`, or a bare JSON-Logic rule.
fn condition(value: &Value, at: &str, catalog: &Catalog) -> Result<PolicyCondition, Vec<FieldError>> {
    if let Some(source) = value.get("dsl").and_then(Value::as_str) {
        let at = format!("{at}/dsl");
        let compiled = dsl::compile(source, catalog, Scope::Relative { schema: None })
            .map_err(|errors| errors.into_iter().map(|e| FieldError::from_dsl(at.clone(), e)).collect::<Vec<_>>())?;
        let rule = Rule::from_dsl(compiled.json_logic, compiled.eval_logic)
            .map_err(|message| vec![FieldError::new(at.clone(), "invalid_json_logic", message)])?;
        return Ok(PolicyCondition { expression: compiled.canonical_dsl, rule });
    }
    let (logic, at) = match value.get("jsonLogic") {
        Some(logic) => (logic.clone(), format!("{at}/jsonLogic")),
        None => (value.clone(), at.to_string()),
    };
    let expression = logic.to_string();
    let (rule, _) = dsl::json_logic_rule(logic, catalog, Scope::Relative { schema: None }).map_err(|message| {
        vec![FieldError::new(at, "invalid_json_logic", format!("not a valid JSON-Logic rule: {message}"))]
    })?;
    Ok(PolicyCondition { expression, rule })
}

fn action(value: &Value, at: &str) -> Result<Action, Vec<FieldError>> {
    let error = |path: &str, code: &str, message: String| vec![FieldError::new(format!("{at}{path}"), code, message)];
    let text = |key: &str| value.get(key).and_then(Value::as_str).map(String::from);
    let kind = value.get("type").and_then(Value::as_str);
    match kind {
        Some("replan") => Ok(Action::Replan { rationale: text("rationale") }),
        Some("fail") => Ok(Action::Fail { message: text("message") }),
        Some("emit") => match text("event").filter(|e| !e.trim().is_empty()) {
            Some(event) => Ok(Action::Emit { event, payload: value.get("payload").cloned().unwrap_or(Value::Null) }),
            None => Err(error("/event", "required", "an emit action needs a non-empty `event`".into())),
        },
        Some("goto") => {
            let Some(next) = text("next").filter(|n| !n.trim().is_empty()) else {
                return Err(error("/next", "required", "a goto action needs `next`: the node to run again".into()));
            };
            let max_attempts = match value.get("maxAttempts") {
                None => 1,
                Some(n) => match n.as_u64().filter(|n| (1..=100).contains(n)).and_then(|n| u32::try_from(n).ok()) {
                    Some(n) => n,
                    None => {
                        return Err(error("/maxAttempts", "range", "`maxAttempts` must be an integer 1..=100".into()));
                    }
                },
            };
            Ok(Action::Goto { next, max_attempts })
        }
        Some("pause") => Ok(Action::Pause { reason: text("reason") }),
        Some("hitl") => {
            let follow_up = |key: &str| -> Result<Option<Box<Action>>, Vec<FieldError>> {
                let Some(follow) = value.get(key) else { return Ok(None) };
                let action = action(follow, &format!("{at}/{key}"))?;
                if matches!(action, Action::Hitl { .. } | Action::Pause { .. }) {
                    return Err(error(
                        &format!("/{key}/type"),
                        "unsupported",
                        format!("`{key}` may replan, fail, emit or goto, not wait for an operator again"),
                    ));
                }
                Ok(Some(Box::new(action)))
            };
            let approve = follow_up("approveAction");
            let reject = follow_up("rejectAction");
            match (approve, reject) {
                (Ok(approve), Ok(reject)) => Ok(Action::Hitl { rationale: text("rationale"), approve, reject }),
                (approve, reject) => Err([approve.err(), reject.err()].into_iter().flatten().flatten().collect()),
            }
        }
        Some(legacy) if LEGACY_ACTIONS.iter().any(|(old, _)| *old == legacy) => {
            let canonical = LEGACY_ACTIONS.iter().find(|(old, _)| *old == legacy).map_or("", |(_, new)| new);
            Err(error(
                "/type",
                "legacy_action",
                format!(
                    "Legacy runtime policy action \"{legacy}\" detected. Update the policy to use canonical action \
                     \"{canonical}\"."
                ),
            ))
        }
        Some(other) => Err(error(
            "/type",
            "unknown_action",
            format!(
                "Unknown runtime policy action \"{other}\". Supported actions: goto, replan, hitl, fail, pause, emit."
            ),
        )),
        None => Err(error("/type", "required", "an action needs a `type`".into())),
    }
}

/// The first enabled `onStart` policy.
pub fn on_start(policies: &[RuntimePolicy]) -> Option<&RuntimePolicy> {
    policies.iter().find(|p| p.enabled && p.trigger == Trigger::OnStart)
}

/// The first enabled `onPostConditionFailed` policy whose selector matches `node`.
pub fn on_post_condition_failed<'p>(
    policies: &'p [RuntimePolicy],
    node: &CompletedNode<'_>,
) -> Option<&'p RuntimePolicy> {
    policies.iter().filter(|p| p.enabled).find(
        |policy| matches!(&policy.trigger, Trigger::OnPostConditionFailed { selector, .. } if selector.matches(node)),
    )
}

/// The first enabled `onNodeComplete` policy whose selector matches `node` and whose condition
/// holds (an evaluation error counts as not holding). `skip` leaves out policies that may not fire
/// again (a `goto` past its attempts). `snapshot` and `run` are what `facets.*` and `run.*` read.
pub fn first_match<'p>(
    policies: &'p [RuntimePolicy],
    node: &CompletedNode<'_>,
    snapshot: &Value,
    run: &Value,
    skip: impl Fn(&RuntimePolicy) -> bool,
) -> Option<&'p RuntimePolicy> {
    policies.iter().filter(|p| p.enabled && !skip(p)).find(|policy| {
        let Trigger::OnNodeComplete { selector, condition } = &policy.trigger else { return false };
        selector.matches(node)
            && condition.as_ref().is_none_or(|c| c.rule.holds(&data(node, snapshot, run)) == Ok(true))
    })
}

impl Selector {
    fn matches(&self, node: &CompletedNode<'_>) -> bool {
        let same = |wanted: &Option<String>, actual: &str| wanted.as_deref().is_none_or(|w| w == actual);
        same(&self.node_id, node.node_id)
            && same(&self.kind, node.kind)
            && same(&self.capability_id, node.capability_id)
    }
}

/// What a condition reads: the node's output fields (relative names), `node.*`, the run context
/// (`facets.*`) and `run.*`.
fn data(node: &CompletedNode<'_>, snapshot: &Value, run: &Value) -> Value {
    let mut data = match node.output {
        Value::Object(fields) => fields.clone(),
        other => Map::from_iter([("value".to_string(), other.clone())]),
    };
    data.insert(
        "node".into(),
        json!({"id": node.node_id, "capabilityId": node.capability_id, "kind": node.kind, "stage": node.stage}),
    );
    data.insert("metadata".into(), json!({"runContextSnapshot": snapshot}));
    data.insert(RUN_VAR.into(), run.clone());
    Value::Object(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Catalog {
        Catalog::builtin()
    }

    fn parse_one(policy: Value) -> Result<RuntimePolicy, Vec<FieldError>> {
        parse(&json!([policy]), "/policies/runtime", &catalog()).map(|mut p| p.remove(0))
    }

    fn node<'a>(output: &'a Value) -> CompletedNode<'a> {
        CompletedNode { node_id: "draft", capability_id: "writer", kind: "execution", stage: "draft", output }
    }

    #[test]
    fn parses_triggers_and_actions() {
        let p = parse_one(json!({"id": "low", "trigger": {"kind": "onNodeComplete",
            "selector": {"capabilityId": "writer"}, "condition": {"dsl": "quality_score < 0.8"}},
            "action": {"type": "goto", "next": "draft", "maxAttempts": 2}}))
        .unwrap();
        assert!(p.enabled);
        assert_eq!(p.action, Action::Goto { next: "draft".into(), max_attempts: 2 });
        let Trigger::OnNodeComplete { selector, condition } = &p.trigger else { panic!() };
        assert_eq!(selector.capability_id.as_deref(), Some("writer"));
        assert_eq!(condition.as_ref().unwrap().expression, "quality_score < 0.8");
        let start = parse_one(json!({"id": "s", "trigger": {"kind": "onStart"}, "action": {"type": "replan"}}));
        assert_eq!(start.unwrap().trigger, Trigger::OnStart);
        let ask = parse_one(json!({"id": "a", "trigger": {"kind": "onStart"}, "action": {"type": "hitl",
            "rationale": "check", "rejectAction": {"type": "goto", "next": "draft"}}}));
        let Action::Hitl { rationale, approve, reject } = ask.unwrap().action else { panic!() };
        assert_eq!((rationale.as_deref(), approve), (Some("check"), None));
        assert_eq!(reject.as_deref(), Some(&Action::Goto { next: "draft".into(), max_attempts: 1 }));
    }

    #[test]
    fn rejects_unsupported_legacy_and_unknown_with_their_pointers() {
        let error = |policy: Value| parse_one(policy).unwrap_err();
        let e = error(
            json!({"id": "g", "trigger": {"kind": "onPostConditionFailed"}, "action": {"type": "goto", "next": "a"}}),
        );
        assert_eq!((e[0].path.as_str(), e[0].code.as_str()), ("/policies/runtime/0/action/type", "unsupported"));
        let e = error(json!({"id": "t", "trigger": {"kind": "onTimeout", "ms": 5}, "action": {"type": "fail"}}));
        assert_eq!((e[0].path.as_str(), e[0].code.as_str()), ("/policies/runtime/0/trigger/kind", "unsupported"));
        let e = error(json!({"id": "h", "trigger": {"kind": "onStart"},
                             "action": {"type": "hitl", "approveAction": {"type": "pause"}}}));
        assert_eq!(
            (e[0].path.as_str(), e[0].code.as_str()),
            ("/policies/runtime/0/action/approveAction/type", "unsupported")
        );
        let e = error(json!({"id": "l", "trigger": {"kind": "onStart"}, "action": {"type": "hitl_pause"}}));
        assert_eq!(e[0].code, "legacy_action");
        assert_eq!(
            e[0].message,
            "Legacy runtime policy action \"hitl_pause\" detected. Update the policy to use canonical action \"hitl\"."
        );
        let e = error(json!({"id": "u", "trigger": {"kind": "onStart"}, "action": {"type": "explode"}}));
        assert!(e[0].message.starts_with("Unknown runtime policy action \"explode\""));
        let e = error(json!({"trigger": {"kind": "nope"}, "action": {}}));
        let codes: Vec<&str> = e.iter().map(|e| e.code.as_str()).collect();
        assert_eq!(codes, ["required", "unknown_trigger", "required"]);
        let twice = json!([{"id": "a", "trigger": {"kind": "onStart"}, "action": {"type": "fail"}},
                           {"id": "a", "trigger": {"kind": "onStart"}, "action": {"type": "fail"}}]);
        assert_eq!(parse(&twice, "/p", &catalog()).unwrap_err()[0].path, "/p/1/id");
    }

    #[test]
    fn the_first_enabled_matching_policy_wins() {
        let policies = parse(
            &json!([
                {"id": "off", "enabled": false, "trigger": {"kind": "onNodeComplete"}, "action": {"type": "fail"}},
                {"id": "other", "trigger": {"kind": "onNodeComplete", "selector": {"nodeId": "polish"}},
                 "action": {"type": "fail"}},
                {"id": "low", "trigger": {"kind": "onNodeComplete", "condition": {"dsl": "quality_score < 0.8"}},
                 "action": {"type": "replan"}},
                {"id": "any", "trigger": {"kind": "onNodeComplete"}, "action": {"type": "emit", "event": "done"}}
            ]),
            "/p",
            &catalog(),
        )
        .unwrap();
        let pick = |output: Value| {
            first_match(&policies, &node(&output), &json!({}), &json!({}), |_| false).map(|p| p.id.clone())
        };
        assert_eq!(pick(json!({"quality_score": 0.5})).as_deref(), Some("low"));
        assert_eq!(pick(json!({"quality_score": 0.9})).as_deref(), Some("any"));
        let skipped =
            first_match(&policies, &node(&json!({"quality_score": 0.5})), &json!({}), &json!({}), |p| p.id == "low");
        assert_eq!(skipped.map(|p| p.id.as_str()), Some("any"));
    }
}
