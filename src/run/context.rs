//! The run context: the current value of every facet, with where each value came from.

use std::collections::BTreeMap;

use chrono::{SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::condition::FacetSource;
use crate::plan::PlanNode;

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

impl RunContext {
    /// A context holding the envelope's inputs.
    pub fn seeded(inputs: &Map<String, Value>) -> Self {
        let mut context = Self::default();
        for (facet, value) in inputs {
            context.write(
                facet,
                value.clone(),
                Provenance {
                    node_id: ENVELOPE_INPUT.to_string(),
                    capability_id: None,
                    plan_version: None,
                    timestamp: now(),
                },
            );
        }
        context
    }

    /// The facet values a node's output writes: each of the node's output facets present as a key
    /// of an object output; if there is none, and the node has exactly one output facet, the whole
    /// output goes to that facet.
    pub fn facet_writes<'o>(node: &PlanNode, output: &'o Value) -> Vec<(String, &'o Value)> {
        let keyed: Vec<(String, &Value)> = node
            .output_facets
            .iter()
            .filter_map(|facet| output.get(facet.as_str()).map(|value| (facet.clone(), value)))
            .collect();
        match (keyed.is_empty(), node.output_facets.as_slice()) {
            (true, [only]) => vec![(only.clone(), output)],
            _ => keyed,
        }
    }

    /// Stores a node's output as [`Self::facet_writes`] describes; returns the facets written.
    pub fn record_output(&mut self, node: &PlanNode, plan_version: u32, output: &Value) -> Vec<String> {
        let writes = Self::facet_writes(node, output);
        for (facet, value) in &writes {
            self.write(
                facet,
                (*value).clone(),
                Provenance {
                    node_id: node.id.clone(),
                    capability_id: Some(node.capability_id.clone()),
                    plan_version: Some(plan_version),
                    timestamp: now(),
                },
            );
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

    pub fn contains(&self, facet: &str) -> bool {
        self.facets.contains_key(facet)
    }

    pub fn facet_names(&self) -> impl Iterator<Item = &String> {
        self.facets.keys()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_string())
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

fn now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::NodeStatus;

    fn node(outputs: &[&str]) -> PlanNode {
        PlanNode {
            id: "n1".into(),
            stage: "n1".into(),
            label: "n1".into(),
            capability_id: "cap".into(),
            kind: "execution".into(),
            input_facets: vec![],
            output_facets: outputs.iter().map(|s| s.to_string()).collect(),
            rationale: vec![],
            instructions: vec![],
            status: NodeStatus::Pending,
        }
    }

    #[test]
    fn keyed_facets_win_over_whole_output() {
        let mut cx = RunContext::default();
        let written = cx.record_output(&node(&["a", "b"]), 1, &json!({"a": 1, "c": 3}));
        assert_eq!(written, ["a"]);
        assert_eq!(cx.facet_value("a"), Some(&json!(1)));
        assert!(!cx.contains("b"));
    }

    #[test]
    fn single_facet_takes_whole_output() {
        let mut cx = RunContext::default();
        let written = cx.record_output(&node(&["post"]), 2, &json!({"text": "hi", "score": 0.5}));
        assert_eq!(written, ["post"]);
        assert_eq!(cx.facet_value("post").unwrap()["score"], json!(0.5));
        let snapshot = cx.snapshot();
        assert_eq!(snapshot["facets"]["post"]["provenance"][0]["nodeId"], "n1");
        assert_eq!(snapshot["facets"]["post"]["provenance"][0]["planVersion"], 2);
    }

    #[test]
    fn seeded_inputs_and_round_trip() {
        let inputs = json!({"brief": {"topic": "x"}});
        let cx = RunContext::seeded(inputs.as_object().unwrap());
        assert_eq!(cx.facet_value("brief"), Some(&json!({"topic": "x"})));
        let back: RunContext = serde_json::from_str(&cx.to_json()).unwrap();
        assert_eq!(back, cx);
    }

    #[test]
    fn provenance_is_bounded() {
        let mut cx = RunContext::default();
        for i in 0..(MAX_PROVENANCE + 5) {
            cx.record_output(&node(&["a"]), i as u32, &json!(i));
        }
        let snapshot = cx.snapshot();
        assert_eq!(snapshot["facets"]["a"]["provenance"].as_array().unwrap().len(), MAX_PROVENANCE);
        assert_eq!(cx.facet_value("a"), Some(&json!(MAX_PROVENANCE + 4)));
    }
}
