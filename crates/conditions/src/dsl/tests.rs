//! Fixtures pinning the stored JSON-Logic form (`docs/dsl.md`, "JSON-Logic"), the error catalogue
//! with exact ranges, relative names, and evaluation of compiled conditions through the JSON-Logic
//! engine.

use serde_json::{Value, json};

use super::*;
use crate::Rule;

fn catalog() -> Catalog {
    let plan_knobs = json!({"type": "object", "properties": {
        "hookIntensity": {"type": "number"}, "variantCount": {"type": "integer"},
        "formatType": {"type": "string", "enum": ["text", "image"]}}});
    let clarification = json!({"type": "object", "properties": {"readyForPlanner": {"type": "boolean"}}});
    let recommendations = json!({"type": "array", "items": {"type": "object", "properties": {
        "severity": {"type": "string"}, "score": {"type": "number"}}}});
    Catalog::with_facets([
        ("planKnobs", &plan_knobs),
        ("clarificationResponse", &clarification),
        ("recommendationSet", &recommendations),
    ])
}

fn ok(source: &str) -> Compiled {
    compile(source, &catalog(), Scope::Catalog).unwrap_or_else(|e| panic!("{source}: {e:?}"))
}

fn errors(source: &str) -> Vec<DslError> {
    compile(source, &catalog(), Scope::Catalog).expect_err(source)
}

const KNOB: &str = "metadata.runContextSnapshot.facets.planKnobs.value";
const RECS: &str = "metadata.runContextSnapshot.facets.recommendationSet.value";

#[test]
fn fixtures_compile_to_the_documented_json_logic_and_render_back() {
    let ready = "metadata.runContextSnapshot.facets.clarificationResponse.value.readyForPlanner";
    let fixtures: [(&str, Value); 6] = [
        (
            "facets.planKnobs.hookIntensity < 0.6 && facets.planKnobs.variantCount > 2",
            json!({"and": [{"<": [{"var": format!("{KNOB}.hookIntensity")}, 0.6]},
                           {">": [{"var": format!("{KNOB}.variantCount")}, 2]}]}),
        ),
        (
            "facets.planKnobs.hookIntensity < 0.5 || facets.planKnobs.formatType == \"text\" && run.requiresHitl == true",
            json!({"or": [{"<": [{"var": format!("{KNOB}.hookIntensity")}, 0.5]},
                          {"and": [{"==": [{"var": format!("{KNOB}.formatType")}, "text"]},
                                   {"==": [{"var": "run.requiresHitl"}, true]}]}]}),
        ),
        (
            "exists(facets.clarificationResponse.readyForPlanner) && facets.clarificationResponse.readyForPlanner == true",
            json!({"and": [{"!": [{"missing": [ready]}]}, {"==": [{"var": ready}, true]}]}),
        ),
        (
            "some(facets.recommendationSet, item.severity == \"critical\")",
            json!({"some": [{"var": RECS}, {"==": [{"var": "item.severity"}, "critical"]}]}),
        ),
        (
            "all(facets.recommendationSet, item.severity != \"critical\")",
            json!({"all": [{"var": RECS}, {"!=": [{"var": "item.severity"}, "critical"]}]}),
        ),
        (
            "some(facets.recommendationSet as rec, rec.severity == \"critical\")",
            json!({"some": [{"var": RECS}, {"==": [{"var": "rec.severity"}, "critical"]}, "rec"]}),
        ),
    ];
    for (source, expected) in fixtures {
        let compiled = ok(source);
        assert_eq!(compiled.json_logic, expected, "{source}");
        assert_eq!(compiled.canonical_dsl, source, "canonical form of {source}");
        assert_eq!(from_json_logic(&expected, &catalog()).unwrap(), source, "rendered back from JSON-Logic");
    }
}

#[test]
fn legacy_alias_renders_canonically() {
    let compiled = ok("facets.planKnobs.value.hookIntensity < 0.6");
    assert_eq!(compiled.canonical_dsl, "facets.planKnobs.hookIntensity < 0.6");
    assert_eq!(compiled.variables, [format!("{KNOB}.hookIntensity")]);
}

