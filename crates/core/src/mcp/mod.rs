//! MCP servers whose tools flexrun offers as capabilities: a server's registration, parsed once
//! at the boundary ([`McpServer::parse`]) — where it is (under the same URL allowlist and
//! address guard as `http` capabilities), how flexrun authenticates to it (header values and the
//! token are secrets: kept out of every answer, frame and log), which of its tools are offered and
//! under which output facet, and how long a call and a refresh of its tool list may take.

pub mod arguments;
pub mod question;
pub mod token;
pub mod tool;

pub use crate::capability::{McpTool, ToolHints};
pub use token::{InvalidTokenVariables, TokenVariables};
pub use tool::{ToolDescription, ToolRefused};

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

use serde::Deserialize;
use url::Url;

use crate::capability::{EndpointAllowlist, allowed_url};
use crate::validation::{self, BodySchema, FieldError};

static SCHEMA: LazyLock<BodySchema> = LazyLock::new(|| BodySchema::builtin(include_str!("server.schema.json")));

/// How long a tool call may take when the registration does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a server's tool list is read again when the registration does not say.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(300);

/// What a registration is held to beyond its shape: where its server may be (the allowlist and
/// address guard of `http` capabilities) and which environment variable may hold its token.
#[derive(Debug, Clone, Default)]
pub struct McpPolicy {
    pub endpoints: EndpointAllowlist,
    pub token_variables: TokenVariables,
}

/// A registered MCP server, validated.
#[derive(Clone, PartialEq)]
pub struct McpServer {
    pub id: String,
    /// Its Streamable HTTP endpoint.
    pub url: Url,
    /// Headers sent with every request, values secret.
    headers: BTreeMap<String, String>,
    /// The environment variable holding the bearer token (read when connecting, never stored).
    pub bearer_token_env: Option<String>,
    pub tools: ToolFilter,
    /// The output facet of each tool that is not named after its tool.
    output_facets: BTreeMap<String, String>,
    pub timeout: Duration,
    pub refresh: Duration,
}

/// Which of a server's tools are offered: those `allow` names (all, when it is absent) but those
/// `deny` names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolFilter {
    allow: Option<Vec<String>>,
    #[serde(default)]
    deny: Vec<String>,
}

impl ToolFilter {
    pub fn offers(&self, tool: &str) -> bool {
        let allowed = self.allow.as_ref().is_none_or(|allow| allow.iter().any(|name| name == tool));
        allowed && !self.deny.iter().any(|name| name == tool)
    }
}

/// The registration as sent (its shape checked by the schema).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Raw {
    id: String,
    url: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    bearer_token_env: Option<String>,
    #[serde(default)]
    tools: ToolFilter,
    #[serde(default)]
    output_facets: BTreeMap<String, String>,
    timeout_secs: Option<u64>,
    refresh_secs: Option<u64>,
}

impl McpServer {
    /// Validates a registration; every problem is reported with its JSON Pointer.
    pub fn parse(registration: &serde_json::Value, policy: &McpPolicy) -> Result<Self, Vec<FieldError>> {
        validation::refuse_nul(registration).map_err(|e| vec![e])?;
        let errors = SCHEMA.check(registration);
        if !errors.is_empty() {
            return Err(errors.into_iter().map(quoting_no_header_value).collect());
        }
        let raw: Raw = validation::decode(registration, "").map_err(|e| vec![e])?;
        let unsendable = raw.headers.iter().filter(|(_, value)| !sendable(value));
        let unsendable: Vec<FieldError> = unsendable
            .map(|(name, _)| {
                let message =
                    "a header value is visible ASCII characters and tabs (no line break, no control character)";
                FieldError::new(validation::pointer(["headers", name]), "invalid_header_value", message)
            })
            .collect();
        if !unsendable.is_empty() {
            return Err(unsendable);
        }
        let url = allowed_url(&raw.url, "/url", &policy.endpoints).map_err(|e| vec![e])?;
        if let Some(variable) = raw.bearer_token_env.as_deref().filter(|v| !policy.token_variables.allows(v)) {
            let message = format!(
                "{variable} is not a variable a registration may name: the configuration's mcp.token_variables \
                 allows {}",
                crate::excerpt::excerpt(&policy.token_variables.to_string(), 200)
            );
            return Err(vec![FieldError::new("/bearerTokenEnv", "token_variable_not_allowed", message)]);
        }
        if raw.headers.keys().any(|name| name.eq_ignore_ascii_case("authorization")) && raw.bearer_token_env.is_some() {
            let message = "send the token either as `bearerTokenEnv` or as an `Authorization` header, not both";
            return Err(vec![FieldError::new("/headers", "conflict", message)]);
        }
        Ok(Self {
            id: raw.id,
            url,
            headers: raw.headers,
            bearer_token_env: raw.bearer_token_env,
            tools: raw.tools,
            output_facets: raw.output_facets,
            timeout: raw.timeout_secs.map_or(DEFAULT_TIMEOUT, Duration::from_secs),
            refresh: raw.refresh_secs.map_or(DEFAULT_REFRESH, Duration::from_secs),
        })
    }

