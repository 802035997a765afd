//! `/ui/capabilities`: the registered capabilities as callers are shown them — no secret, no
//! endpoint query string or credentials (`Capability::shown`) — and the MCP servers whose tools
//! are among them, with their state.

use actix_web::{HttpResponse, get, web};
use askama::Template;
use serde_json::Value;

use super::page::{self, Chrome};
use super::viewer::Viewer;
use crate::services::Services;

struct Row {
    id: String,
    name: String,
    summary: String,
    kind: String,
    agent_type: String,
    inputs: String,
    outputs: String,
    /// The output contract's mode (`json_schema`, `facets`, `freeform`).
    contract: String,
    post_conditions: usize,
    /// The registration as shown, pretty-printed.
    registration: String,
}

impl Row {
    fn of(shown: &Value) -> Self {
        let text = |key: &str| shown[key].as_str().unwrap_or_default().to_string();
        let list = |key: &str| {
            shown[key]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
                .unwrap_or_default()
        };
        let registration = &shown["registration"];
        Self {
            id: text("capabilityId"),
            name: text("displayName"),
            summary: text("summary"),
            kind: text("kind"),
            agent_type: text("agentType"),
            inputs: list("inputFacets"),
            outputs: list("outputFacets"),
            contract: registration["outputContract"]["mode"].as_str().unwrap_or_default().to_string(),
            post_conditions: registration["postConditions"].as_array().map_or(0, Vec::len),
            registration: serde_json::to_string_pretty(registration).unwrap_or_default(),
        }
    }
}

/// A registered MCP server, as `GET /api/v1/flex/mcp-servers` shows it (no header value or token).
struct ServerRow {
    id: String,
    url: String,
    state: String,
    /// The protocol revision when ready, the last error when unreachable.
    detail: String,
    tools: u64,
}

impl ServerRow {
    fn of(shown: &Value) -> Self {
        let text = |key: &str| shown[key].as_str().unwrap_or_default().to_string();
        let detail = match shown["state"].as_str() {
            Some("unreachable") => format!("{} (tried {})", text("error"), text("triedAt")),
            Some("ready") => format!("protocol {}", text("protocol")),
            _ => String::new(),
        };
        Self {
            id: text("id"),
            url: text("url"),
            state: text("state"),
            detail,
            tools: shown["toolCount"].as_u64().unwrap_or(0),
        }
    }
}

#[derive(Template)]
#[template(path = "console/capabilities.html")]
struct CapabilitiesPage {
    chrome: Chrome,
    rows: Vec<Row>,
    servers: Vec<ServerRow>,
}

impl page::Page for CapabilitiesPage {
    fn chrome(&self) -> &Chrome {
        &self.chrome
    }
}

/// `GET /ui/capabilities`, in id order.
#[get("/capabilities")]
pub async fn show(viewer: Viewer, services: web::Data<Services>) -> HttpResponse {
    let snapshot = services.registry.snapshot();
    let mut shown: Vec<Value> = snapshot.values().map(|c| c.shown(&services.redaction)).collect();
    shown.sort_by(|a, b| a["capabilityId"].as_str().cmp(&b["capabilityId"].as_str()));
    page::html(&CapabilitiesPage {
        chrome: Chrome::new("capabilities", Some(&viewer)),
        rows: shown.iter().map(Row::of).collect(),
        servers: services.mcp.list().iter().map(ServerRow::of).collect(),
    })
}
