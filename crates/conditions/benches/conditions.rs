//! Condition DSL costs: `cargo bench --bench conditions`.
//!
//! - compile: DSL text → checked → JSON-Logic → engine rule, per expression;
//! - evaluate: one compiled condition against a facet value, compared with the JSON-Logic engine
//!   (datalogic-rs) evaluating the same pre-compiled rule on the same pre-parsed data.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

use std::hint::black_box;
use std::time::{Duration, Instant};

use datalogic_rs::{Engine, ParsedData, bumpalo::Bump};
use serde_json::{Map, Value, json};

use flexrun_conditions::dsl::{self, Catalog, Scope};
use flexrun_conditions::{FacetPath, FacetSource, GoalCondition, Rule, evaluate_all};

const EXPRESSIONS: [&str; 4] = [
    "quality_score >= 0.8",
    "quality_score >= 0.8 && status == \"approved\" || revisions < 3",
    "some(variants as v, v.score > 0.5 && v.channel == \"linkedin\")",
    "exists(facets.post.text) && facets.post.score >= 0.8",
];

fn catalog() -> Catalog {
    let post = json!({"type": "object", "properties": {"text": {"type": "string"}, "score": {"type": "number"}}});
    Catalog::with_facets([("post", &post)])
}

fn facet_value() -> Value {
    json!({
        "quality_score": 0.86, "status": "approved", "revisions": 1,
        "variants": [{"score": 0.4, "channel": "x"}, {"score": 0.7, "channel": "linkedin"}],
        "text": "flexrun replans until your goal conditions hold", "meta": {"author": "bench", "tags": ["a", "b"]}
    })
}

/// Mean time per call of `f`, over at least `min` of wall time.
fn time(min: Duration, mut f: impl FnMut()) -> Duration {
    for _ in 0..1000 {
        f();
    }
    let (mut calls, started) = (0u64, Instant::now());
    while started.elapsed() < min {
        for _ in 0..1000 {
            f();
        }
        calls += 1000;
    }
    started.elapsed() / calls as u32
}

struct Context(Map<String, Value>);

impl FacetSource for Context {
    fn facet_value(&self, facet: &str) -> Option<&Value> {
        self.0.get(facet)
    }
    fn snapshot(&self) -> Value {
        json!({"facets": self.0.iter().map(|(k, v)| (k.clone(), json!({"value": v}))).collect::<Map<_, _>>()})
    }
}

fn main() {
    let catalog = catalog();
    let budget = Duration::from_millis(300);
    println!("## Compile (DSL → JSON-Logic → engine rule)\n");
    println!("| expression | per compile |");
    println!("|---|---:|");
    for source in EXPRESSIONS {
        let per = time(budget, || {
            let compiled = dsl::compile(black_box(source), &catalog, Scope::Relative { schema: None }).unwrap();
            black_box(Rule::from_dsl(compiled.json_logic, compiled.eval_logic).unwrap());
        });
        println!("| `{source}` | {:.2} µs |", per.as_secs_f64() * 1e6);
    }

    println!("\n## Evaluate one compiled condition against a facet value\n");
    println!(
        "| expression | engine alone (pre-parsed data) | `Rule::holds` (serde value) | ratio | goal evaluation (`evaluate_all`) |"
    );
    println!("|---|---:|---:|---:|---:|");
    let engine = Engine::new();
    let value = facet_value();
    let parsed = ParsedData::from_json(&value.to_string()).unwrap();
    let context = Context(Map::from_iter([("post".to_string(), value.clone())]));
    for source in EXPRESSIONS.into_iter().take(3) {
        let compiled = dsl::compile(source, &catalog, Scope::Relative { schema: None }).unwrap();
        let logic = engine.compile(&compiled.eval_logic).unwrap();
        let rule = Rule::from_dsl(compiled.json_logic.clone(), compiled.eval_logic.clone()).unwrap();
        assert!(rule.holds(&value).unwrap(), "{source} holds on the bench data");
        let mut arena = Bump::with_capacity(4096);
        let raw = time(budget, || {
            arena.reset();
            let result = engine.evaluate(&logic, black_box(&parsed), &arena).unwrap();
            black_box(engine.truthy(result));
        });
        let serde = time(budget, || {
            black_box(rule.holds(black_box(&value)).unwrap());
        });
        let goal = GoalCondition {
            facet: "post".into(),
            path: FacetPath::parse("").unwrap(),
            dsl: Some(source.into()),
            expression: compiled.canonical_dsl.clone(),
            rule: rule.clone(),
            variables: vec![],
        };
        let goals = [goal];
        let full = time(budget, || {
            black_box(evaluate_all(black_box(&goals), &context));
        });
        let ns = |d: Duration| d.as_secs_f64() * 1e9;
        println!(
            "| `{source}` | {:.0} ns ({:.1} M/s) | {:.0} ns | {:.2}× | {:.0} ns |",
            ns(raw),
            1e3 / ns(raw),
            ns(serde),
            ns(serde) / ns(raw),
            ns(full)
        );
    }
}