    /// The headers to send, values and all: for the one place that connects to the server.
    pub fn headers(&self) -> &BTreeMap<String, String> {
        &self.headers
    }

    /// The capability id of `tool`: `<server id>.<tool name>`.
    pub fn capability_id(&self, tool: &str) -> String {
        format!("{}.{tool}", self.id)
    }

    /// The output facet of `tool`: as registered, else the tool's name.
    pub fn output_facet(&self, tool: &str) -> String {
        self.output_facets.get(tool).cloned().unwrap_or_else(|| tool.to_string())
    }
}

/// Whether an HTTP request can carry `value` as a header value (what the HTTP client accepts):
/// one it cannot would be stored, and fail every connection, instead of being refused.
fn sendable(value: &str) -> bool {
    value.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
}

/// A schema problem at `/headers` told without the values: they are credentials, and the
/// validator's messages quote the value they refuse (a refused request's message is logged too).
/// Names are not secret: a name's problem keeps its message.
fn quoting_no_header_value(mut error: FieldError) -> FieldError {
    let at_headers = error.path == "/headers" || error.path.starts_with("/headers/");
    if at_headers && error.code != "propertyNames" {
        error.message = match error.code.as_str() {
            "maxProperties" => "at most 32 headers".into(),
            "type" if error.path == "/headers" => "must be an object of header names and values".into(),
            "type" => "a header value must be a string".into(),
            "maxLength" => "a header value must be at most 8000 characters long".into(),
            code => format!("not a valid header ({code}; header values are not shown)"),
        };
    }
    error
}

