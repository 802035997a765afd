//! Capabilities: the steps a plan may use. A registration (API body or file) is validated into a
//! [`Capability`]; [`call`] says what one call is given and how it can fail; [`endpoint`] where
//! an `http` capability may point. The server holds the registered set and makes the calls.

pub mod call;
pub mod endpoint;
pub mod mcp_tool;
pub mod signal;
pub mod stored;

pub use call::{CapabilityError, Clarification, ContextBundle, PostConditionFailures, check_output};
pub use endpoint::{
    AddressGuard, EndpointAllowlist, RefusedAddress, UrlPrefix, UrlPrefixError, is_link_local_or_metadata,
};
pub use mcp_tool::{McpTool, ToolHints};
pub use signal::{Reply, Signal};

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use url::Url;

use crate::condition::GoalCondition;
use crate::condition::dsl::Catalog;
use crate::contract::OutputContract;
use crate::validation::{self, BodySchema, ConditionProblems, FieldError};

/// Said at start-up and in `GET /health` while nothing is registered: every run would fail to
/// plan, and nothing else says why.
pub const NONE_REGISTERED: &str = "no capability is registered, so every run will fail to plan: set \
    FLEXRUN_CAPABILITIES_DIR or register one (POST /api/v1/flex/capabilities/register)";

static SCHEMA: LazyLock<BodySchema> = LazyLock::new(|| BodySchema::builtin(include_str!("registration.schema.json")));

/// The JSON Schema of a registration (served at `GET /api/v1/flex/schemas/capability-registration`).
pub fn schema() -> &'static Value {
    SCHEMA.document()
}

/// The role a capability plays in a plan (shown to the planner; `capabilities.kind`).
#[cfg_attr(feature = "diesel", derive(diesel::expression::AsExpression, diesel::deserialize::FromSqlRow))]
#[cfg_attr(feature = "diesel", diesel(sql_type = diesel::sql_types::Text))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapabilityKind {
    Structuring,
    Execution,
    Validation,
    Transformation,
    Routing,
}

impl CapabilityKind {
    pub const ALL: [CapabilityKind; 5] =
        [Self::Structuring, Self::Execution, Self::Validation, Self::Transformation, Self::Routing];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Structuring => "structuring",
            Self::Execution => "execution",
            Self::Validation => "validation",
            Self::Transformation => "transformation",
            Self::Routing => "routing",
        }
    }
}

crate::stored_as_text!(CapabilityKind, "capability kind");

/// How a capability is executed.
#[derive(Debug, Clone, PartialEq)]
pub enum Executor {
    /// One Chat Completions call with these instructions as the system prompt.
    Ai { instructions: String },
    /// A JSON POST of the node's context bundle to this registered URL.
    Http { endpoint: Url },
    /// A person's work: the run waits (`awaiting_human`) until an operator submits the node's
    /// output or declines the task.
    Human { instructions: Option<String> },
    /// A tool of a registered MCP server, called with the node's arguments.
    Mcp(McpTool),
}

impl Executor {
    /// The registration's `agentType`.
    pub fn agent_type(&self) -> &'static str {
        self.executor_type().as_str()
    }

    pub fn executor_type(&self) -> ExecutorType {
        match self {
            Self::Ai { .. } => ExecutorType::Ai,
            Self::Http { .. } => ExecutorType::Http,
            Self::Human { .. } => ExecutorType::Human,
            Self::Mcp(_) => ExecutorType::Mcp,
        }
    }
}

/// How a capability runs: one model call, one HTTP call, a person's work (a registration's
/// `agentType`; `capabilities.agent_type`), or an MCP tool call (never registered as such: an MCP
/// server's tools become capabilities of this type).
#[cfg_attr(feature = "diesel", derive(diesel::expression::AsExpression, diesel::deserialize::FromSqlRow))]
#[cfg_attr(feature = "diesel", diesel(sql_type = diesel::sql_types::Text))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutorType {
    Ai,
    Http,
    Human,
    Mcp,
}

impl ExecutorType {
    pub const ALL: [ExecutorType; 4] = [Self::Ai, Self::Http, Self::Human, Self::Mcp];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ai => "ai",
            Self::Http => "http",
            Self::Human => "human",
            Self::Mcp => "mcp",
        }
    }
}

crate::stored_as_text!(ExecutorType, "agent type");

