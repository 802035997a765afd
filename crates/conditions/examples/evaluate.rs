//! Compiles a condition written in the DSL and evaluates it over a value picked by JSON Pointer:
//! `cargo run -p flexrun-conditions --example evaluate`.

use flexrun_conditions::dsl::{self, Catalog, Scope};
use flexrun_conditions::{FacetPath, FacetSource, GoalCondition, Rule, all_satisfied, evaluate_all};
use serde_json::{Value, json};

/// A run context of one facet: where conditions read their values.
struct Context(Value);

impl FacetSource for Context {
    fn facet_value(&self, facet: &str) -> Option<&Value> {
        self.0.get(facet)
    }

    fn snapshot(&self) -> Value {
        json!({"facets": self.0})
    }
}

fn main() -> Result<(), String> {
    // Names are read relative to the value at the condition's path (here the whole facet).
    let source = r#"quality_score >= 0.8 && all(tags as t, t != "")"#;
    let compiled = dsl::compile(source, &Catalog::builtin(), Scope::Relative { schema: None })
        .map_err(|errors| format!("{errors:?}"))?;
    println!("{source}\n  → JSON-Logic {}", compiled.json_logic);

    let condition = GoalCondition {
        facet: "post".into(),
        path: FacetPath::parse("")?,
        dsl: Some(source.into()),
        expression: compiled.canonical_dsl.clone(),
        rule: Rule::from_dsl(compiled.json_logic, compiled.eval_logic)?,
        variables: compiled.variables,
    };
    for post in [json!({"quality_score": 0.9, "tags": ["rust"]}), json!({"quality_score": 0.9, "tags": [""]})] {
        let results = evaluate_all(std::slice::from_ref(&condition), &Context(json!({"post": post})));
        println!("{post} → {}", if all_satisfied(&results) { "holds" } else { "does not hold" });
    }
    Ok(())
}
