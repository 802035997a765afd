//! The condition DSL: a small expression language compiled to JSON-Logic.
//!
//! `||` `&&` `==` `!=` `>` `>=` `<` `<=` `!`, parentheses, numbers (negative too), strings in
//! either quotes, `true` `false` `null`, dotted variables, `exists(v)`, `some(coll [as x], pred)`
//! and `all(coll [as x], pred)`. Pure: lexer → parser → checker (every error, with its range) →
//! JSON-Logic, plus canonical rendering and the way back from JSON-Logic.

mod ast;
mod catalog;
mod compile;
mod error;
mod lexer;
mod parser;
mod render;

pub use ast::{CompareOp, DEFAULT_ALIAS, Expr, Literal, Quantifier};
pub use catalog::{Catalog, SNAPSHOT_FACETS, VarType, Variable};
pub use compile::{ROOT_FRAME, Scope};
pub use error::{DslError, ErrorCode, Position, Range, Span, Warning};
pub use parser::MAX_DEPTH;
pub use render::{from_json_logic, render};

use crate::Rule;
use serde::Serialize;
use serde_json::Value;

/// A compiled condition.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Compiled {
    /// JSON-Logic as stored and shown (alias-prefixed quantifier variables; see `docs/dsl.md`,
    /// "JSON-Logic").
    pub json_logic: Value,
    /// Standard JSON-Logic the engine evaluates.
    #[serde(skip)]
    pub eval_logic: Value,
    pub canonical_dsl: String,
    /// Canonical paths of the catalog variables used, in order of first use.
    pub variables: Vec<String>,
    pub warnings: Vec<Warning>,
}

/// Parses `source` into a syntax tree (syntax errors only; names are not checked).
pub fn parse(source: &str) -> Result<Expr, Vec<DslError>> {
    let map = error::SourceMap::new(source);
    let (tokens, errors) = lexer::lex(source, &map);
    if tokens.is_empty() && errors.is_empty() {
        return Err(vec![map.error(ErrorCode::EmptyExpression, Span::new(0, 0), "Expression is empty.")]);
    }
    // After a lexical error the token stream has holes; parsing it would only add echoes.
    if !errors.is_empty() {
        return Err(error::bounded(errors));
    }
    let expr = parser::parse(&tokens, source.chars().count(), &map).map_err(|error| vec![error])?;
    if render::nesting(&expr) > MAX_DEPTH {
        let message = format!("Expression nests deeper than {MAX_DEPTH} levels.");
        return Err(vec![map.error(ErrorCode::SyntaxError, expr.span(), message)]);
    }
    Ok(expr)
}

/// Compiles `source` against `catalog`, reporting every problem found.
pub fn compile(source: &str, catalog: &Catalog, scope: Scope<'_>) -> Result<Compiled, Vec<DslError>> {
    let expr = parse(source)?;
    let map = error::SourceMap::new(source);
    let mut checker = compile::Checker::new(catalog, scope, &map);
    let canonical = checker.check(&expr);
    if !checker.errors.is_empty() {
        return Err(error::bounded(checker.errors));
    }
    let (json_logic, eval_logic) = checker.emit_for_engine(&canonical);
    let canonical_dsl = render(&canonical);
    let warnings = if canonical_dsl == "true" {
        vec![Warning { code: "noop_true", message: "Expression always resolves to true.".into() }]
    } else {
        Vec::new()
    };
    Ok(Compiled { json_logic, eval_logic, canonical_dsl, variables: checker.variables, warnings })
}

/// A rule given as JSON-Logic, and its canonical DSL when it has one. flexrun's own shown form of
/// a DSL condition (`docs/dsl.md`, "JSON-Logic": an alias as a prefix, `item.score`, and as a
/// third `some`/`all` operand) is not what the engine evaluates: JSON-Logic that is exactly what
/// the DSL it renders compiles to is evaluated as that DSL, so a condition read back from a run
/// and posted again holds as it did. Other JSON-Logic is evaluated as written.
pub fn json_logic_rule(logic: Value, catalog: &Catalog, scope: Scope<'_>) -> Result<(Rule, Option<String>), String> {
    let Ok(shown) = from_json_logic(&logic, catalog) else {
        return Ok((Rule::compile(logic)?, None));
    };
    match compile(&shown, catalog, scope) {
        Ok(compiled) if compiled.json_logic == logic => {
            Ok((Rule::from_dsl(compiled.json_logic, compiled.eval_logic)?, Some(compiled.canonical_dsl)))
        }
        _ => Ok((Rule::compile(logic)?, Some(shown))),
    }
}

#[cfg(test)]
mod tests;