/// A validated capability.
#[derive(Debug, Clone)]
pub struct Capability {
    pub id: String,
    pub version: String,
    pub display_name: String,
    pub summary: String,
    pub kind: CapabilityKind,
    pub executor: Executor,
    pub input_facets: Vec<String>,
    pub output_facets: Vec<String>,
    pub output_contract: OutputContract,
    /// Conditions every output must meet before its node completes (checked on the candidate
    /// output; a failure runs the node again, then the policy's action).
    pub post_conditions: Vec<GoalCondition>,
    /// `metadata.postConditionPolicy.maxRetries`: attempts after a failed post-condition.
    pub post_condition_retries: Option<u32>,
    /// `preferredModels`: the `<endpoint>/<model>` chain an `ai` capability's calls go along
    /// instead of `[llm.routes] capabilities` (empty: that route). The server checks them
    /// against its endpoints when the capability is registered.
    pub preferred_models: Vec<String>,
    /// The registration as submitted (stored, and returned by `GET /capabilities`).
    pub registration: Value,
}

impl Capability {
    /// The capability as callers see it (the API's list, the console): its registration without
    /// secrets, and its endpoint without credentials or query string.
    pub fn shown(&self, redaction: &crate::redact::Redaction) -> Value {
        let mut registration = redaction.value(self.registration.clone());
        if let Some(endpoint) = registration.get_mut("endpoint")
            && let Some(url) = endpoint.as_str()
        {
            *endpoint = Value::String(crate::redact::url(url));
        }
        serde_json::json!({
            "capabilityId": self.id, "version": self.version, "displayName": self.display_name,
            "summary": self.summary, "kind": self.kind, "agentType": self.executor.agent_type(),
            "inputFacets": self.input_facets, "outputFacets": self.output_facets, "status": "active",
            "registration": registration,
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRegistration {
    capability_id: String,
    version: String,
    display_name: String,
    summary: String,
    kind: CapabilityKind,
    /// `ai` when left out.
    #[serde(default)]
    agent_type: Option<ExecutorType>,
    endpoint: Option<String>,
    instructions: Option<String>,
    #[serde(default)]
    input_facets: Vec<String>,
    #[serde(default)]
    output_facets: Vec<String>,
    #[serde(default)]
    preferred_models: Vec<String>,
}

impl Capability {
    /// Validates a registration, reporting every problem with its JSON Pointer.
    pub fn parse(registration: Value, policy: &EndpointAllowlist) -> Result<Self, Vec<FieldError>> {
        let errors = SCHEMA.check(&registration);
        if !errors.is_empty() {
            return Err(errors);
        }
        let registration = crate::validation::integral_numbers(registration);
        let raw: RawRegistration = crate::validation::decode(&registration, "").map_err(|e| vec![e])?;
        let mut errors = Vec::new();
        let executor = executor(&raw, policy).map_err(|e| errors.push(e)).ok();
        let output_contract = OutputContract::parse(&registration["outputContract"], "/outputContract")
            .map_err(|e| errors.extend(e))
            .ok();
        if let Some(contract) = &output_contract {
            errors.extend(contract_facets_declared(contract, &raw.output_facets));
        }
        if let Some(input) = registration.get("inputContract") {
            errors.extend(OutputContract::parse(input, "/inputContract").err().unwrap_or_default());
        }
        let post_conditions = match &output_contract {
            Some(contract) => post_conditions(&registration, contract, &raw.output_facets)
                .map_err(|e| errors.extend(e))
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let post_condition_retries = match registration.pointer("/metadata/postConditionPolicy/maxRetries") {
            None => None,
            Some(n) => n.as_u64().filter(|n| *n <= 10).and_then(|n| u32::try_from(n).ok()).or_else(|| {
                errors.push(FieldError::new(
                    "/metadata/postConditionPolicy/maxRetries",
                    "range",
                    "`maxRetries` must be an integer 0..=10",
                ));
                None
            }),
        };
        match (executor, output_contract) {
            (Some(executor), Some(output_contract)) if errors.is_empty() => Ok(Self {
                id: raw.capability_id,
                version: raw.version,
                display_name: raw.display_name,
                summary: raw.summary,
                kind: raw.kind,
                executor,
                input_facets: raw.input_facets,
                output_facets: raw.output_facets,
                output_contract,
                post_conditions,
                post_condition_retries,
                preferred_models: raw.preferred_models,
                registration,
            }),
            _ => Err(errors),
        }
    }
}

fn executor(raw: &RawRegistration, policy: &EndpointAllowlist) -> Result<Executor, FieldError> {
    match raw.agent_type.unwrap_or(ExecutorType::Ai) {
        ExecutorType::Ai => {
            Ok(Executor::Ai { instructions: raw.instructions.clone().unwrap_or_else(|| raw.summary.clone()) })
        }
        ExecutorType::Http => {
            let endpoint = raw.endpoint.as_deref().ok_or_else(|| {
                FieldError::new("/endpoint", "required", "an `http` capability needs an `endpoint` URL")
            })?;
            allowed_url(endpoint, "/endpoint", policy).map(|endpoint| Executor::Http { endpoint })
        }
        ExecutorType::Human => Ok(Executor::Human { instructions: raw.instructions.clone() }),
        // The schema refuses it: an MCP tool is offered by registering its server.
        ExecutorType::Mcp => Err(FieldError::new(
            "/agentType",
            "enum",
            "`mcp` capabilities come from a registered MCP server's tools (POST /api/v1/flex/mcp-servers/register)",
        )),
    }
}

/// `endpoint` (at pointer `at`) as a URL flexrun may call: http(s), no credentials, not a
/// link-local or metadata address, under an allowed prefix. For `http` capabilities and MCP servers.
pub fn allowed_url(endpoint: &str, at: &str, policy: &EndpointAllowlist) -> Result<Url, FieldError> {
    let invalid = |message: String| FieldError::new(at, "invalid_endpoint", message);
    let url = Url::parse(endpoint).map_err(|e| invalid(format!("not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(format!("scheme `{}` is not allowed; use http or https", url.scheme())));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("credentials in the URL are not allowed".into()));
    }
    if let Err(refused) = policy.addresses.check_url(&url) {
        return Err(invalid(format!("`{url}`: {refused}")));
    }
    if !policy.allows(&url) {
        let allowed: Vec<String> = policy.allowed_url_prefixes.iter().map(ToString::to_string).collect();
        return Err(invalid(format!(
            "`{url}` is not under an allowed prefix ({}): scheme, host and port must equal one \
             prefix's, and the path be at or below its path, without an encoded `/` or `\\` below it; see `http_capabilities.allowed_url_prefixes`",
            allowed.join(", ")
        )));
    }
    Ok(url)
}

/// The facet schemas a JSON Schema output contract declares: with one output facet, the whole
/// schema; with several, the schema's properties named after them.
fn facet_schemas<'a>(contract: &'a OutputContract, output_facets: &'a [String]) -> Vec<(&'a str, &'a Value)> {
    let OutputContract::JsonSchema { schema, .. } = contract else { return Vec::new() };
    match output_facets {
        [only] => vec![(only.as_str(), schema.source())],
        many => many
            .iter()
            .filter_map(|f| schema.source().pointer(&format!("/properties/{f}")).map(|s| (f.as_str(), s)))
            .collect(),
    }
}

/// Parses `postConditions`: facet conditions on the capability's own output facets (names
/// relative to the value at `path`, or `facets.<own facet>` paths), no facet and path twice.
fn post_conditions(
    registration: &Value,
    contract: &OutputContract,
    output_facets: &[String],
) -> Result<Vec<GoalCondition>, Vec<FieldError>> {
    let Some(entries) = registration.get("postConditions").and_then(Value::as_array) else { return Ok(Vec::new()) };
    let catalog = Catalog::with_facets(facet_schemas(contract, output_facets));
    let mut errors = Vec::new();
    let mut conditions: Vec<GoalCondition> = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let at = format!("/postConditions/{i}");
        let facet = entry["facet"].as_str().unwrap_or_default();
        if !output_facets.iter().any(|f| f == facet) {
            errors.push(FieldError::new(
                format!("{at}/facet"),
                "undeclared_facet",
                format!(
                    "a post-condition checks one of the capability's output facets ({}), not \"{facet}\"",
                    output_facets.join(", ")
                ),
            ));
            continue;
        }
        match validation::parse_facet_condition(entry, &at, &catalog) {
            Ok(c) if conditions.iter().any(|d| d.facet == c.facet && d.path == c.path) => errors.push(FieldError::new(
                at,
                "duplicate",
                format!("duplicate post-condition for facet \"{}\" at path \"{}\"", c.facet, c.path),
            )),
            Ok(c) => conditions.push(c),
            Err(ConditionProblems::Shape(e) | ConditionProblems::Dsl(e)) => errors.extend(e),
        }
    }
    if errors.is_empty() { Ok(conditions) } else { Err(errors) }
}

/// A facets-mode output contract must only name facets the capability declares it outputs.
fn contract_facets_declared(contract: &OutputContract, output_facets: &[String]) -> Vec<FieldError> {
    contract
        .facets()
        .iter()
        .enumerate()
        .filter(|(_, facet)| !output_facets.contains(facet))
        .map(|(i, facet)| {
            FieldError::new(
                format!("/outputContract/facets/{i}"),
                "undeclared_facet",
                format!("facet \"{facet}\" is not listed in `outputFacets`"),
            )
        })
        .collect()
}

/// The registered capabilities by id.
pub type Capabilities = BTreeMap<String, Arc<Capability>>;

/// The variable catalog for conditions: configured facet schemas first, then the facet schemas
/// capabilities declare through their JSON Schema output contracts (a capability with one output
/// facet describes that facet with its whole schema; with several, with the schema's properties).
pub fn catalog(configured: &[(String, Value)], capabilities: &Capabilities) -> Catalog {
    let mut facets: Vec<(&str, &Value)> = configured.iter().map(|(f, s)| (f.as_str(), s)).collect();
    for capability in capabilities.values() {
        match &capability.executor {
            // Its output is `{<facet>: <the tool's result>}`: the facet's schema is the tool's.
            Executor::Mcp(tool) => facets.extend(
                tool.output.as_ref().zip(capability.output_facets.first()).map(|(s, f)| (f.as_str(), s.source())),
            ),
            _ => facets.extend(facet_schemas(&capability.output_contract, &capability.output_facets)),
        }
    }
    let produced = capabilities.values().flat_map(|c| c.output_facets.iter().map(String::as_str));
    Catalog::with_facets(facets).produced(produced)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn registration() -> Value {
        json!({
            "capabilityId": "copywriter.draft", "version": "1.0", "displayName": "Copywriter",
            "summary": "Drafts copy", "kind": "execution", "agentType": "ai",
            "inputFacets": ["brief"], "outputFacets": ["post_copy"],
            "instructions": "Write.",
            "outputContract": {"mode": "json_schema", "schema": {"type": "object"}}
        })
    }

    fn policy() -> EndpointAllowlist {
        EndpointAllowlist::default()
    }

    #[test]
    fn parses_an_ai_capability() {
        let c = Capability::parse(registration(), &policy()).unwrap();
        assert_eq!(c.id, "copywriter.draft");
        assert_eq!(c.executor, Executor::Ai { instructions: "Write.".into() });
        assert_eq!(c.output_facets, ["post_copy"]);
    }

    #[test]
    fn http_needs_an_allowed_endpoint() {
        let mut r = registration();
        r["agentType"] = json!("http");
        let errors = Capability::parse(r.clone(), &policy()).unwrap_err();
        assert_eq!(errors[0].path, "/endpoint");
        r["endpoint"] = json!("http://127.0.0.1:9/score");
        assert!(Capability::parse(r.clone(), &policy()).is_ok());
        let strict = EndpointAllowlist {
            allowed_url_prefixes: vec![UrlPrefix::parse("https://tools/").unwrap()],
            ..EndpointAllowlist::default()
        };
        let errors = Capability::parse(r.clone(), &strict).unwrap_err();
        assert_eq!(errors[0].code, "invalid_endpoint");
        r["endpoint"] = json!("file:///etc/passwd");
        assert_eq!(Capability::parse(r, &policy()).unwrap_err()[0].code, "invalid_endpoint");
    }

    fn http_registration(endpoint: &str) -> Value {
        let mut r = registration();
        r["agentType"] = json!("http");
        r["endpoint"] = json!(endpoint);
        r
    }

    #[test]
    fn allowed_prefixes_are_matched_as_urls_not_strings() {
        let localhost = EndpointAllowlist {
            allowed_url_prefixes: vec![UrlPrefix::parse("http://localhost").unwrap()],
            ..EndpointAllowlist::default()
        };
        assert!(Capability::parse(http_registration("http://localhost/score"), &localhost).is_ok());
        for refused in ["http://localhost.evil.example/score", "http://localhost:8080/score", "https://localhost/"] {
            let errors = Capability::parse(http_registration(refused), &localhost).unwrap_err();
            assert_eq!((errors[0].path.as_str(), errors[0].code.as_str()), ("/endpoint", "invalid_endpoint"));
            assert!(errors[0].message.contains("http://localhost/"), "{}", errors[0].message);
        }
    }

    #[test]
    fn link_local_endpoints_are_refused_unless_allowed() {
        let allowing = EndpointAllowlist { addresses: AddressGuard { allow_link_local: true }, ..policy() };
        for endpoint in
            ["http://169.254.169.254/latest/meta-data/", "http://[fe80::1]:8080/", "http://[::ffff:169.254.169.254]/"]
        {
            let errors = Capability::parse(http_registration(endpoint), &policy()).unwrap_err();
            assert_eq!(errors[0].code, "invalid_endpoint", "{endpoint}");
            assert!(errors[0].message.contains("link-local"), "{}", errors[0].message);
            assert!(Capability::parse(http_registration(endpoint), &allowing).is_ok(), "{endpoint}");
        }
        // Even an allowed prefix naming such an address needs `allow_link_local`.
        let listed = EndpointAllowlist {
            allowed_url_prefixes: vec![UrlPrefix::parse("http://169.254.169.254/").unwrap()],
            ..EndpointAllowlist::default()
        };
        assert!(Capability::parse(http_registration("http://169.254.169.254/x"), &listed).is_err());
    }

    #[test]
    fn reports_every_problem() {
        let mut r = registration();
        r["kind"] = json!("magic");
        r["capabilityId"] = json!("bad id");
        r["outputFacet"] = json!([]);
        let errors = Capability::parse(r, &policy()).unwrap_err();
        let paths: Vec<_> = errors.iter().map(|e| e.path.as_str()).collect();
        assert!(paths.contains(&"/kind") && paths.contains(&"/capabilityId"), "{errors:?}");
        let unknown = errors.iter().find(|e| e.path == "/outputFacet").unwrap();
        assert!(unknown.message.contains("outputFacets"), "{unknown:?}");
    }

    #[test]
    fn facets_contract_must_match_declared_outputs() {
        let mut r = registration();
        r["outputContract"] = json!({"mode": "facets", "facets": ["post_copy", "other"]});
        let errors = Capability::parse(r, &policy()).unwrap_err();
        assert_eq!(errors[0].path, "/outputContract/facets/1");
    }

    #[test]
    fn post_conditions_compile_against_the_capabilitys_own_facets() {
        let mut r = registration();
        r["postConditions"] = json!([
            {"facet": "post_copy", "path": "/status", "condition": {"dsl": "status == \"ready\""}},
            {"facet": "post_copy", "path": "/score", "condition": {"jsonLogic": {">": [{"var": "score"}, 1]}}}
        ]);
        r["metadata"] = json!({"postConditionPolicy": {"maxRetries": 2}});
        let capability = Capability::parse(r.clone(), &policy()).unwrap();
        assert_eq!(capability.post_conditions.len(), 2);
        assert_eq!(capability.post_conditions[0].expression, "status == \"ready\"");
        assert_eq!(capability.post_condition_retries, Some(2));

        r["postConditions"] = json!([
            {"facet": "post_copy", "path": "/status", "condition": {"dsl": "status == 1"}},
            {"facet": "post_copy", "path": "/status", "condition": {"dsl": "status == 2"}},
            {"facet": "tags", "path": "", "condition": {"dsl": "value == 1"}}
        ]);
        let errors = Capability::parse(r, &policy()).unwrap_err();
        let found: Vec<_> = errors.iter().map(|e| (e.path.as_str(), e.code.as_str())).collect();
        assert_eq!(found, [("/postConditions/1", "duplicate"), ("/postConditions/2/facet", "undeclared_facet")]);
    }

    #[test]
    fn human_capabilities_need_no_endpoint() {
        let mut r = registration();
        r["agentType"] = json!("human");
        r["instructions"] = json!("Review the copy");
        let capability = Capability::parse(r, &policy()).unwrap();
        assert_eq!(capability.executor, Executor::Human { instructions: Some("Review the copy".into()) });
    }
}
