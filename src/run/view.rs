//! One run as readers see it: [`RunView`], built from the run's [`RunState`] and its plan
//! versions' nodes (both folded from its log) and the rows that keep what frames do not (goal
//! evaluations, operator decisions). `GET /runs/{id}` serves it, `flexrun runs show` reads it back; every reader shows
//! the same run. Secrets are redacted by whoever serves it.

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::context::RunContext;
use super::decide::goals::EvaluationStatus;
use super::id::RunId;
use super::nodes::{NodeRecord, NodeTable};
use super::state::RunState;
use super::status::RunStatus;
use super::stored::{self, LegacyStart, LogReader, ResumeError};
use crate::caller::Caller;
use crate::condition::GoalConditionResult;
use crate::events::Seq;
use crate::events::payload::{ForkedFrom, HitlRequestInfo, ReplanInfo, RequestStatus, ReusedFrom, Verdict};
use crate::plan::{Plan, StoredNodeStatus};
use crate::replan_budget::{BudgetView, ReplanCounts};
use crate::services::Services;
use crate::store::evaluations::{self, RunOutputRow};
use crate::store::hitl::{self, DecisionRow, RequestRow};
use crate::store::runs::{self, RunRow};
use crate::store::{StoreError, leases};
use flexrun_core::budget::{BudgetLimits, Spent};
use flexrun_core::usage::Usage;

/// A run with its plan versions, nodes, goal evaluations and operator requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunView {
    pub run: RunSummary,
    /// The envelope as posted.
    pub envelope: Value,
    /// Every facet's current value, and who wrote it.
    pub context: RunContext,
    pub plan_versions: Vec<PlanVersionView>,
    /// The nodes of every plan version, in plan order.
    pub nodes: Vec<NodeView>,
    /// The goal evaluation of each plan version (the latest one).
    pub outputs: Vec<EvaluationView>,
    pub hitl_requests: Vec<RequestView>,
    /// Which node drives the run (several nodes on PostgreSQL; absent with SQLite).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseView>,
}

/// A run's lease: the node driving it (`None`: no node does — it is new, waits for an operator,
/// ended or was handed back), the fencing epoch, and how often a node died driving it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseView {
    pub owner: Option<String>,
    pub epoch: i64,
    pub expires_at: Option<DateTime<Utc>>,
    pub crash_attempts: i32,
}

