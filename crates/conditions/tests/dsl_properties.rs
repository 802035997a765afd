//! Properties of the condition DSL over generated syntax trees:
//! `parse(render(ast)) == ast`, and the compiled JSON-Logic, evaluated by the engine, agrees with a
//! direct evaluation of the tree — also for a quantifier nested in another, reading both items.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::as_conversions)] // Test code states what it expects.

use proptest::prelude::*;
use serde_json::{Number, Value, json};

use flexrun_conditions::Rule;
use flexrun_conditions::dsl::{self, Catalog, CompareOp, Expr, Literal, Quantifier, Scope, Span};

fn catalog() -> Catalog {
    let m = json!({"type": "object", "properties": {
        "a": {"type": "number"}, "b": {"type": "number"}, "opt": {"type": "number"},
        "s": {"type": "string"}, "flag": {"type": "boolean"}}});
    let list = json!({"type": "array", "items": {"type": "object", "properties": {
        "n": {"type": "number"}, "t": {"type": "string"}}}});
    Catalog::with_facets([("m", &m), ("list", &list)])
}

fn var(name: &str) -> Expr {
    Expr::Var { name: name.into(), span: Span::default() }
}

fn lit(value: Literal) -> Expr {
    Expr::Literal { value, span: Span::default() }
}

fn cmp(op: CompareOp, left: Expr, right: Expr) -> Expr {
    Expr::Compare { op, left: Box::new(left), right: Box::new(right), span: Span::default() }
}

