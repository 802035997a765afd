//! The one writer of a run's event log, for its coordinator and operator commands alike.
//!
//! [`RunLog::stage`] gives each event its place in the log (the next `seq`, a timestamp, the
//! frame header), works out the rows it changes ([`projection`](super::projection)) and applies
//! it to the run's [`RunState`]; [`RunLog::commit`] writes the staged frames, those rows and the
//! run row's change (status, counters, outcome — read off the state) in one transaction, and
//! only then publishes the frames. A frame a client sees is therefore always in the log, and the
//! state the writer holds is always the fold of the log it wrote.
//!
//! Whoever holds a `RunLog` holds the run's [`Claim`]: it is the run's only writer in this
//! process, so its `seq` numbers cannot collide with another writer's. (The `(run_id, seq)`
//! primary key backs this up across processes.) With several nodes on one database the claim
//! carries the run's lease epoch, and every commit checks it first, in the same transaction
//! ([`Lease`]): a node whose lease moved on writes nothing more, not a frame, row or status.
//! Every such commit also notifies the other nodes (`NOTIFY`), whose clients may follow the run.

use std::sync::Arc;

use chrono::{SubsecRound, Utc};

use super::id::RunId;
use super::lease::claims::Claim;
use super::lease::notify;
use super::projection::{RowWrite, project, stored};
use super::spans;
use super::state::{ApplyError, At, RunState};
use super::status::RunStatus;
use super::usage::{Caller, Unrecorded};
use crate::budget::Spent;
use crate::events::payload::ReplanReason;
use crate::events::{Bus, BusMessage, Event, Frame, FrameHeader};
use crate::redact::Redaction;
use crate::services::{CommitObserver, Services};
use crate::store::runs::{self, Outcome, Progress, RunRow};
use crate::store::{Store, StoreError, events, leases};
use crate::telemetry;
use crate::thread::ThreadRule;
use crate::traces::Traces;
use flexrun_core::usage::{CallUsage, Usage};

/// Why an event was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The event does not follow from the run's state: a bug, never a client's mistake.
    #[error("the event does not fit the run's state: {0}")]
    Apply(#[from] ApplyError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The node drains: its coordinators stop at their next wait and hand the run back.
    #[error("the node is draining")]
    Draining,
}

/// The run row as last committed: what the next commit changes.
#[derive(Debug, Clone, Copy, PartialEq)]
struct RowState {
    status: RunStatus,
    progress: Progress,
}

/// A run's event log, held by its one writer.
pub struct RunLog {
    state: RunState,
    header: FrameHeader,
    /// Judges each frame's keys as it is encoded, so its live streams need not.
    redaction: Redaction,
    claim: Claim,
    store: Store,
    bus: Arc<Bus>,
    observer: Option<CommitObserver>,
    staged: Vec<Frame>,
    rows: Vec<RowWrite>,
    row: RowState,
    /// A new run: its row is inserted by the first commit, which holds the thread's rule.
    created: Option<(RunRow, ThreadRule)>,
    /// The replans the staged events grant, counted in the metrics once committed.
    granted: Vec<ReplanReason>,
    /// Model calls made whose outcome is not staged yet: their usage goes on the frame that
    /// records it (`flexrun_core::run::usage`).
    unrecorded: Unrecorded,
    /// Where the run's spans go: the log sends those its frames close (an operator's wait, the
    /// run itself).
    traces: Traces,
}

impl RunLog {
    /// The log of a run being created: the first commit inserts `row` (its status and counters
    /// as the state has them by then).
    pub fn create(services: &Services, claim: Claim, state: RunState, row: RunRow, rule: ThreadRule) -> Self {
        let committed = RowState { status: state.status, progress: progress_of(&state) };
        Self::new(services, claim, state, committed, Some((row, rule)))
    }

    /// The log of a stored run, `state` folded from it; `row` is its stored row.
    pub fn resume(services: &Services, claim: Claim, state: RunState, row: &RunRow) -> Self {
        let status = row.status;
        let committed = RowState { status, progress: stored_progress(row) };
        Self::new(services, claim, state, committed, None)
    }

