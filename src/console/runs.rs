//! `/ui/runs` — the run list, newest first, filtered by status, objective text and creation date
//! (the filters live in the URL, so a view can be bookmarked and shared). The page follows
//! `/ui/feed` for new runs and changed ones; an operator selects runs and cancels them together.

use actix_web::{HttpResponse, get, web};
use askama::Template;
use chrono::{DateTime, Datelike, Days, NaiveDate, Utc};
use serde::Deserialize;

use super::page::{self, Chrome};
use super::viewer::Viewer;
use crate::http::{Caller, Role};
use crate::run::list::{RunList, RunListEntry, RunQuery as Runs};
use crate::run::{RunId, RunStatus};
use crate::services::Services;

/// Runs per page.
const PAGE: i64 = 50;

/// Longest objective text filter (characters).
const TEXT_CHARS: usize = 200;

/// Characters of a filter value a refusal quotes: enough to recognise it, never the whole of a
/// long one.
const QUOTED_CHARS: usize = 40;

/// The list's filters, as the URL carries them (`?status=&q=&from=&to=`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Filters {
    #[serde(default)]
    status: String,
    #[serde(default)]
    q: String,
    /// Created on or after this day (UTC), `YYYY-MM-DD`.
    #[serde(default)]
    from: String,
    /// Created on or before this day (UTC).
    #[serde(default)]
    to: String,
}

/// The filters, parsed (an empty one filters nothing).
pub struct Parsed {
    pub status: Option<RunStatus>,
    pub text: String,
    pub from: Option<NaiveDate>,
    pub to: Option<NaiveDate>,
}

/// A filter value the list cannot read, and why, in words (the value quoted, bounded).
#[derive(Debug, Clone, PartialEq)]
pub struct BadFilter(pub String);

impl Filters {
    /// The filters, parsed. A status or day the list cannot read is refused, not ignored: a list
    /// that read `?status=bogus` as no filter would show every run as if they matched it (the
    /// API's list answers the same with 400 `invalid_query`). The text filter takes any text.
    pub fn parse(&self) -> Result<Parsed, BadFilter> {
        Ok(Parsed {
            status: status(&self.status)?,
            text: self.q.trim().chars().take(TEXT_CHARS).collect(),
            from: day("from", &self.from)?,
            to: day("to", &self.to)?,
        })
    }
}

/// The `status` filter: empty is any status.
fn status(value: &str) -> Result<Option<RunStatus>, BadFilter> {
    if value.trim().is_empty() {
        return Ok(None);
    }
    value.trim().parse::<RunStatus>().map(Some).map_err(|_| {
        let known: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
        BadFilter(format!("status “{}” is not a run status (one of {})", quoted(value), known.join(", ")))
    })
}

/// The `from` or `to` filter (`name`), a UTC day `YYYY-MM-DD`: empty is no limit.
fn day(name: &str, value: &str) -> Result<Option<NaiveDate>, BadFilter> {
    if value.trim().is_empty() {
        return Ok(None);
    }
    // Years of four digits: `%Y` also reads `-5000` and `+10000`, which no run was made in and
    // which the databases store or compare in ways of their own (PostgreSQL refuses some).
    NaiveDate::parse_from_str(value.trim(), "%Y-%m-%d")
        .ok()
        .filter(|day| (1..=9999).contains(&day.year()))
        .map(Some)
        .ok_or_else(|| BadFilter(format!("{name} “{}” is not a day (YYYY-MM-DD)", quoted(value))))
}

fn quoted(value: &str) -> std::borrow::Cow<'_, str> {
    crate::excerpt::excerpt(value.trim(), QUOTED_CHARS)
}

impl Parsed {
    /// No filter: every run the caller may see.
    pub fn none() -> Self {
        Self { status: None, text: String::new(), from: None, to: None }
    }

    /// The runs these filters keep, of those `caller` may see (`run_id`: only that one).
    pub fn query(&self, caller: &Caller, run_id: Option<String>) -> Runs {
        let midnight =
            |day: NaiveDate| DateTime::<Utc>::from_naive_utc_and_offset(day.and_time(Default::default()), Utc);
        Runs {
            status: self.status,
            owner: caller.owner_filter().map(String::from),
            objective_contains: Some(self.text.clone()).filter(|t| !t.is_empty()),
            created_from: self.from.map(midnight),
            created_before: self.to.and_then(|day| day.checked_add_days(Days::new(1))).map(midnight),
            run_id,
        }
    }

    fn any(&self) -> bool {
        self.status.is_some() || !self.text.is_empty() || self.from.is_some() || self.to.is_some()
    }

    /// The filters as a URL query, followed by `extra`.
    pub fn url_query(&self, extra: &[(&str, &str)]) -> String {
        let day = |d: Option<NaiveDate>| d.map(|d| d.to_string()).unwrap_or_default();
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        query
            .append_pair("status", self.status.map_or("", RunStatus::as_str))
            .append_pair("q", &self.text)
            .append_pair("from", &day(self.from))
            .append_pair("to", &day(self.to));
        query.extend_pairs(extra);
        query.finish()
    }
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    #[serde(flatten)]
    filters: Filters,
    cursor: Option<String>,
}