#[test]
fn canonical_rendering_uses_minimal_parentheses() {
    for (source, canonical) in [
        ("(a == 1)", "a == 1"),
        ("a == 1 && (b == 2 && c == 3)", "a == 1 && b == 2 && c == 3"),
        ("(a == 1 || b == 2) && c == 3", "(a == 1 || b == 2) && c == 3"),
        ("a == 1 || (b == 2 && c == 3)", "a == 1 || b == 2 && c == 3"),
        ("!(a == 1)", "!(a == 1)"),
        ("!!a", "!!a"),
        ("a > 1 == true", "(a > 1) == true"),
        ("x == 'it\"s'", "x == \"it\\\"s\""),
        ("x == -1.50", "x == -1.5"),
        ("x == 2.0", "x == 2.0"),
    ] {
        let compiled = compile(source, &Catalog::builtin(), Scope::Relative { schema: None }).unwrap();
        assert_eq!(compiled.canonical_dsl, canonical, "{source}");
    }
}

#[test]
fn noop_true_warns() {
    let compiled = compile("true", &Catalog::builtin(), Scope::Catalog).unwrap();
    assert_eq!(compiled.warnings[0].code, "noop_true");
    assert_eq!(compiled.json_logic, json!(true));
}

/// (source, code, message, start offset, end offset) for every error code and template.
#[test]
fn error_catalogue_with_exact_ranges() {
    let cases: &[(&str, ErrorCode, &str, usize, usize)] = &[
        ("", ErrorCode::EmptyExpression, "Expression is empty.", 0, 0),
        ("   ", ErrorCode::EmptyExpression, "Expression is empty.", 0, 0),
        ("run.latencyMs == 'x", ErrorCode::SyntaxError, "Unterminated string literal.", 17, 19),
        ("run.latencyMs = 1", ErrorCode::SyntaxError, "Unexpected character `=`.", 14, 15),
        ("run.latencyMs == )", ErrorCode::SyntaxError, "Unexpected token `)`.", 17, 18),
        ("run.latencyMs ==", ErrorCode::SyntaxError, "Unexpected end of expression.", 16, 16),
        ("(run.latencyMs == 1", ErrorCode::SyntaxError, "Unclosed parenthesis.", 19, 19),
        ("run.latencyMs == 1 1", ErrorCode::SyntaxError, "Unexpected token `1`.", 19, 20),
        ("exists run.latencyMs", ErrorCode::SyntaxError, "Expected `(` after `exists`.", 7, 20),
        ("exists(run.latencyMs", ErrorCode::SyntaxError, "Unclosed `exists` argument.", 20, 20),
        (
            "some(facets.recommendationSet as , x)",
            ErrorCode::SyntaxError,
            "Expected alias identifier after `as`.",
            33,
            34,
        ),
        (
            "some(facets.recommendationSet as a.b, a.b == 1)",
            ErrorCode::SyntaxError,
            "Alias may not contain `.` segments.",
            33,
            36,
        ),
        (
            "some(facets.recommendationSet item.score > 1)",
            ErrorCode::SyntaxError,
            "Expected `,` after quantifier collection.",
            30,
            40,
        ),
        (
            "some(facets.recommendationSet, item.score > 1",
            ErrorCode::SyntaxError,
            "Unclosed quantifier predicate.",
            45,
            45,
        ),
        (
            "facets.planKnobs.hookIntensty < 1",
            ErrorCode::UnknownVariable,
            "Variable `facets.planKnobs.hookIntensty` is not registered (did you mean `facets.planKnobs.hookIntensity`?).",
            0,
            29,
        ),
        (
            "nothing.like.this == 1",
            ErrorCode::UnknownVariable,
            "Variable `nothing.like.this` is not registered.",
            0,
            17,
        ),
        (
            "facets.planKnobs.formatType > \"a\"",
            ErrorCode::OperatorNotAllowed,
            "Operator `>` is not allowed for variable `facets.planKnobs.formatType`.",
            0,
            33,
        ),
        (
            "facets.planKnobs.hookIntensity == \"high\"",
            ErrorCode::TypeMismatch,
            "Type mismatch: variable `facets.planKnobs.hookIntensity` (number) cannot be compared to string literal.",
            0,
            40,
        ),
        (
            "facets.planKnobs.hookIntensity == facets.planKnobs.formatType",
            ErrorCode::TypeMismatch,
            "Type mismatch: variables `facets.planKnobs.hookIntensity` (number) and `facets.planKnobs.formatType` (string) are incompatible with `==`.",
            0,
            61,
        ),
        (
            "facets.recommendationSet == \"x\"",
            ErrorCode::TypeMismatch,
            "Type mismatch: variable `facets.recommendationSet` (array) cannot be compared to string literal.",
            0,
            31,
        ),
        ("some(1, item == 1)", ErrorCode::InvalidQuantifier, "Quantifier collection must reference a variable.", 5, 6),
        (
            "some(facets.planKnobs.hookIntensity, item > 1)",
            ErrorCode::InvalidQuantifier,
            "Quantifier `some` expects collection `facets.planKnobs.hookIntensity` to be an array.",
            5,
            35,
        ),
        (
            "all(facets.recommendationSet, run.latencyMs > 1)",
            ErrorCode::InvalidQuantifier,
            "Quantifier predicate must reference alias `item`.",
            30,
            47,
        ),
        ("exists(1)", ErrorCode::InvalidConditionExists, "`exists()` requires a catalog variable argument.", 7, 8),
        (
            "some(facets.recommendationSet, exists(item.score))",
            ErrorCode::InvalidConditionExists,
            "exists() only supports catalog variables. Alias `item.score` cannot be used here.",
            38,
            48,
        ),
        (
            "exists(facets.planKnobs.hookIntensty)",
            ErrorCode::InvalidConditionExists,
            "Variable `facets.planKnobs.hookIntensty` is not registered. exists() only supports catalog variables (did you mean `facets.planKnobs.hookIntensity`?).",
            7,
            36,
        ),
    ];
    for (source, code, message, start, end) in cases {
        let found = errors(source);
        let first = &found[0];
        assert_eq!((first.code, first.message.as_str()), (*code, *message), "{source}: {found:?}");
        assert_eq!((first.range.start.offset, first.range.end.offset), (*start, *end), "range of {source}");
        assert_eq!(first.range.start.line, 1);
        assert_eq!(first.range.start.column, start + 1);
    }
}

