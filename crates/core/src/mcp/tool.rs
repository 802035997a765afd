//! An MCP server's tool as a flexrun capability: what `tools/list` says of a tool, checked and
//! bounded ([`capability`]), and what a `tools/call` result becomes as a node's output
//! ([`output`]). No I/O: the server lists and calls, this module decides what the answers mean.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::McpServer;
use crate::capability::{Capability, CapabilityError, CapabilityKind, Executor, McpTool, ToolHints};
use crate::contract::{CompiledSchema, OutputContract};
use crate::excerpt;

/// The longest tool description kept as a capability's summary (the planner reads every one).
pub const MAX_DESCRIPTION_CHARS: usize = 2000;

/// The largest input or output schema a tool may declare (as JSON text): each is sent to the
/// planner with every plan request.
pub const MAX_SCHEMA_BYTES: usize = 16 * 1024;

/// The most tools one server may offer: beyond it, the rest are not offered (and the server's
/// state says so).
pub const MAX_TOOLS: usize = 500;

/// Characters of a tool's name quoted where it is not offered (a server may name a tool at any
/// length; the name is in every listing of the server).
pub const NAME_SHOWN: usize = 60;

/// A tool as the server describes it in `tools/list` (the fields flexrun reads).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDescription {
    pub name: String,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub input_schema: Value,
    #[serde(default)]
    pub output_schema: Option<Value>,
    #[serde(default)]
    pub annotations: Option<ToolHints>,
}

/// Why a listed tool is not offered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolRefused {
    #[error("tool name `{0}` is not 1 to 128 letters, digits, `_`, `-` or `.`")]
    Name(String),
    #[error("tool `{tool}`: its {which} is not a usable JSON Schema: {message}")]
    Schema { tool: String, which: &'static str, message: String },
    #[error("tool `{tool}`: its {which} is larger than {MAX_SCHEMA_BYTES} bytes")]
    SchemaTooLarge { tool: String, which: &'static str },
}

/// The capability `server` offers for `tool`: id `<server>.<tool>`, the description as its summary,
/// one output facet (the registration's, else the tool's name).
pub fn capability(server: &McpServer, tool: ToolDescription) -> Result<Capability, ToolRefused> {
    let name_ok = (1..=128).contains(&tool.name.len())
        && tool.name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !name_ok {
        return Err(ToolRefused::Name(excerpt::excerpt(&tool.name, NAME_SHOWN).into_owned()));
    }
    let arguments = schema(&tool.name, "inputSchema", Some(&tool.input_schema).filter(|s| !s.is_null()))?
        .unwrap_or_else(any_object);
    let output = schema(&tool.name, "outputSchema", tool.output_schema.as_ref())?;
    let facet = server.output_facet(&tool.name);
    let id = server.capability_id(&tool.name);
    let summary = tool
        .description
        .as_deref()
        .map(|d| excerpt::excerpt(d.trim(), MAX_DESCRIPTION_CHARS).into_owned())
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| format!("The `{}` tool of MCP server `{}`.", tool.name, server.id));
    let display_name =
        tool.title.as_deref().map(|t| excerpt::excerpt(t, 200).into_owned()).unwrap_or(tool.name.clone());
    let hints = tool.annotations.unwrap_or_default();
    let registration = json!({
        "capabilityId": id, "version": "mcp", "displayName": display_name, "summary": summary,
        "kind": CapabilityKind::Execution, "agentType": "mcp", "outputFacets": [facet],
        "mcp": {"server": server.id, "tool": tool.name, "annotations": hints},
        "inputSchema": arguments.source(),
        "outputSchema": output.as_ref().map(CompiledSchema::source),
    });
    Ok(Capability {
        id,
        version: "mcp".into(),
        display_name,
        summary,
        kind: CapabilityKind::Execution,
        output_contract: OutputContract::Facets { facets: vec![facet.clone()] },
        executor: Executor::Mcp(McpTool { server: server.id.clone(), name: tool.name, arguments, output, hints }),
        input_facets: Vec::new(),
        output_facets: vec![facet],
        post_conditions: Vec::new(),
        post_condition_retries: None,
        preferred_models: Vec::new(),
        registration,
    })
}

/// A tool that declares no input schema takes any object.
fn any_object() -> CompiledSchema {
    // A literal schema: compiling it cannot fail.
    CompiledSchema::compile(json!({"type": "object"})).unwrap_or_else(|_| unreachable!("a valid schema"))
}

fn schema(tool: &str, which: &'static str, source: Option<&Value>) -> Result<Option<CompiledSchema>, ToolRefused> {
    let Some(source) = source else { return Ok(None) };
    if serde_json::to_string(source).map_or(true, |text| text.len() > MAX_SCHEMA_BYTES) {
        return Err(ToolRefused::SchemaTooLarge { tool: tool.to_string(), which });
    }
    CompiledSchema::compile(source.clone()).map(Some).map_err(|message| ToolRefused::Schema {
        tool: tool.to_string(),
        which,
        message: excerpt::excerpt(&message, excerpt::MESSAGE).into_owned(),
    })
}