impl From<leases::LeaseRow> for LeaseView {
    fn from(row: leases::LeaseRow) -> Self {
        Self {
            owner: row.lease_owner,
            epoch: row.lease_epoch,
            expires_at: row.lease_expires_at.map(|t| t.and_utc()),
            crash_attempts: row.crash_attempts,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    pub run_id: String,
    pub status: RunStatus,
    /// The principal that started the run.
    pub owner: Option<String>,
    pub objective: String,
    pub thread_id: Option<String>,
    pub correlation_id: String,
    pub plan_version: u32,
    pub planner_attempts: u32,
    pub replans: ReplanCounts,
    /// The caps and what was used of them (absent if the stored envelope's caps are unreadable).
    pub replan_budget: Option<BudgetView>,
    /// The final output, once the run completed.
    pub result: Value,
    /// How the run failed or was cancelled.
    pub error: Value,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The seq of the run's last frame: a client following its stream from here misses nothing.
    #[serde(default)]
    pub last_seq: u64,
    /// The run this one was started again from (`metadata.rerunOf`) or forked from.
    #[serde(default)]
    pub parent_run_id: Option<String>,
    /// Where the run was forked from: the parent's run, plan version and node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkedFrom>,
    /// The runs forked (or started again) from this one, oldest first, that the reader may see
    /// (at most [`FORKS_SHOWN`]).
    #[serde(default)]
    pub forks: Vec<String>,
    /// What its model calls used and cost, with a breakdown by model.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// The run's spending budget and what it has spent against it (a run's own view only; none:
    /// the run has no budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<SpendingView>,
}

/// A run's budget limits (as started with, or as last raised) and what counts against them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpendingView {
    #[serde(flatten)]
    pub limits: BudgetLimits,
    pub spent: Spent,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanVersionView {
    pub version: u32,
    pub plan: Plan,
    /// Why this version replaced the one before (`null` for the first plan).
    pub trigger: Option<ReplanInfo>,
    pub created_at: DateTime<Utc>,
    /// What producing this version (its drafts) and running its steps used.
    #[serde(default)]
    pub usage: Option<Usage>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeView {
    pub plan_version: i32,
    pub node_id: String,
    pub position: i32,
    pub capability_id: String,
    pub status: StoredNodeStatus,
    pub output: Value,
    pub error: Value,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub post_condition_results: Value,
    /// What this node's model calls in this plan version used (none: it made none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// A fork's node that did not run: whose output it took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused_from: Option<ReusedFrom>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvaluationView {
    pub plan_version: i32,
    pub status: EvaluationStatus,
    pub output: Value,
    pub goal_condition_results: Vec<GoalConditionResult>,
    pub recorded_at: DateTime<Utc>,
}

/// An operator request, where it went, and the decision that answered it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestView {
    #[serde(flatten)]
    pub request: HitlRequestInfo,
    pub status: RequestStatus,
    pub closed_at: Option<DateTime<Utc>>,
    pub decision: Option<DecisionView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionView {
    pub decision: Verdict,
    pub operator: Value,
    pub note: Option<String>,
    pub feedback: Option<String>,
    pub payload: Value,
    pub decided_at: DateTime<Utc>,
}

/// The rows a view needs besides the run's log.
struct Rows {
    forks: Vec<String>,
    outputs: Vec<RunOutputRow>,
    requests: Vec<RequestRow>,
    decisions: Vec<DecisionRow>,
    lease: Option<leases::LeaseRow>,
}

/// The most forks a run document lists.
pub const FORKS_SHOWN: i64 = 100;

/// Why a run cannot be shown.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the run's stored state is unreadable: {0}")]
    Unreadable(#[from] ResumeError),
}

/// The state of the run of `row` after its frame `upto` (all of its log with `None`), each event
/// read by `reader` first (which is handed back with the state). The log is folded a page at a
/// time as it is read ([`stored::fold_pages`]), so a reader holds the state and one page of the
/// log, never the whole log. Callers hold a permit of `Services::run_reads` meanwhile.
pub async fn state_of<R: LogReader + Send + 'static>(
    services: &Services,
    row: &RunRow,
    upto: Option<Seq>,
    reader: R,
) -> Result<(RunState, R), ViewError> {
    let id = RunId::parse(&row.run_id).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let correlation_id = row.correlation_id.clone();
    let legacy = LegacyStart::of(row, &services.settings.replan);
    let page = stored::fold_page(services);
    let upto = upto.unwrap_or(Seq::MAX);
    let folded = services
        .store
        .read(move |conn| stored::fold_pages(conn, (&id, &correlation_id), upto, (page, legacy.as_ref()), reader))
        .await?;
    Ok(folded?)
}

impl RunView {
    /// Reads run `run_id` and builds its view as `reader` sees it: with the runs forked or started
    /// again from it that are the reader's to see. `NotFound` if there is no such run or it is not
    /// the reader's to see — decided from its row, before its log is folded, so a caller naming
    /// another's run costs one read.
    pub async fn read(services: &Services, run_id: &RunId, reader: &Caller) -> Result<Self, ViewError> {
        let _reading = services.run_reads.acquire().await;
        let lookup = run_id.to_string();
        let row = services.store.read(move |conn| runs::get(conn, &lookup)).await?;
        if !reader.may_see(row.owner.as_deref()) {
            return Err(StoreError::NotFound(format!("run {run_id}")).into());
        }
        let (state, nodes) = state_of(services, &row, None, NodeTable::default()).await?;
        let id = run_id.to_string();
        let leased = services.claims.leasing().is_some();
        let owner = reader.owner_filter().map(String::from);
        let rows = services
            .store
            .read(move |conn| {
                let (requests, decisions) = hitl::for_run(conn, &id)?;
                let lease = if leased { Some(leases::of(conn, &id)?) } else { None };
                Ok(Rows {
                    forks: runs::reruns_of(conn, &id, owner.as_deref(), FORKS_SHOWN)?,
                    outputs: evaluations::of_run(conn, &id)?,
                    requests,
                    decisions,
                    lease,
                })
            })
            .await?;
        Ok(Self::build(&state, &row, nodes, rows))
    }

    fn build(state: &RunState, row: &RunRow, nodes: NodeTable, rows: Rows) -> Self {
        let replan_budget = state.replan_limits.map(|limits| BudgetView { limits, used: state.replans });
        // The document shows what the caller sent; nothing of the run is read from it.
        let envelope = json_or_null(Some(&row.envelope));
        let end = state.end.as_ref();
        let run = RunSummary {
            run_id: state.run_id.to_string(),
            status: state.status,
            owner: row.owner.clone(),
            objective: row.objective.clone(),
            thread_id: row.thread_id.clone(),
            correlation_id: state.correlation_id.clone(),
            plan_version: state.plan_version(),
            planner_attempts: state.planner_attempts,
            replans: state.replans,
            replan_budget,
            result: end.filter(|e| e.error.is_none()).map_or(Value::Null, |e| e.output.clone()),
            error: end.and_then(|e| e.error.clone()).unwrap_or(Value::Null),
            created_at: row.created_at.and_utc(),
            updated_at: row.updated_at.and_utc(),
            last_seq: state.last_seq.get(),
            parent_run_id: row.parent_run_id.clone(),
            forked_from: state.forked_from.clone(),
            forks: rows.forks,
            usage: Some(state.usage.total.clone()),
            budget: state.budget.map(|limits| SpendingView { limits, spent: state.usage.spent }),
        };
        let plan_versions = state
            .plans
            .iter()
            .map(|v| PlanVersionView {
                version: v.plan.version,
                plan: Plan::clone(&v.plan),
                trigger: v.replan.clone(),
                created_at: v.at,
                usage: Some(state.usage.versions.get(&v.plan.version).cloned().unwrap_or_default()),
            })
            .collect();
        let decisions = &rows.decisions;
        Self {
            run,
            envelope,
            context: state.context.clone(),
            plan_versions,
            nodes: nodes.into_nodes().into_iter().map(|record| node(record, state)).collect(),
            outputs: rows.outputs.iter().map(evaluation).collect(),
            hitl_requests: rows
                .requests
                .iter()
                .filter_map(|r| request(r, decisions.iter().find(|d| d.request_id == r.request_id)))
                .collect(),
            lease: rows.lease.map(LeaseView::from),
        }
    }
}

/// The run document readers get is bounded: at most this many bytes of values (outputs, facet
/// values, request contexts) are shown in place, the rest left out (`crate::elide`).
pub const DOCUMENT_VALUE_BYTES: usize = 1024 * 1024;

impl RunView {
    /// Where this view holds values whose size no request bounds, as JSON Pointers into its document: the
    /// only places [`Self::document`] leaves values out, and [`Self::value`] reads them back.
    pub fn value_slots(&self) -> Vec<String> {
        // The envelope is not among them: it was bounded when it was posted
        // (`limits.max_body_bytes`), and the console's composer posts it again whole.
        let mut slots = vec!["/run/result".to_string(), "/run/error".to_string()];
        slots.extend(self.context.facet_names().map(|facet| format!("/context/facets/{}/value", escape(facet))));
        for (index, _) in self.nodes.iter().enumerate() {
            slots.extend([format!("/nodes/{index}/output"), format!("/nodes/{index}/error")]);
        }
        for (index, evaluation) in self.outputs.iter().enumerate() {
            slots.push(format!("/outputs/{index}/output"));
            for (result, _) in evaluation.goal_condition_results.iter().enumerate() {
                slots.push(format!("/outputs/{index}/goalConditionResults/{result}/observedValue"));
            }
        }
        for (index, _) in self.hitl_requests.iter().enumerate() {
            slots.extend([format!("/hitlRequests/{index}/context"), format!("/hitlRequests/{index}/decision/payload")]);
        }
        slots
    }

    /// The view as JSON, its values together within [`DOCUMENT_VALUE_BYTES`]: a value left
    /// out is a marker saying its size and, through `href`, where to read it whole.
    pub fn document(&self, href: impl Fn(&str) -> String) -> Result<Value, serde_json::Error> {
        let mut document = serde_json::to_value(self)?;
        crate::elide::bound(&mut document, &self.value_slots(), DOCUMENT_VALUE_BYTES, |slot| Some(href(slot)));
        Ok(document)
    }

    /// This view with the values [`Self::document`] leaves out left out (for pages that show
    /// a run: the slots hold JSON values, which a marker is too).
    pub fn bounded(&self, href: impl Fn(&str) -> String) -> Result<Self, serde_json::Error> {
        serde_json::from_value(self.document(href)?)
    }

    /// The whole value at `pointer`, if it is one of [`Self::value_slots`].
    pub fn value(&self, pointer: &str) -> Result<Option<Value>, serde_json::Error> {
        if !self.value_slots().iter().any(|slot| slot == pointer) {
            return Ok(None);
        }
        Ok(serde_json::to_value(self)?.pointer_mut(pointer).map(Value::take))
    }
}

/// A key as a JSON Pointer segment (RFC 6901).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn node(record: NodeRecord, state: &RunState) -> NodeView {
    NodeView {
        usage: state.usage.nodes.get(&(record.plan_version, record.node_id.clone())).cloned(),
        reused_from: state.reused.get(&record.node_id).cloned(),
        plan_version: super::projection::stored(record.plan_version),
        position: i32::try_from(record.position).unwrap_or(i32::MAX),
        node_id: record.node_id,
        capability_id: record.capability_id,
        status: record.status,
        output: record.output.unwrap_or(Value::Null),
        error: record.error.unwrap_or(Value::Null),
        started_at: record.started_at,
        completed_at: record.completed_at,
        post_condition_results: record.post_condition_results.map_or(Value::Null, |results| json!(results)),
    }
}

fn evaluation(row: &RunOutputRow) -> EvaluationView {
    EvaluationView {
        plan_version: row.plan_version,
        status: row.status,
        output: json_or_null(Some(&row.output)),
        goal_condition_results: serde_json::from_str(&row.goal_condition_results).unwrap_or_default(),
        recorded_at: row.recorded_at.and_utc(),
    }
}

/// A stored request with its decision; `None` if its stored form is unreadable.
fn request(row: &RequestRow, decision: Option<&DecisionRow>) -> Option<RequestView> {
    let request = serde_json::from_str(&row.details).ok()?;
    Some(RequestView {
        request,
        status: row.status,
        closed_at: row.closed_at.map(utc),
        decision: decision.map(|d| DecisionView {
            decision: d.decision,
            operator: json_or_null(d.operator.as_deref()),
            note: d.note.clone(),
            feedback: d.feedback.clone(),
            payload: json_or_null(d.payload.as_deref()),
            decided_at: d.decided_at.and_utc(),
        }),
    })
}

fn utc(at: NaiveDateTime) -> DateTime<Utc> {
    at.and_utc()
}

/// Stored JSON text as a value (`null` when absent or unreadable).
fn json_or_null(text: Option<&str>) -> Value {
    text.and_then(|t| serde_json::from_str(t).ok()).unwrap_or(Value::Null)
}
