//! The registrations stored in the database as a node follows them: with several nodes on one
//! database, any node may register or unregister a capability, and every node's active set must
//! come to offer what is stored. The server reads the rows; this module says what differs from
//! what the node applied last and how its active set changes, without I/O.
//!
//! Only registered capabilities (files and the register endpoint: the rows) follow the database.
//! An MCP server's tools are set by its connection on each node and are never touched here, but a
//! registration of the same id wins over a tool, as it does when registered on the node itself.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Capabilities, Capability, EndpointAllowlist, Executor};
use crate::validation::FieldError;

/// Stored registrations by capability id: each row's registration text (valid or not).
pub type Registrations = BTreeMap<String, String>;

/// What changed between the registrations a node applied and those stored now.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Difference {
    /// Ids stored now whose registration the node has not applied: new, or registered again
    /// with another registration.
    pub stored: Vec<String>,
    /// Ids the node applied that are no longer stored.
    pub removed: Vec<String>,
}

/// A stored registration the node does not offer: the id and every problem found.
#[derive(Debug, Clone)]
pub struct Invalid {
    pub capability_id: String,
    pub errors: Vec<FieldError>,
}

/// What `stored` holds that `applied` does not, and the reverse. Registrations are compared by
/// their text, which is what the node that registered one stored.
pub fn difference(applied: &Registrations, stored: &Registrations) -> Difference {
    Difference {
        stored: stored
            .iter()
            .filter(|(id, registration)| applied.get(*id) != Some(*registration))
            .map(|(id, _)| id.clone())
            .collect(),
        removed: applied.keys().filter(|id| !stored.contains_key(*id)).cloned().collect(),
    }
}

/// Reads a stored registration (its text as stored) into a capability, as `policy` allows.
pub fn parse_stored(registration: &str, policy: &EndpointAllowlist) -> Result<Capability, Vec<FieldError>> {
    let value = serde_json::from_str(registration).map_err(|e| vec![FieldError::new("", "json", e.to_string())])?;
    Capability::parse(value, policy)
}

impl Difference {
    pub fn is_empty(&self) -> bool {
        self.stored.is_empty() && self.removed.is_empty()
    }