    fn new(
        services: &Services,
        claim: Claim,
        state: RunState,
        row: RowState,
        created: Option<(RunRow, ThreadRule)>,
    ) -> Self {
        let header = FrameHeader {
            run_id: state.run_id.as_str().into(),
            correlation_id: state.correlation_id.as_str().into(),
            plan_version: None,
        };
        Self {
            header,
            redaction: services.redaction.clone(),
            claim,
            store: services.store.clone(),
            bus: services.bus.clone(),
            observer: services.commit_observer.clone(),
            staged: Vec::new(),
            rows: Vec::new(),
            row,
            created,
            granted: Vec::new(),
            unrecorded: Unrecorded::default(),
            traces: services.traces.clone(),
            state,
        }
    }

    pub fn state(&self) -> &RunState {
        &self.state
    }

    pub fn run_id(&self) -> &RunId {
        &self.state.run_id
    }

    pub fn claim(&self) -> &Claim {
        &self.claim
    }

    /// Gives `events` their places in the log and applies them to the state; they are written
    /// by the next [`Self::commit`]. Only for events a commit follows at once, with no call to
    /// wait on in between: a frame is sent only after it is committed.
    pub fn stage(&mut self, events: Vec<Event>) -> Result<(), ApplyError> {
        for mut event in events {
            self.unrecorded.attach(&mut event, &self.state.usage);
            // The frame shows milliseconds: the state applies the time the frame shows.
            let at = At { seq: self.state.last_seq.next(), timestamp: Utc::now().trunc_subsecs(3) };
            let rows = project(&self.state, at, &event);
            if let Event::HitlResolved(resolved) = &event {
                spans::operator_wait(&self.traces, &self.state, resolved);
            }
            self.state.apply(at, &event)?;
            self.granted.extend(event.granted_replan());
            self.header.plan_version = Some(self.state.plan_version()).filter(|v| *v > 0);
            let frame = Frame::encode_at(&self.header, at.seq, at.timestamp, event, &self.redaction);
            debug_assert_decodes(&frame);
            self.rows.extend(rows);
            self.staged.push(frame);
        }
        Ok(())
    }

    /// A model call `caller` made that got an answer: its usage is recorded on the frame that
    /// records the call's outcome, when that is staged.
    pub fn called(&mut self, caller: Caller, usage: Option<CallUsage>) {
        if let Some(usage) = usage {
            self.unrecorded.add(caller, usage);
        }
    }

    /// What the run has spent as its budget counts it: what its frames recorded and the calls
    /// made since, whose outcome is not staged yet.
    pub fn spent(&self) -> Spent {
        let mut spent = self.state.usage.spent;
        self.unrecorded.add_to(&mut spent);
        spent
    }

    /// Writes that no frame carries (a goal evaluation, an operator's decision record), made by
    /// the next commit after the rows of the staged events.
    pub fn stage_rows(&mut self, rows: impl IntoIterator<Item = RowWrite>) {
        self.rows.extend(rows);
    }

    /// [`Self::stage`], then [`Self::commit`].
    pub async fn record(&mut self, events: Vec<Event>) -> Result<(), LogError> {
        self.stage(events)?;
        self.commit().await
    }

    /// Commits what is staged — frames, rows, the run row's change — in one transaction, then
    /// publishes the frames. After a failure nothing is committed and this log is ahead of the
    /// database: drop it (the run carries on from what the database holds).
    pub async fn commit(&mut self) -> Result<(), LogError> {
        // Boxed: a commit's state (the row change, the write on its way) is kilobytes that the
        // future of every coordinator, waiting or not, would otherwise hold for its whole run.
        Box::pin(self.write()).await
    }