/// A run as a row of the list shows it.
pub struct Row {
    run_id: String,
    status: &'static str,
    error: Option<String>,
    objective: String,
    created_at: String,
    updated_at: String,
    plan_version: i32,
    replans: i32,
    max_replans: Option<u32>,
    /// What its model calls cost (`$0.0039`, `unknown` when a model has no price; empty for runs
    /// stored before usage was recorded), and the whole usage as its title.
    cost: String,
    usage: String,
    /// Who the run waits for, if it waits.
    waiting_for: &'static str,
    /// An operator may select it to cancel it.
    can_cancel: bool,
}

impl Row {
    pub fn of(run: RunListEntry, caller: &Caller) -> Self {
        let waiting_for = match run.status {
            RunStatus::AwaitingHitl => "an operator",
            RunStatus::AwaitingHuman => "a human task",
            RunStatus::Pending
            | RunStatus::Planning
            | RunStatus::Running
            | RunStatus::Completed
            | RunStatus::Failed
            | RunStatus::Cancelled => "",
        };
        let terminal = run.status.is_terminal();
        Self {
            created_at: run.created_at.to_rfc3339(),
            updated_at: run.updated_at.to_rfc3339(),
            run_id: run.run_id,
            status: run.status.as_str(),
            error: run.error,
            objective: crate::excerpt::excerpt(&run.objective, 300).into_owned(),
            plan_version: run.plan_version,
            replans: run.replans,
            max_replans: run.max_replans,
            cost: run.usage.as_ref().map_or_else(String::new, |usage| {
                usage.tally.cost_usd.map_or_else(|| "unknown".to_string(), |cost| cost.to_string())
            }),
            usage: run.usage.as_ref().map(ToString::to_string).unwrap_or_default(),
            waiting_for,
            can_cancel: caller.role == Role::Operator && !terminal,
        }
    }
}

/// One row alone, as the feed sends it to a list.
#[derive(Template)]
#[template(path = "console/run_row.html")]
pub struct RowHtml {
    pub run: Row,
    pub operator: bool,
}

#[derive(Template)]
#[template(path = "console/runs.html")]
struct RunsPage {
    chrome: Chrome,
    statuses: Vec<(&'static str, bool)>,
    filtered_by_status: bool,
    filtered: bool,
    text: String,
    from: String,
    to: String,
    runs: Vec<Row>,
    next_page: Option<String>,
    /// Where the page's feed of changed runs is, with its filters.
    feed: String,
    /// The first page shows new runs as they start; later pages do not.
    first_page: bool,
    /// Rows a page shows: the first page, growing with new runs, drops its oldest beyond it.
    page_size: i64,
    operator: bool,
}

impl page::Page for RunsPage {
    fn chrome(&self) -> &Chrome {
        &self.chrome
    }
}

/// `GET /ui/runs?status=&q=&from=&to=&cursor=`.
#[get("/runs")]
pub async fn list(viewer: Viewer, query: web::Query<ListQuery>, services: web::Data<Services>) -> HttpResponse {
    let caller = &viewer.caller;
    let ListQuery { filters, cursor } = query.into_inner();
    let parsed = match filters.parse() {
        Ok(parsed) => parsed,
        Err(BadFilter(reason)) => {
            let text = format!("The run list cannot filter by this: {reason}.");
            return page::message(Some(&viewer), 400, "Not a run list filter", &text);
        }
    };
    let first_page = cursor.is_none();
    // A cursor a page did not link to starts the list from the top.
    let cursor = cursor.and_then(|cursor| RunId::parse(&cursor).ok());
    let list = match RunList::read(&services, parsed.query(caller, None), cursor, PAGE).await {
        Ok(list) => list,
        Err(error) => return unavailable(&viewer, &error),
    };
    let next_page = list.next_cursor.map(|cursor| format!("/ui/runs?{}", parsed.url_query(&[("cursor", &cursor)])));
    let day = |d: Option<NaiveDate>| d.map(|d| d.to_string()).unwrap_or_default();
    page::html(&RunsPage {
        chrome: Chrome::new("runs", Some(&viewer)),
        statuses: RunStatus::ALL.iter().map(|s| (s.as_str(), Some(*s) == parsed.status)).collect(),
        filtered_by_status: parsed.status.is_some(),
        filtered: parsed.any(),
        from: day(parsed.from),
        to: day(parsed.to),
        runs: list.runs.into_iter().map(|run| Row::of(run, caller)).collect(),
        next_page,
        feed: format!("/ui/feed?{}", parsed.url_query(&[("list", "1")])),
        first_page,
        page_size: PAGE,
        operator: caller.role == Role::Operator,
        text: parsed.text,
    })
}

pub(super) fn unavailable(viewer: &Viewer, error: &dyn std::fmt::Display) -> HttpResponse {
    tracing::error!(error = %crate::excerpt::log(error), "console could not read runs");
    let text = "The database did not answer; try again shortly.";
    page::message(Some(viewer), 503, "Runs cannot be read right now", text)
}