/// Never shows header values: they hold credentials.
impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("id", &self.id)
            .field("url", &self.url.as_str())
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("bearer_token_env", &self.bearer_token_env)
            .field("tools", &self.tools)
            .field("timeout", &self.timeout)
            .field("refresh", &self.refresh)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::UrlPrefix;
    use serde_json::json;

    fn policy() -> McpPolicy {
        McpPolicy { token_variables: TokenVariables::parse(&["*_MCP_TOKEN", "TOKEN"]).unwrap(), ..Default::default() }
    }

    fn parse(registration: serde_json::Value) -> Result<McpServer, Vec<FieldError>> {
        McpServer::parse(&registration, &policy())
    }

    fn refused_at(registration: serde_json::Value) -> Vec<String> {
        parse(registration).unwrap_err().into_iter().map(|e| e.path).collect()
    }

    #[test]
    fn a_full_registration_is_read_with_its_defaults() {
        let server = parse(json!({
            "id": "search", "url": "http://127.0.0.1:3100/mcp",
            "headers": {"X-Team": "blue"}, "tools": {"deny": ["delete_all"]},
            "outputFacets": {"lookup": "facts"}, "timeoutSecs": 5
        }))
        .unwrap();
        assert_eq!((server.id.as_str(), server.url.as_str()), ("search", "http://127.0.0.1:3100/mcp"));
        assert_eq!((server.timeout, server.refresh), (Duration::from_secs(5), DEFAULT_REFRESH));
        assert!(server.tools.offers("lookup") && !server.tools.offers("delete_all"));
        assert_eq!((server.output_facet("lookup"), server.output_facet("echo")), ("facts".into(), "echo".into()));
        assert_eq!(server.capability_id("lookup"), "search.lookup");
    }

    #[test]
    fn an_allow_list_offers_only_what_it_names() {
        let server =
            parse(json!({"id": "s", "url": "http://127.0.0.1/mcp", "tools": {"allow": ["a", "b"], "deny": ["b"]}}))
                .unwrap();
        assert_eq!(["a", "b", "c"].map(|t| server.tools.offers(t)), [true, false, false]);
    }

    #[test]
    fn bad_registrations_are_refused_with_their_pointer() {
        for (registration, at) in [
            (json!({"url": "http://127.0.0.1/mcp"}), "/id"),
            (json!({"id": "s s", "url": "http://127.0.0.1/mcp"}), "/id"),
            (json!({"id": "s", "url": "ftp://127.0.0.1/mcp"}), "/url"),
            (json!({"id": "s", "url": "http://user:pw@127.0.0.1/mcp"}), "/url"),
            (json!({"id": "s", "url": "http://169.254.169.254/mcp"}), "/url"),
            (json!({"id": "s", "url": "http://127.0.0.1/mcp", "extra": 1}), "/extra"),
            (json!({"id": "s", "url": "http://127.0.0.1/mcp", "tools": {"allow": ["no spaces"]}}), "/tools/allow/0"),
            (json!({"id": "s", "url": "http://127.0.0.1/mcp", "bearerTokenEnv": "1TOKEN"}), "/bearerTokenEnv"),
            (json!({"id": "s", "url": "http://127.0.0.1/mcp", "timeoutSecs": 0}), "/timeoutSecs"),
            (
                json!({"id": "s", "url": "http://127.0.0.1/mcp", "headers": {"Authorization": "x"},
                       "bearerTokenEnv": "TOKEN"}),
                "/headers",
            ),
        ] {
            assert!(refused_at(registration.clone()).iter().any(|p| p == at), "{registration}");
        }
    }

    #[test]
    fn a_url_outside_the_allowlist_is_refused() {
        let endpoints = EndpointAllowlist {
            allowed_url_prefixes: vec![UrlPrefix::parse("http://tools.internal/").unwrap()],
            ..EndpointAllowlist::default()
        };
        let policy = McpPolicy { endpoints, ..policy() };
        let outside = json!({"id": "s", "url": "http://elsewhere.example/mcp"});
        let errors = McpServer::parse(&outside, &policy).unwrap_err();
        assert_eq!((errors[0].path.as_str(), errors[0].code.as_str()), ("/url", "invalid_endpoint"));
        assert!(McpServer::parse(&json!({"id": "s", "url": "http://tools.internal/mcp"}), &policy).is_ok());
    }

    /// The token is read from the server's environment and sent to the registered URL: a
    /// registration may name only a variable the configuration allows, never, say, the variable
    /// holding the callers' keys.
    #[test]
    fn a_token_variable_the_configuration_does_not_allow_is_refused() {
        let with = |variable: &str| json!({"id": "s", "url": "http://127.0.0.1/mcp", "bearerTokenEnv": variable});
        assert_eq!(parse(with("CALC_MCP_TOKEN")).unwrap().bearer_token_env.as_deref(), Some("CALC_MCP_TOKEN"));
        for variable in ["FLEXRUN_API_KEYS", "FLEXRUN_LLM_API_KEY", "AWS_SECRET_ACCESS_KEY"] {
            let errors = parse(with(variable)).unwrap_err();
            assert_eq!(
                (errors[0].path.as_str(), errors[0].code.as_str()),
                ("/bearerTokenEnv", "token_variable_not_allowed")
            );
            assert!(errors[0].message.contains("*_MCP_TOKEN, TOKEN"), "{}", errors[0].message);
        }
        let none = McpServer::parse(&with("CALC_MCP_TOKEN"), &McpPolicy::default()).unwrap_err();
        assert!(none[0].message.ends_with("allows none"), "{}", none[0].message);
        assert!(McpServer::parse(&json!({"id": "s", "url": "http://127.0.0.1/mcp"}), &McpPolicy::default()).is_ok());
    }

    #[test]
    fn header_values_never_show_in_debug_output() {
        let server =
            parse(json!({"id": "s", "url": "http://127.0.0.1/mcp", "headers": {"X-Api-Key": "sk-secret"}})).unwrap();
        let shown = format!("{server:?}");
        assert!(shown.contains("X-Api-Key") && !shown.contains("sk-secret"), "{shown}");
    }
}
