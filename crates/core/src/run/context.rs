//! The run context: the current value of every facet, with where each value came from.
//!
//! It is not stored: it is part of a run's state (`run::state`), folded from the envelope's inputs
//! (at `start`) and every `node_complete` frame of the run's log, in commit order.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::condition::FacetSource;
use crate::facet;

/// Provenance entries kept per facet (the newest ones).
const MAX_PROVENANCE: usize = 10;

/// The node id recorded for facets seeded from the envelope's inputs.
pub const ENVELOPE_INPUT: &str = "envelope_input";

/// Who wrote a facet value, and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Provenance {
    pub node_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capability_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_version: Option<u32>,
    pub timestamp: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FacetEntry {
    pub value: Value,
    pub updated_at: String,
    pub provenance: Vec<Provenance>,
}

/// Facet name → current value. Serialises as `{facets: {...}}`, the shape conditions see under
/// `metadata.runContextSnapshot`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunContext {
    facets: BTreeMap<String, FacetEntry>,
}

/// A node's output as it is written to the context.
#[derive(Debug, Clone, Copy)]
pub struct NodeOutput<'a> {
    pub node_id: &'a str,
    pub capability_id: &'a str,
    pub plan_version: u32,
    pub output_facets: &'a [String],
    pub output: &'a Value,
    /// When the node completed (RFC 3339), as in its `node_complete` frame.
    pub at: &'a str,
}

impl RunContext {
    /// A context holding the envelope's inputs, seeded at `at` (the run's `start`).
    pub fn seeded(inputs: Map<String, Value>, at: &str) -> Self {
        let mut context = Self::default();
        for (facet, value) in inputs {
            let provenance = Provenance {
                node_id: ENVELOPE_INPUT.into(),
                capability_id: None,
                plan_version: None,
                timestamp: at.into(),
            };
            context.write(&facet, value, provenance);
        }
        context
    }

    /// Stores a node's output as [`facet::writes`] describes; returns the facets written.
    pub fn record_output(&mut self, node: NodeOutput<'_>) -> Vec<String> {
        let writes = facet::writes(node.output_facets, node.output);
        for (facet, value) in &writes {
            let provenance = Provenance {
                node_id: node.node_id.into(),
                capability_id: Some(node.capability_id.into()),
                plan_version: Some(node.plan_version),
                timestamp: node.at.into(),
            };
            self.write(facet, (*value).clone(), provenance);
        }
        writes.into_iter().map(|(facet, _)| facet).collect()
    }

    fn write(&mut self, facet: &str, value: Value, provenance: Provenance) {
        let timestamp = provenance.timestamp.clone();
        let entry = self.facets.entry(facet.to_string()).or_insert_with(|| FacetEntry {
            value: Value::Null,
            updated_at: timestamp.clone(),
            provenance: Vec::new(),
        });
        entry.value = value;
        entry.updated_at = timestamp;
        entry.provenance.push(provenance);
        let excess = entry.provenance.len().saturating_sub(MAX_PROVENANCE);
        entry.provenance.drain(..excess);
    }

    pub fn facet_names(&self) -> impl Iterator<Item = &String> {
        self.facets.keys()
    }
}

impl FacetSource for RunContext {
    fn facet_value(&self, facet: &str) -> Option<&Value> {
        self.facets.get(facet).map(|entry| &entry.value)
    }

    fn snapshot(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|_| json!({"facets": {}}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facets(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn node<'a>(output_facets: &'a [String], output: &'a Value, plan_version: u32) -> NodeOutput<'a> {
        NodeOutput { node_id: "n1", capability_id: "cap", plan_version, output_facets, output, at: "t1" }
    }

    #[test]
    fn keyed_facets_win_over_whole_output() {
        let mut cx = RunContext::default();
        let (names, output) = (facets(&["a", "b"]), json!({"a": 1, "c": 3}));
        assert_eq!(cx.record_output(node(&names, &output, 1)), ["a"]);
        assert_eq!(cx.facet_value("a"), Some(&json!(1)));
        assert_eq!(cx.facet_value("b"), None);
    }

    #[test]
    fn single_facet_takes_whole_output() {
        let mut cx = RunContext::default();
        let (names, output) = (facets(&["post"]), json!({"text": "hi", "score": 0.5}));
        assert_eq!(cx.record_output(node(&names, &output, 2)), ["post"]);
        assert_eq!(cx.facet_value("post").unwrap()["score"], json!(0.5));
        let snapshot = cx.snapshot();
        assert_eq!(snapshot["facets"]["post"]["provenance"][0]["nodeId"], "n1");
        assert_eq!(snapshot["facets"]["post"]["provenance"][0]["planVersion"], 2);
    }

    #[test]
    fn provenance_is_bounded() {
        let mut cx = RunContext::default();
        let names = facets(&["a"]);
        for i in 0..(MAX_PROVENANCE + 5) {
            let output = json!(i);
            cx.record_output(node(&names, &output, 1));
        }
        assert_eq!(cx.snapshot()["facets"]["a"]["provenance"].as_array().unwrap().len(), MAX_PROVENANCE);
        assert_eq!(cx.facet_value("a"), Some(&json!(MAX_PROVENANCE + 4)));
    }
}