    async fn write(&mut self) -> Result<(), LogError> {
        let created = self.created.take();
        let change = self.run_change(created);
        let row_changed = change.is_some();
        let ended = match &change {
            Some(RunChange::End { to, .. }) => Some(*to),
            _ => None,
        };
        if self.staged.is_empty() && self.rows.is_empty() && change.is_none() {
            return Ok(());
        }
        let frames: Arc<[Frame]> = std::mem::take(&mut self.staged).into();
        let rows = std::mem::take(&mut self.rows);
        let run_id = self.state.run_id.to_string();
        let committed = frames.clone();
        let lease = self.lease(matches!(change, Some(RunChange::Create(..))));
        self.store
            .write(move |conn| {
                if let Some(lease) = &lease {
                    lease.check(conn, &run_id)?;
                }
                if let Some(change) = &change {
                    change.execute(conn, &run_id)?;
                }
                if let Some(lease) = &lease {
                    lease.finish(conn, &run_id)?;
                }
                for row in &rows {
                    row.execute(conn, &run_id)?;
                }
                events::append(conn, &run_id, &committed)
            })
            .await?;
        self.row = RowState { status: self.state.status, progress: progress_of(&self.state) };
        self.count_committed(ended);
        if self.state.status == RunStatus::Cancelled && self.claim.stop_requested() {
            self.claim.honour_stop();
        }
        // Observed before it is published: whoever reads the frames then finds the commit observed.
        if let Some(observer) = &self.observer {
            observer(&self.state);
        }
        if !frames.is_empty() {
            self.bus.publish(self.state.run_id.as_str(), BusMessage::Frames(frames));
        }
        if row_changed {
            self.bus.announce(self.state.run_id.as_str());
        }
        Ok(())
    }

    /// What the next commit does with the run's lease, if runs are leased: a new run takes its
    /// first; a commit that leaves the run waiting or ended lets go of it; any other checks it.
    /// A new run created waiting (a fork whose plan needs approval) does both in its first commit.
    fn lease(&self, creating: bool) -> Option<Lease> {
        let epoch = self.claim.epoch()?;
        let active = self.state.status.is_active();
        if creating {
            let leasing = self.claim.leasing()?;
            let (node, seconds) = (leasing.node.clone(), leasing.lease.as_secs_f64());
            return Some(Lease::Take { node, seconds, release: (!active).then_some(epoch) });
        }
        Some(if active { Lease::Hold(epoch) } else { Lease::Release(epoch) })
    }

    /// Counts in the metrics what the commit recorded: the replans it granted, and the run's end.
    fn count_committed(&mut self, ended: Option<RunStatus>) {
        for reason in self.granted.drain(..) {
            telemetry::replan(reason.as_str());
        }
        if let Some(status) = ended {
            let code = self.state.end.as_ref().map(|end| end.error_summary().0).unwrap_or_default();
            telemetry::run_ended(status.as_str(), code);
            spans::ended(&self.traces, &self.state);
        }
    }

    /// Tells followers the run will publish nothing more from here (it ended or waits for an
    /// operator), so their streams end once caught up.
    pub fn settle(&self) {
        self.bus.settle(self.state.run_id.as_str());
    }

    /// What the next commit changes on the run row (`created`: a new run's row, inserted by it).
    ///
    /// Every change also saves the run's usage in all, for lists: a run's row changes with its
    /// status, plan version and replans, not with each step, so a list shows a running run's
    /// usage as of its last such change and an ended run's exactly (the run document is always
    /// exact). An extra statement per step would cost every run for a column only lists read.
    fn run_change(&self, created: Option<(RunRow, ThreadRule)>) -> Option<RunChange> {
        let (status, progress) = (self.state.status, progress_of(&self.state));
        if let Some((row, rule)) = created {
            let row = RunRow { status, usage: Some(self.usage_text()), ..row };
            return Some(RunChange::Create(Box::new(progress.stamp(row)), rule));
        }
        let from = self.row.status;
        if status == from {
            return (progress != self.row.progress).then(|| RunChange::Progress(progress, self.usage_text()));
        }
        let usage = self.usage_text();
        if status.is_terminal() {
            return Some(RunChange::End { from, to: status, outcome: outcome_of(&self.state), usage });
        }
        let progress = (progress != self.row.progress).then_some(progress);
        Some(RunChange::Move { from, to: status, progress, usage })
    }

    /// The run's usage in all as its row keeps it: without the breakdown by model.
    fn usage_text(&self) -> String {
        let total = Usage { by_model: None, ..self.state.usage.total.clone() };
        serde_json::to_string(&total).unwrap_or_default()
    }
}

/// A change to the run row, made with the frames that report it.
#[derive(Debug, Clone)]
enum RunChange {
    Create(Box<RunRow>, ThreadRule),
    /// A compare-and-set on the status: of two writers, only one finds it still `from`.
    Move {
        from: RunStatus,
        to: RunStatus,
        progress: Option<Progress>,
        usage: String,
    },
    End {
        from: RunStatus,
        to: RunStatus,
        outcome: Outcome,
        usage: String,
    },
    Progress(Progress, String),
}