fn number() -> impl Strategy<Value = Number> {
    prop_oneof![
        (-5i64..=5).prop_map(Number::from),
        (-20i64..=20).prop_map(|q| Number::from_f64(q as f64 / 4.0 + 0.125).unwrap())
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![Just("x".to_string()), Just("y".to_string()), Just("it's \"q\"\n".to_string())]
}

fn op() -> impl Strategy<Value = CompareOp> {
    proptest::sample::select(CompareOp::ALL.to_vec())
}

fn equality() -> impl Strategy<Value = CompareOp> {
    prop_oneof![Just(CompareOp::Eq), Just(CompareOp::Ne)]
}

/// A well-typed comparison over the outer catalog, or over item fields inside a quantifier.
fn leaf(item: Option<&'static str>) -> BoxedStrategy<Expr> {
    let (n1, n2, s) = match item {
        Some(alias) => (format!("{alias}.n"), "facets.m.a".to_string(), format!("{alias}.t")),
        None => ("facets.m.a".to_string(), "facets.m.b".to_string(), "facets.m.s".to_string()),
    };
    let (a, b, s1) = (n1.clone(), n1.clone(), s.clone());
    let mut options = vec![
        (op(), number()).prop_map(move |(o, n)| cmp(o, var(&a), lit(Literal::Number(n)))).boxed(),
        (op(), number()).prop_map(move |(o, n)| cmp(o, lit(Literal::Number(n)), var(&b))).boxed(),
        op().prop_map(move |o| cmp(o, var(&n1), var(&n2))).boxed(),
        (equality(), text()).prop_map(move |(o, t)| cmp(o, var(&s1), lit(Literal::String(t)))).boxed(),
    ];
    if item.is_none() {
        options.push(
            (equality(), any::<bool>()).prop_map(|(o, b)| cmp(o, var("facets.m.flag"), lit(Literal::Bool(b)))).boxed(),
        );
        options.push(
            prop_oneof![Just("facets.m.opt"), Just("facets.m.a")]
                .prop_map(|v| Expr::Exists { argument: Box::new(var(v)), span: Span::default() })
                .boxed(),
        );
        options.push(any::<bool>().prop_map(|b| lit(Literal::Bool(b))).boxed());
    }
    proptest::strategy::Union::new(options).boxed()
}

fn quantifier() -> BoxedStrategy<Expr> {
    (prop_oneof![Just(Quantifier::Some), Just(Quantifier::All)], prop_oneof![Just(None), Just(Some("row"))])
        .prop_flat_map(|(quantifier, alias)| {
            let name = alias.unwrap_or("item");
            tree(leaf(Some(name)), 2).prop_map(move |predicate| Expr::Quantify {
                quantifier,
                collection: Box::new(var("facets.list")),
                alias: alias.map(String::from),
                predicate: Box::new(predicate),
                span: Span::default(),
            })
        })
        .boxed()
}

/// Comparisons inside a quantifier (alias `inner`) nested in another (`outer`): of either item's
/// fields, a catalog variable and literals.
fn across(outer: &'static str, inner: &'static str) -> BoxedStrategy<Expr> {
    let names = vec![format!("{outer}.n"), format!("{inner}.n"), "facets.m.a".to_string()];
    let pick = proptest::sample::select(names);
    prop_oneof![
        (op(), pick.clone(), pick.clone()).prop_map(|(o, l, r)| cmp(o, var(&l), var(&r))),
        (op(), pick, number()).prop_map(|(o, l, n)| cmp(o, var(&l), lit(Literal::Number(n)))),
        equality().prop_map(move |o| cmp(o, var(&format!("{outer}.t")), var(&format!("{inner}.t")))),
    ]
    .boxed()
}

/// A quantifier over `facets.list` (alias `row`) whose predicate quantifies over it again and
/// reads both items.
fn nested() -> BoxedStrategy<Expr> {
    let kind = || prop_oneof![Just(Quantifier::Some), Just(Quantifier::All)];
    (kind(), kind(), prop_oneof![Just(None), Just(Some("col"))])
        .prop_flat_map(|(outer, inner, alias)| {
            let name = alias.unwrap_or("item");
            // The DSL asks a quantifier's predicate to read its own item; the outer one's is read
            // from inside the inner one.
            let reads_both = move |p: &Expr| mentions(p, name) && mentions(p, "row");
            tree(across("row", name), 1).prop_filter("reads both items", reads_both).prop_map(move |predicate| {
                let inner = Expr::Quantify {
                    quantifier: inner,
                    collection: Box::new(var("facets.list")),
                    alias: alias.map(String::from),
                    predicate: Box::new(predicate),
                    span: Span::default(),
                };
                Expr::Quantify {
                    quantifier: outer,
                    collection: Box::new(var("facets.list")),
                    alias: Some("row".into()),
                    predicate: Box::new(inner),
                    span: Span::default(),
                }
            })
        })
        .boxed()
}

/// Whether `expr` reads a field of `alias`.
fn mentions(expr: &Expr, alias: &str) -> bool {
    match expr {
        Expr::Var { name, .. } => name.starts_with(&format!("{alias}.")),
        Expr::Not { operand, .. } => mentions(operand, alias),
        Expr::And { operands, .. } | Expr::Or { operands, .. } => operands.iter().any(|e| mentions(e, alias)),
        Expr::Compare { left, right, .. } => mentions(left, alias) || mentions(right, alias),
        _ => false,
    }
}

/// Trees over `leaves`, in the canonical shape the parser builds (flat `&&`/`||` chains).
fn tree(leaves: BoxedStrategy<Expr>, depth: u32) -> BoxedStrategy<Expr> {
    leaves
        .prop_recursive(depth, 24, 4, |inner| {
            prop_oneof![
                inner.clone().prop_map(|e| Expr::Not { operand: Box::new(e), span: Span::default() }),
                proptest::collection::vec(inner.clone(), 2..4).prop_map(|v| chain(v, true)),
                proptest::collection::vec(inner.clone(), 2..4).prop_map(|v| chain(v, false)),
                (inner, any::<bool>()).prop_map(|(e, b)| cmp(CompareOp::Eq, e, lit(Literal::Bool(b)))),
            ]
        })
        .boxed()
}

fn chain(operands: Vec<Expr>, and: bool) -> Expr {
    let mut flat = Vec::new();
    for e in operands {
        match (e, and) {
            (Expr::And { operands, .. }, true) | (Expr::Or { operands, .. }, false) => flat.extend(operands),
            (e, _) => flat.push(e),
        }
    }
    if and {
        Expr::And { operands: flat, span: Span::default() }
    } else {
        Expr::Or { operands: flat, span: Span::default() }
    }
}

fn condition() -> BoxedStrategy<Expr> {
    tree(prop_oneof![3 => leaf(None), 1 => quantifier()].boxed(), 3)
}

fn data() -> impl Strategy<Value = Value> {
    let row = (number(), text()).prop_map(|(n, t)| json!({"n": n, "t": t}));
    (number(), number(), text(), any::<bool>(), proptest::option::of(number()), proptest::collection::vec(row, 0..4))
        .prop_map(|(a, b, s, flag, opt, list)| {
            let mut m = json!({"a": a, "b": b, "s": s, "flag": flag});
            if let Some(opt) = opt {
                m["opt"] = json!(opt);
            }
            json!({"metadata": {"runContextSnapshot": {"facets": {"m": {"value": m}, "list": {"value": list}}}}})
        })
}

/// The meaning of a tree, computed directly (JSON-Logic semantics for the DSL's operators), with
/// the items of the quantifiers it is inside (innermost last).
fn eval(expr: &Expr, data: &Value, items: &[(&str, &Value)]) -> Value {
    match expr {
        Expr::Literal { value, .. } => value.to_json(),
        Expr::Var { name, .. } => lookup(name, data, items).cloned().unwrap_or(Value::Null),
        Expr::Not { operand, .. } => Value::Bool(!truthy(&eval(operand, data, items))),
        Expr::And { operands, .. } => Value::Bool(operands.iter().all(|e| truthy(&eval(e, data, items)))),
        Expr::Or { operands, .. } => Value::Bool(operands.iter().any(|e| truthy(&eval(e, data, items)))),
        Expr::Compare { op, left, right, .. } => {
            let (l, r) = (eval(left, data, items), eval(right, data, items));
            Value::Bool(match op {
                CompareOp::Eq => equal(&l, &r),
                CompareOp::Ne => !equal(&l, &r),
                ordered => {
                    let (x, y) = (l.as_f64().unwrap(), r.as_f64().unwrap());
                    match ordered {
                        CompareOp::Gt => x > y,
                        CompareOp::Ge => x >= y,
                        CompareOp::Lt => x < y,
                        _ => x <= y,
                    }
                }
            })
        }
        Expr::Exists { argument, .. } => {
            let Expr::Var { name, .. } = argument.as_ref() else { unreachable!() };
            Value::Bool(lookup(name, data, items).is_some())
        }
        Expr::Quantify { quantifier, alias, predicate, .. } => {
            let rows =
                data.pointer("/metadata/runContextSnapshot/facets/list/value").and_then(Value::as_array).unwrap();
            let alias = alias.as_deref().unwrap_or("item");
            let holds = |row: &Value| {
                let inside: Vec<(&str, &Value)> = items.iter().copied().chain([(alias, row)]).collect();
                truthy(&eval(predicate, data, &inside))
            };
            Value::Bool(match quantifier {
                Quantifier::Some => rows.iter().any(holds),
                Quantifier::All => !rows.is_empty() && rows.iter().all(holds),
            })
        }
    }
}

fn lookup<'a>(name: &str, data: &'a Value, items: &[(&str, &'a Value)]) -> Option<&'a Value> {
    for (alias, row) in items.iter().rev() {
        if let Some(field) = name.strip_prefix(&format!("{alias}.")) {
            return row.get(field);
        }
    }
    let (facet, field) = name.strip_prefix("facets.")?.split_once('.')?;
    data.pointer(&format!("/metadata/runContextSnapshot/facets/{facet}/value/{field}"))
}

fn equal(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(_) => true,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn rendering_then_parsing_gives_the_same_tree(expr in condition()) {
        let text = dsl::render(&expr);
        let parsed = dsl::parse(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e:?}")))?;
        prop_assert_eq!(parsed.without_spans(), expr, "{}", text);
    }

    #[test]
    fn nested_quantifiers_agree_with_the_tree(expr in nested(), data in data()) {
        let text = dsl::render(&expr);
        let compiled = dsl::compile(&text, &catalog(), Scope::Catalog)
            .map_err(|e| TestCaseError::fail(format!("{text}: {e:?}")))?;
        let rule = Rule::from_dsl(compiled.json_logic, compiled.eval_logic).unwrap();
        let engine = rule.holds(&data).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        let direct = truthy(&eval(&expr, &data, &[]));
        prop_assert_eq!(engine, direct, "{} on {}", text, data);
    }

    #[test]
    fn compiled_json_logic_agrees_with_the_tree(expr in condition(), data in data()) {
        let text = dsl::render(&expr);
        let compiled = dsl::compile(&text, &catalog(), Scope::Catalog)
            .map_err(|e| TestCaseError::fail(format!("{text}: {e:?}")))?;
        prop_assert_eq!(&compiled.canonical_dsl, &text);
        let rule = Rule::from_dsl(compiled.json_logic, compiled.eval_logic).unwrap();
        let engine = rule.holds(&data).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        let direct = truthy(&eval(&expr, &data, &[]));
        prop_assert_eq!(engine, direct, "{} on {}", text, data);
    }
}