#[test]
fn every_error_of_an_expression_is_reported() {
    let found = errors("facets.nope > 1 && facets.planKnobs.formatType > 2 || exists(3)");
    let codes: Vec<ErrorCode> = found.iter().map(|e| e.code).collect();
    assert_eq!(codes, [ErrorCode::UnknownVariable, ErrorCode::OperatorNotAllowed, ErrorCode::InvalidConditionExists]);
    let lexical = errors("a & b | c");
    assert_eq!(lexical.len(), 2, "{lexical:?}");
}

#[test]
fn multiline_ranges_count_lines() {
    let found = errors("run.latencyMs > 1 &&\n  facets.nope == 2");
    assert_eq!(found[0].range.start, Position { offset: 23, line: 2, column: 3 });
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let deep = format!("{}run.latencyMs > 1{}", "(".repeat(10_000), ")".repeat(10_000));
    let found = errors(&deep);
    assert_eq!(found[0].code, ErrorCode::SyntaxError);
    assert!(found[0].message.contains("nests deeper"), "{}", found[0].message);
    let bangs = format!("{}true", "!".repeat(10_000));
    assert!(errors(&bangs)[0].message.contains("nests deeper"));
}

/// Found by the fuzzer: a long comparison chain parses flat but renders with one pair of
/// parentheses per link; the chain must count toward the nesting limit so that every canonical
/// form parses again.
#[test]
fn comparison_chains_count_toward_the_nesting_limit() {
    let chain = |links: usize| format!("a{}", " < b".repeat(links));
    let scope = Scope::Relative { schema: None };
    let within = compile(&chain(MAX_DEPTH), &catalog(), scope).unwrap();
    assert!(compile(&within.canonical_dsl, &catalog(), scope).is_ok(), "the canonical form parses again");
    let beyond = compile(&chain(MAX_DEPTH + 1), &catalog(), scope).unwrap_err();
    assert!(beyond[0].message.contains("nests deeper"), "{beyond:?}");
    // Found by the fuzzer: what compiles renders back from its JSON-Logic, however its `&&` levels
    // and comparison chains combine.
    let long = format!("{} && {}", chain(MAX_DEPTH), chain(MAX_DEPTH - 1));
    let compiled = compile(&long, &catalog(), scope).unwrap();
    assert_eq!(from_json_logic(&compiled.json_logic, &catalog()).unwrap(), compiled.canonical_dsl);
    // Also found by the fuzzer: operands of a chain gain the chain's parentheses when rendered.
    let bangs = |n: usize| "!".repeat(n);
    for n in 55..=MAX_DEPTH {
        let source = format!("all(items, {}at > fi > {}item.t == \"x\")", bangs(12), bangs(n));
        if let Ok(compiled) = compile(&source, &catalog(), scope) {
            let again = compile(&compiled.canonical_dsl, &catalog(), scope);
            assert!(again.is_ok(), "{n}: {} does not parse again: {again:?}", compiled.canonical_dsl);
        }
    }
}

