//! Runs as lists show them: a page of runs, newest first, with what each row shows of its run —
//! read from the runs' rows alone, never from their logs, so a page costs one query.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::id::RunId;
use super::status::RunStatus;
use crate::config::ReplanSettings;
use crate::services::Services;
use crate::store::StoreError;
use crate::store::runs::{self, RunRow};
use flexrun_core::usage::Usage;

/// A run as lists show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunListEntry {
    pub run_id: String,
    pub status: RunStatus,
    pub owner: Option<String>,
    pub objective: String,
    pub thread_id: Option<String>,
    pub plan_version: i32,
    pub replans: i32,
    /// The code of the error the run ended with.
    pub error: Option<String>,
    /// The run's cap on replans (`policies.replan.maxReplans`, else the configured one).
    pub max_replans: Option<u32>,
    /// What its model calls used and cost, in all (none for runs stored before usage was
    /// recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Which runs a list shows.
#[derive(Debug, Clone, Default)]
pub struct RunQuery {
    pub status: Option<RunStatus>,
    /// Only this principal's runs (a caller sees only its own).
    pub owner: Option<String>,
    pub objective_contains: Option<String>,
    /// Only the runs created at or after this time, and before that one.
    pub created_from: Option<DateTime<Utc>>,
    pub created_before: Option<DateTime<Utc>>,
    /// Only this run (does it pass the other filters?).
    pub run_id: Option<String>,
}

/// A page of runs, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunList {
    pub runs: Vec<RunListEntry>,
    /// Where the next page starts (`cursor=`), if there is one.
    pub next_cursor: Option<String>,
}

impl RunList {
    /// A page of at most `limit` runs (1 to 500), newest first, from `cursor` on, those `query`
    /// asks for.
    pub async fn read(
        services: &Services,
        query: RunQuery,
        cursor: Option<RunId>,
        limit: i64,
    ) -> Result<Self, StoreError> {
        let limit = limit.clamp(1, 500);
        let cursor = cursor.map(|id| id.to_string());
        let page = services
            .store
            .read(move |conn| {
                let filter = runs::Filter {
                    status: query.status,
                    owner: query.owner.as_deref(),
                    objective_contains: query.objective_contains.as_deref(),
                    created_from: query.created_from.map(|t| t.naive_utc()),
                    created_before: query.created_before.map(|t| t.naive_utc()),
                    run_id: query.run_id.as_deref(),
                };
                runs::page(conn, filter, cursor.as_deref(), limit + 1)
            })
            .await?;
        let shown = usize::try_from(limit).unwrap_or_default();
        let next_cursor = page.get(shown).and(page.get(shown.saturating_sub(1))).map(|last| last.run_id.clone());
        let settings = &services.settings.replan;
        Ok(Self { runs: page.iter().take(shown).map(|row| RunListEntry::of(row, settings)).collect(), next_cursor })
    }
}

impl RunListEntry {
    pub fn of(row: &RunRow, settings: &ReplanSettings) -> Self {
        #[derive(Deserialize)]
        struct Coded {
            code: Option<String>,
        }
        let error = row.error.as_deref().and_then(|e| serde_json::from_str::<Coded>(e).ok()).and_then(|e| e.code);
        Self {
            run_id: row.run_id.clone(),
            status: row.status,
            owner: row.owner.clone(),
            objective: row.objective.clone(),
            thread_id: row.thread_id.clone(),
            plan_version: row.plan_version,
            replans: row.replans,
            error,
            max_replans: match row.max_replans {
                Some(cap) => u32::try_from(cap).ok(),
                None => super::legacy::max_replans(&row.envelope, settings),
            },
            usage: row.usage.as_deref().and_then(|usage| serde_json::from_str(usage).ok()),
            created_at: row.created_at.and_utc(),
            updated_at: row.updated_at.and_utc(),
        }
    }
}