/// What a `tools/call` result (as JSON) becomes: `{<facet>: value}`, the value being its
/// `structuredContent` (checked against the output schema when the tool has one), else its one
/// text content when that is JSON, else `{"text": …, "content": […]}`. A result with `isError`
/// is the tool's failure, its text bounded.
pub fn output(tool: &McpTool, facet: &str, result: &Value) -> Result<Value, CapabilityError> {
    let content = result.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let texts: Vec<&str> = content.iter().filter(|c| c["type"] == "text").filter_map(|c| c["text"].as_str()).collect();
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let message = if texts.is_empty() { "the tool reported an error".to_string() } else { texts.join("\n") };
        return Err(CapabilityError::Tool(excerpt::excerpt(&message, excerpt::FRAME).into_owned()));
    }
    let value = match (result.get("structuredContent").filter(|v| !v.is_null()), content, texts.as_slice()) {
        (Some(structured), _, _) => structured.clone(),
        (None, [_], [only]) if let Ok(value) = serde_json::from_str::<Value>(only) => value,
        (None, _, _) => json!({"text": texts.join("\n"), "content": content}),
    };
    if let Some(schema) = &tool.output {
        let violations = schema.violations(&value);
        if !violations.is_empty() {
            return Err(CapabilityError::Contract(violations));
        }
    }
    let mut keyed = Map::new();
    keyed.insert(facet.to_string(), value);
    Ok(Value::Object(keyed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(registration: Value) -> McpServer {
        McpServer::parse(&registration, &Default::default()).unwrap()
    }

    fn described(tool: Value) -> ToolDescription {
        serde_json::from_value(tool).unwrap()
    }

    fn add_tool() -> ToolDescription {
        described(json!({
            "name": "add", "description": "Adds two numbers.",
            "inputSchema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                            "required": ["a", "b"]},
            "outputSchema": {"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]},
            "annotations": {"readOnlyHint": true, "idempotentHint": true}
        }))
    }

    fn tool_of(capability: &Capability) -> &McpTool {
        let Executor::Mcp(tool) = &capability.executor else { panic!("not an MCP capability") };
        tool
    }

    #[test]
    fn a_tool_becomes_a_capability_named_after_its_server() {
        let capability =
            capability(&server(json!({"id": "calc", "url": "http://127.0.0.1:1/mcp"})), add_tool()).unwrap();
        assert_eq!((capability.id.as_str(), capability.summary.as_str()), ("calc.add", "Adds two numbers."));
        assert_eq!(capability.output_facets, ["add"]);
        assert_eq!(capability.executor.agent_type(), "mcp");
        let tool = tool_of(&capability);
        assert_eq!((tool.server.as_str(), tool.name.as_str()), ("calc", "add"));
        assert!(tool.output.is_some());
        assert_eq!(
            capability.registration["mcp"]["annotations"],
            json!({"readOnlyHint": true, "idempotentHint": true})
        );
    }

    #[test]
    fn the_registration_names_the_output_facet() {
        let registration = json!({"id": "calc", "url": "http://127.0.0.1:1/mcp", "outputFacets": {"add": "sum"}});
        assert_eq!(capability(&server(registration), add_tool()).unwrap().output_facets, ["sum"]);
    }

    #[test]
    fn tools_with_bad_names_or_schemas_are_not_offered() {
        let calc = server(json!({"id": "calc", "url": "http://127.0.0.1:1/mcp"}));
        let bad_name = described(json!({"name": "a b", "inputSchema": {"type": "object"}}));
        assert!(matches!(capability(&calc, bad_name), Err(ToolRefused::Name(_))));
        let bad_schema = described(json!({"name": "x", "inputSchema": {"type": 12}}));
        assert!(matches!(capability(&calc, bad_schema), Err(ToolRefused::Schema { which: "inputSchema", .. })));
        let huge = json!({"type": "object", "description": "x".repeat(MAX_SCHEMA_BYTES)});
        let too_large = described(json!({"name": "x", "inputSchema": huge}));
        assert!(matches!(capability(&calc, too_large), Err(ToolRefused::SchemaTooLarge { .. })));
    }

    #[test]
    fn results_become_the_facets_value() {
        let calc = server(json!({"id": "calc", "url": "http://127.0.0.1:1/mcp"}));
        let add = capability(&calc, add_tool()).unwrap();
        let structured =
            json!({"content": [{"type": "text", "text": "{\"total\":5}"}], "structuredContent": {"total": 5}});
        assert_eq!(output(tool_of(&add), "add", &structured).unwrap(), json!({"add": {"total": 5}}));
        let broken = json!({"content": [], "structuredContent": {"total": "five"}});
        assert!(matches!(output(tool_of(&add), "add", &broken), Err(CapabilityError::Contract(v)) if v.len() == 1));

        let echo = capability(&calc, described(json!({"name": "echo", "inputSchema": {"type": "object"}}))).unwrap();
        let json_text = json!({"content": [{"type": "text", "text": "[1, 2]"}]});
        assert_eq!(output(tool_of(&echo), "echo", &json_text).unwrap(), json!({"echo": [1, 2]}));
        let plain = json!({"content": [{"type": "text", "text": "Echo: hi"}]});
        assert_eq!(
            output(tool_of(&echo), "echo", &plain).unwrap(),
            json!({"echo": {"text": "Echo: hi", "content": [{"type": "text", "text": "Echo: hi"}]}})
        );
    }

    #[test]
    fn an_error_result_is_the_tools_failure_with_its_text_bounded() {
        let calc = server(json!({"id": "calc", "url": "http://127.0.0.1:1/mcp"}));
        let echo = capability(&calc, described(json!({"name": "echo"}))).unwrap();
        let failed = json!({"isError": true, "content": [{"type": "text", "text": "boom ".repeat(1000)}]});
        // Bounded as every error of a frame is: the first characters and how many more there were.
        let Err(CapabilityError::Tool(message)) = output(tool_of(&echo), "echo", &failed) else { panic!() };
        assert!(message.starts_with("boom") && message.ends_with("(4000 more characters)"), "{message}");
        assert_eq!(CapabilityError::Tool(message).code(), "tool_error");
    }
}