#[test]
fn relative_names_read_the_value_at_the_path() {
    let compiled = compile("status == \"approved\"", &catalog(), Scope::Relative { schema: None }).unwrap();
    assert_eq!(compiled.json_logic, json!({"==": [{"var": "status"}, "approved"]}));
    assert!(compiled.variables.is_empty());

    let schema = json!({"type": "object", "properties": {"status": {"type": "string"}, "score": {"type": "number"}}});
    let scope = Scope::Relative { schema: Some(&schema) };
    assert!(compile("score >= 0.8 && status != \"draft\"", &catalog(), scope).is_ok());
    let found = compile("stauts == \"x\" || status > 1", &catalog(), scope).unwrap_err();
    assert_eq!(found[0].message, "Variable `stauts` is not registered (did you mean `status`?).");
    assert_eq!(found[1].code, ErrorCode::OperatorNotAllowed);
    // Catalog variables still work next to relative names.
    assert!(compile("score > facets.planKnobs.hookIntensity", &catalog(), scope).is_ok());
}

#[test]
fn json_logic_outside_the_dsl_is_refused_by_the_renderer() {
    let c = catalog();
    for (logic, message) in [
        (json!({"+": [1, 2]}), "Operator `+` is not supported by the DSL renderer."),
        (json!({"==": [1, 2], "!=": [1, 2]}), "JSON-Logic object must have exactly one operator."),
        (json!([1, 2]), "Unexpected array at root level in JSON-Logic expression."),
        (json!({"var": ["score", 0.5]}), "`var` with a default is not expressible in the DSL."),
    ] {
        let error = from_json_logic(&logic, &c).unwrap_err();
        assert_eq!((error.code, error.message.as_str()), (ErrorCode::InvalidJsonLogic, message));
    }
    for not_a_name in ["", "first-name", "null", "true", "a..b"] {
        let error = from_json_logic(&json!({"==": [{"var": not_a_name}, 1]}), &c).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidJsonLogic, "{not_a_name:?}");
    }
    assert_eq!(
        from_json_logic(&json!({"some": [{"var": RECS}, {"==": [{"var": "score"}, 1]}]}), &c).unwrap(),
        "some(facets.recommendationSet, item.score == 1)",
        "plain vars inside a quantifier read the item"
    );
}

fn holds(source: &str, scope: Scope<'_>, data: Value) -> bool {
    let compiled = compile(source, &catalog(), scope).unwrap();
    Rule::from_dsl(compiled.json_logic, compiled.eval_logic).unwrap().holds(&data).unwrap()
}

fn snapshot(facets: Value) -> Value {
    let facets: serde_json::Map<String, Value> =
        facets.as_object().unwrap().iter().map(|(k, v)| (k.clone(), json!({"value": v}))).collect();
    json!({"metadata": {"runContextSnapshot": {"facets": facets}}})
}

#[test]
fn outer_names_inside_quantifiers_render_back_as_outer_names() {
    let scope = Scope::Relative { schema: None };
    for source in [
        "some(variants as v, v.score >= threshold)",
        "all(variants, item.score >= threshold)",
        "some(facets.recommendationSet, item.score > facets.planKnobs.hookIntensity)",
    ] {
        let compiled = compile(source, &catalog(), scope).unwrap();
        assert_eq!(from_json_logic(&compiled.json_logic, &catalog()).unwrap(), source);
    }
}

#[test]
fn compiled_quantifiers_evaluate_with_their_scopes() {
    let data = snapshot(json!({
        "recommendationSet": [{"severity": "low", "score": 0.9}, {"severity": "critical", "score": 0.2}],
        "planKnobs": {"hookIntensity": 0.5}
    }));
    assert!(holds("some(facets.recommendationSet, item.severity == \"critical\")", Scope::Catalog, data.clone()));
    assert!(!holds("all(facets.recommendationSet, item.severity != \"critical\")", Scope::Catalog, data.clone()));
    assert!(holds("some(facets.recommendationSet as rec, rec.score > 0.8)", Scope::Catalog, data.clone()));
    // An outer variable inside the predicate is read from the root, not from the item.
    assert!(holds(
        "some(facets.recommendationSet, item.score > facets.planKnobs.hookIntensity)",
        Scope::Catalog,
        data.clone()
    ));
    assert!(!holds(
        "all(facets.recommendationSet, item.score > facets.planKnobs.hookIntensity)",
        Scope::Catalog,
        data.clone()
    ));
    assert!(holds("exists(facets.planKnobs.hookIntensity)", Scope::Catalog, data.clone()));
    assert!(!holds("exists(facets.planKnobs.variantCount)", Scope::Catalog, data));
}