    /// Changes `active` to offer what `stored` (the rows this difference was taken against)
    /// holds: a removed registration is no longer offered, a new or changed one is offered in
    /// place of what had its id. A registration that is not valid here (another node's
    /// allowlist may differ, or the row was written by hand) is not offered, nor is what it
    /// replaced: it is returned, so the caller can say so. An MCP tool stays, unless a valid
    /// registration takes its id.
    pub fn apply(&self, active: &mut Capabilities, stored: &Registrations, policy: &EndpointAllowlist) -> Vec<Invalid> {
        let registered = |active: &Capabilities, id: &str| {
            active.get(id).is_some_and(|capability| !matches!(capability.executor, Executor::Mcp(_)))
        };
        for id in &self.removed {
            if registered(active, id) {
                active.remove(id);
            }
        }
        let mut invalid = Vec::new();
        for id in &self.stored {
            let Some(registration) = stored.get(id) else { continue };
            let parsed = parse_stored(registration, policy).and_then(|capability| {
                if capability.id == *id {
                    Ok(capability)
                } else {
                    Err(vec![FieldError::new(
                        "/capabilityId",
                        "stored_id",
                        format!("the registration is stored under another id ({id})"),
                    )])
                }
            });
            match parsed {
                Ok(capability) => {
                    active.insert(id.clone(), Arc::new(capability));
                }
                Err(errors) => {
                    if registered(active, id) {
                        active.remove(id);
                    }
                    invalid.push(Invalid { capability_id: id.clone(), errors });
                }
            }
        }
        invalid
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::McpServer;
    use crate::mcp::tool::{ToolDescription, capability as tool_capability};
    use serde_json::{Value, json};

    fn registration(id: &str, summary: &str) -> String {
        json!({
            "capabilityId": id, "version": "1.0", "displayName": id, "summary": summary,
            "kind": "execution", "agentType": "ai", "inputFacets": ["brief"], "outputFacets": ["post_copy"],
            "outputContract": {"mode": "json_schema", "schema": {"type": "object"}}
        })
        .to_string()
    }

    fn registrations(entries: &[(&str, &str)]) -> Registrations {
        entries.iter().map(|(id, summary)| (id.to_string(), registration(id, summary))).collect()
    }

    fn active_of(registrations: &Registrations) -> Capabilities {
        registrations
            .iter()
            .map(|(id, text)| (id.clone(), Arc::new(parse_stored(text, &EndpointAllowlist::default()).unwrap())))
            .collect()
    }

    /// The tool `name` of MCP server `calc`, as its connection offers it.
    fn tool(name: &str) -> Arc<Capability> {
        let server = McpServer::parse(&json!({"id": "calc", "url": "http://127.0.0.1:1/mcp"}), &Default::default());
        let described: ToolDescription = serde_json::from_value(json!({"name": name})).unwrap();
        Arc::new(tool_capability(&server.unwrap(), described).unwrap())
    }

    fn summaries(active: &Capabilities) -> Vec<(String, String)> {
        active.values().map(|c| (c.id.clone(), c.summary.clone())).collect()
    }

    #[test]
    fn nothing_differs_when_the_same_registrations_are_stored() {
        let applied = registrations(&[("a", "A"), ("b", "B")]);
        let diff = difference(&applied, &applied.clone());
        assert!(diff.is_empty(), "{diff:?}");
    }

    #[test]
    fn new_changed_and_removed_registrations_differ() {
        let applied = registrations(&[("a", "A"), ("b", "B"), ("c", "C")]);
        let stored = registrations(&[("a", "A"), ("b", "B again"), ("d", "D")]);
        let diff = difference(&applied, &stored);
        assert_eq!(diff, Difference { stored: vec!["b".into(), "d".into()], removed: vec!["c".into()] });
    }

    #[test]
    fn applying_offers_what_is_stored() {
        let applied = registrations(&[("a", "A"), ("b", "B"), ("c", "C")]);
        let stored = registrations(&[("a", "A"), ("b", "B again"), ("d", "D")]);
        let mut active = active_of(&applied);
        let unchanged = active["a"].clone();
        let invalid = difference(&applied, &stored).apply(&mut active, &stored, &EndpointAllowlist::default());
        assert!(invalid.is_empty());
        let expected: Vec<(String, String)> =
            [("a", "A"), ("b", "B again"), ("d", "D")].iter().map(|(i, s)| (i.to_string(), s.to_string())).collect();
        assert_eq!(summaries(&active), expected);
        assert!(Arc::ptr_eq(&active["a"], &unchanged), "an unchanged registration is not parsed again");
    }

    #[test]
    fn an_mcp_servers_tools_stay_whatever_is_stored() {
        let applied = registrations(&[("a", "A")]);
        let mut active = active_of(&applied);
        let add = tool("add");
        active.insert(add.id.clone(), add.clone());
        // A registration of that id was stored once (and applied); it is gone now, and so is "a".
        let mut applied_with_tool_id = applied.clone();
        applied_with_tool_id.insert(add.id.clone(), registration(&add.id, "shadowed"));
        let stored = Registrations::new();
        let diff = difference(&applied_with_tool_id, &stored);
        assert_eq!(diff.removed, ["a".to_string(), "calc.add".to_string()]);
        diff.apply(&mut active, &stored, &EndpointAllowlist::default());
        assert_eq!(active.keys().collect::<Vec<_>>(), ["calc.add"], "the tool stays");
        assert!(Arc::ptr_eq(&active["calc.add"], &add));
    }

    #[test]
    fn a_registration_takes_the_id_of_an_mcp_tool_as_it_does_when_registered_here() {
        let add = tool("add");
        let mut active: Capabilities = [(add.id.clone(), add.clone())].into_iter().collect();
        let stored = registrations(&[("calc.add", "registered")]);
        difference(&Registrations::new(), &stored).apply(&mut active, &stored, &EndpointAllowlist::default());
        assert_eq!(summaries(&active), [("calc.add".to_string(), "registered".to_string())]);
    }

    #[test]
    fn an_invalid_registration_is_returned_and_not_offered_nor_what_it_replaced() {
        let applied = registrations(&[("a", "A"), ("b", "B")]);
        let mut active = active_of(&applied);
        let mut stored = applied.clone();
        stored.insert("a".into(), "{not json".into());
        stored.insert("b".into(), json!({"capabilityId": "b"}).to_string());
        stored.insert("c".into(), registration("other", "C"));
        let diff = difference(&applied, &stored);
        let invalid = diff.apply(&mut active, &stored, &EndpointAllowlist::default());
        let ids: Vec<&str> = invalid.iter().map(|i| i.capability_id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert!(invalid.iter().all(|i| !i.errors.is_empty()));
        assert_eq!(invalid[2].errors[0].code, "stored_id", "{:?}", invalid[2].errors);
        assert!(active.is_empty(), "{:?}", active.keys().collect::<Vec<_>>());
    }

    #[test]
    fn an_endpoint_another_nodes_allowlist_takes_is_not_offered_here() {
        let mut http: Value = serde_json::from_str(&registration("h", "H")).unwrap();
        http["agentType"] = json!("http");
        http["endpoint"] = json!("https://elsewhere.example/h");
        let stored: Registrations = [("h".to_string(), http.to_string())].into_iter().collect();
        let here = EndpointAllowlist {
            allowed_url_prefixes: vec![crate::capability::UrlPrefix::parse("https://here.example/").unwrap()],
            ..EndpointAllowlist::default()
        };
        let mut active = Capabilities::new();
        let invalid = difference(&Registrations::new(), &stored).apply(&mut active, &stored, &here);
        assert_eq!(invalid.len(), 1);
        assert!(active.is_empty());
    }
}