impl RunChange {
    fn execute(&self, conn: &mut crate::store::DbConn, run_id: &str) -> Result<(), StoreError> {
        match self {
            Self::Create(row, rule) => {
                if let Some(thread_id) = &row.thread_id {
                    rule.hold(conn, thread_id)?;
                }
                runs::insert(conn, row)
            }
            Self::Move { from, to, progress, usage } => {
                runs::transition(conn, run_id, *from, *to, progress.as_ref(), usage)
            }
            Self::End { from, to, outcome, usage } => runs::end(conn, run_id, *from, *to, outcome, usage),
            Self::Progress(progress, usage) => runs::save_progress(conn, run_id, progress, usage),
        }
    }
}

/// What a commit of a leased run does with the lease, in the commit's transaction.
#[derive(Debug, Clone)]
enum Lease {
    /// A new run: its first lease, taken once its row is inserted — and let go of at once (at
    /// this epoch) when the run is created waiting for an operator: no node drives it then.
    Take { node: String, seconds: f64, release: Option<i64> },
    /// The lease must still be at this epoch (the fencing check), and stays.
    Hold(i64),
    /// The lease must still be at this epoch, and is let go of.
    Release(i64),
}

impl Lease {
    /// The fencing check, before anything else is written: it also locks the run's row, so a
    /// claim racing this commit waits for it and then takes a higher epoch.
    fn check(&self, conn: &mut crate::store::DbConn, run_id: &str) -> Result<(), StoreError> {
        match self {
            Self::Take { .. } => Ok(()),
            Self::Hold(epoch) => leases::fence(conn, run_id, *epoch),
            Self::Release(epoch) => leases::release(conn, run_id, *epoch),
        }
    }

    /// After the run row is written: a new run's lease, and the notification of the change.
    fn finish(&self, conn: &mut crate::store::DbConn, run_id: &str) -> Result<(), StoreError> {
        if let Self::Take { node, seconds, release } = self {
            leases::take_new(conn, run_id, node, *seconds)?;
            if let Some(epoch) = release {
                leases::release(conn, run_id, *epoch)?;
            }
        }
        leases::notify(conn, notify::CHANGED, &notify::changed_payload(run_id))
    }
}

/// The counters and plan version of a run, as its row keeps them.
fn progress_of(state: &RunState) -> Progress {
    let counts = &state.replans;
    Progress {
        plan_version: stored(state.plan_version()),
        planner_attempts: stored(state.planner_attempts),
        goal_condition_replans: stored(counts.goal_condition),
        replans: stored(counts.total),
        signal_replans: stored(counts.capability_signal),
        policy_replans: stored(counts.runtime_policy),
        operator_replans: stored(counts.operator),
        post_condition_replans: stored(counts.post_condition),
    }
}

/// The counters a stored row holds.
fn stored_progress(row: &RunRow) -> Progress {
    Progress {
        plan_version: row.plan_version,
        planner_attempts: row.planner_attempts,
        goal_condition_replans: row.goal_condition_replans,
        replans: row.replans,
        signal_replans: row.signal_replans,
        policy_replans: row.policy_replans,
        operator_replans: row.operator_replans,
        post_condition_replans: row.post_condition_replans,
    }
}

/// How an ended run's row records its end: its output, or its error.
fn outcome_of(state: &RunState) -> Outcome {
    match &state.end {
        Some(end) if end.error.is_none() => Outcome::Result(end.output.to_string()),
        Some(end) => Outcome::Error(end.error.as_ref().map(|e| e.to_string()).unwrap_or_default()),
        None => Outcome::Error(String::new()),
    }
}

/// Debug builds check that every frame written reads back as the event it was written from, so
/// a replay sees exactly what the live run applied.
fn debug_assert_decodes(frame: &Frame) {
    if cfg!(debug_assertions) {
        match Frame::decode(&frame.json) {
            Ok(decoded) => assert_eq!(decoded.event, *frame.event, "frame {} decodes differently", frame.json),
            Err(error) => panic!("frame {} does not decode: {error}", frame.json),
        }
    }
}