#[test]
fn relative_quantifiers_read_outer_relative_values() {
    let data = json!({"variants": [{"score": 0.4}, {"score": 0.9}], "threshold": 0.8});
    let scope = Scope::Relative { schema: None };
    assert!(holds("some(variants as v, v.score >= threshold)", scope, data.clone()));
    assert!(!holds("all(variants, item.score >= threshold)", scope, data));
}

/// An inner quantifier's predicate reads an outer quantifier's item, and the data, at any depth.
#[test]
fn nested_quantifiers_read_their_outer_items() {
    let scope = Scope::Relative { schema: None };
    let orders = |have: i64| {
        json!({"items": [{"sku": "A", "qty": 5}], "stock": [{"sku": "B", "have": 9}, {"sku": "A", "have": have}],
               "floor": 2})
    };
    let enough = "all(items as i, some(stock as s, s.sku == i.sku && s.have >= i.qty))";
    assert!(holds(enough, scope, orders(5)));
    assert!(!holds(enough, scope, orders(4)), "no stock line of sku A has 5");
    let above_floor = "some(items as i, some(stock as s, s.sku == i.sku && s.have > floor))";
    assert!(holds(above_floor, scope, orders(3)));
    assert!(!holds(above_floor, scope, orders(1)));
    let three = "some(xs as a, some(ys as b, some(zs as c, c.z == a.v && b.w < a.v && c.z > floor)))";
    let data = |z: i64| json!({"xs": [{"v": 5}], "ys": [{"w": 1}], "zs": [{"z": z}], "floor": 2});
    assert!(holds(three, scope, data(5)));
    assert!(!holds(three, scope, data(4)));
    // One level, no outer item read: evaluated as before, without the frame.
    let compiled = compile("some(items as i, i.qty > floor)", &catalog(), scope).unwrap();
    assert_eq!(compiled.eval_logic["some"][0], json!({"var": "items"}));
}

/// The JSON-Logic flexrun shows for a DSL condition, posted back as `jsonLogic`, holds as the DSL
/// does; standard JSON-Logic holds as written.
#[test]
fn shown_json_logic_posted_back_is_evaluated_as_its_dsl() {
    let scope = Scope::Relative { schema: None };
    let data = json!({"xs": [{"v": 5}], "items": [{"sku": "A"}]});
    for source in ["some(xs as a, a.v > 1)", "some(items, item.sku == \"A\")"] {
        let shown = compile(source, &catalog(), scope).unwrap().json_logic;
        let (rule, expression) = json_logic_rule(shown.clone(), &catalog(), scope).unwrap();
        assert_eq!(rule.holds(&data), Ok(true), "{shown}");
        assert_eq!(expression.as_deref(), Some(source));
        assert_eq!(rule.source(), &shown, "shown as given");
    }
    let standard = json!({"some": [{"var": "items"}, {"==": [{"var": "sku"}, "A"]}]});
    let (rule, expression) = json_logic_rule(standard, &catalog(), scope).unwrap();
    assert_eq!(rule.holds(&data), Ok(true));
    assert_eq!(expression.as_deref(), Some("some(items, item.sku == \"A\")"));
    assert!(json_logic_rule(json!({"nope": [1]}), &catalog(), scope).is_err());
}

/// An expression with thousands of unknown names gets a bounded answer (and suggestions are
/// looked for only for the problems reported).
#[test]
fn thousands_of_problems_are_reported_as_a_bounded_list() {
    let long_name = "z".repeat(10_000);
    let source: Vec<String> = (0..5_000).map(|i| format!("facets.zz{i}.q > 1")).collect();
    let source = format!("{} && {long_name} > 1", source.join(" && "));
    let errors = compile(&source, &catalog(), Scope::Catalog).unwrap_err();
    assert_eq!(errors.len(), super::error::MAX_ERRORS + 1);
    assert_eq!(errors[super::error::MAX_ERRORS].message, "and 4981 more problems like these");
    let errors = compile(&format!("{long_name} > 1"), &catalog(), Scope::Catalog).unwrap_err();
    assert!(errors[0].message.len() < 200, "{}", errors[0].message);
    let stray = compile(&"#".repeat(10_000), &catalog(), Scope::Catalog).unwrap_err();
    assert_eq!(stray.len(), super::error::MAX_ERRORS + 1);
}
