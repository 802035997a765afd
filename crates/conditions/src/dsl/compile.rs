//! Checking a parsed condition and emitting JSON-Logic.
//!
//! Two JSON-Logic forms come out. The *shown* form is the one stored and returned to clients
//! (alias-prefixed variables inside quantifiers, the alias as a third `some`/`all` operand; see
//! `docs/dsl.md`, "JSON-Logic"); it does not change, so stored conditions and their clients keep
//! working. The *evaluation* form is standard JSON-Logic for the engine: inside a quantifier the
//! alias is the current item (`{"var": "x"}`), and outer variables climb the scope stack
//! (`{"val": [[depth], …segments]}`).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::ast::{CompareOp, DEFAULT_ALIAS, Expr, Literal};
use super::catalog::{Catalog, VarType, Variable, type_in_schema};
use super::error::{DslError, ErrorCode, SourceMap, Span};

/// How names that are not catalog variables are read.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    /// Only catalog variables (runtime-policy conditions, the compile endpoint by default).
    Catalog,
    /// Goal and post-conditions: other names are read relative to the value at the condition's
    /// `path`, checked against its schema when one is known.
    Relative { schema: Option<&'a Value> },
}

/// A name in an expression, resolved.
enum Resolved<'c> {
    Catalog(&'c Variable),
    /// The quantifier alias `depth` levels up (0 = innermost), with the rest of the path.
    Alias {
        depth: usize,
        rest: String,
        var_type: Option<VarType>,
    },
    Relative {
        var_type: Option<VarType>,
    },
}

struct Alias {
    name: String,
    /// The collection's catalog name, to type the fields of its items.
    collection: Option<String>,
}

pub struct Checker<'a> {
    catalog: &'a Catalog,
    scope: Scope<'a>,
    map: &'a SourceMap,
    aliases: Vec<Alias>,
    /// An alias of an outer quantifier is read from inside an inner one ([`Self::emit_for_engine`]).
    reads_outer_item: bool,
    /// The evaluation form is wrapped in a quantifier over the data itself ([`ROOT_FRAME`]).
    framed: bool,
    pub errors: Vec<DslError>,
    /// Canonical paths of the catalog variables used, in order of first use.
    pub variables: Vec<String>,
    seen: BTreeSet<String>,
}

impl<'a> Checker<'a> {
    pub fn new(catalog: &'a Catalog, scope: Scope<'a>, map: &'a SourceMap) -> Self {
        Self {
            catalog,
            scope,
            map,
            aliases: Vec::new(),
            reads_outer_item: false,
            framed: false,
            errors: Vec::new(),
            variables: Vec::new(),
            seen: BTreeSet::new(),
        }
    }

    fn error(&mut self, code: ErrorCode, span: Span, message: String) {
        self.errors.push(self.map.error(code, span, message));
    }

    fn resolve(&self, name: &str) -> Option<Resolved<'a>> {
        for (depth, alias) in self.aliases.iter().rev().enumerate() {
            let rest = if name == alias.name {
                Some(String::new())
            } else {
                name.strip_prefix(&alias.name).and_then(|r| r.strip_prefix('.')).map(String::from)
            };
            if let Some(rest) = rest {
                let var_type = alias
                    .collection
                    .as_ref()
                    .filter(|_| !rest.is_empty())
                    .and_then(|c| self.catalog.get(&format!("{c}.{rest}")))
                    .map(|v| v.var_type);
                return Some(Resolved::Alias { depth, rest, var_type });
            }
        }
        if let Some(variable) = self.catalog.get(name) {
            return Some(Resolved::Catalog(variable));
        }
        match self.scope {
            Scope::Relative { schema: None } => Some(Resolved::Relative { var_type: None }),
            Scope::Relative { schema: Some(schema) } => {
                type_in_schema(schema, name).ok().map(|var_type| Resolved::Relative { var_type })
            }
            Scope::Catalog => None,
        }
    }

    /// Checks `expr`, collecting every error; returns its canonical form (catalog variables by
    /// their shortest name) for rendering.
    pub fn check(&mut self, expr: &Expr) -> Expr {
        match expr {
            Expr::Literal { .. } => expr.clone(),
            Expr::Var { name, span } => {
                let name = self.check_var(name, *span);
                Expr::Var { name, span: *span }
            }
            Expr::Not { operand, span } => Expr::Not { operand: Box::new(self.check(operand)), span: *span },
            Expr::And { operands, span } => {
                Expr::And { operands: operands.iter().map(|e| self.check(e)).collect(), span: *span }
            }
            Expr::Or { operands, span } => {
                Expr::Or { operands: operands.iter().map(|e| self.check(e)).collect(), span: *span }
            }
            Expr::Compare { op, left, right, span } => {
                let (left, right) = (self.check(left), self.check(right));
                self.check_types(*op, &left, &right, *span);
                Expr::Compare { op: *op, left: Box::new(left), right: Box::new(right), span: *span }
            }
            Expr::Exists { argument, span } => {
                let argument = self.check_exists(argument, *span);
                Expr::Exists { argument: Box::new(argument), span: *span }
            }
            Expr::Quantify { quantifier, collection, alias, predicate, span } => {
                let collection = self.check_collection(quantifier.name(), collection);
                let name = alias.clone().unwrap_or_else(|| DEFAULT_ALIAS.to_string());
                let collection_name = match &collection {
                    Expr::Var { name, .. } => self.catalog.get(name).map(|v| v.dsl_path.clone()),
                    _ => None,
                };
                self.aliases.push(Alias { name: name.clone(), collection: collection_name });
                let checked = self.check(predicate);
                self.aliases.pop();
                if !references(&checked, &name) {
                    let message = format!("Quantifier predicate must reference alias `{name}`.");
                    self.error(ErrorCode::InvalidQuantifier, predicate.span(), message);
                }
                Expr::Quantify {
                    quantifier: *quantifier,
                    collection: Box::new(collection),
                    alias: alias.clone(),
                    predicate: Box::new(checked),
                    span: *span,
                }
            }
        }
    }

    /// Resolves a variable; returns the name canonical rendering uses.
    fn check_var(&mut self, name: &str, span: Span) -> String {
        match self.resolve(name) {
            Some(Resolved::Catalog(variable)) => {
                if self.seen.insert(variable.path.clone()) {
                    self.variables.push(variable.path.clone());
                }
                variable.dsl_path.clone()
            }
            Some(_) => name.to_string(),
            None => {
                let shown = super::error::shown(name);
                let message = match self.suggest(name) {
                    Some(close) => format!("Variable `{shown}` is not registered (did you mean `{close}`?)."),
                    None => format!("Variable `{shown}` is not registered."),
                };
                self.error(ErrorCode::UnknownVariable, span, message);
                name.to_string()
            }
        }
    }

    /// A registered name close to `name` — not looked for past the problems reported
    /// ([`super::error::MAX_ERRORS`]): each look compares it with every name of the catalog.
    fn suggest(&self, name: &str) -> Option<String> {
        if self.errors.len() >= super::error::MAX_ERRORS {
            return None;
        }
        match self.scope {
            Scope::Relative { schema: Some(schema) } if !name.starts_with("facets.") && !name.starts_with("run.") => {
                let fields = schema.get("properties").and_then(Value::as_object)?;
                crate::suggest::closest(name, fields.keys().map(String::as_str)).map(String::from)
            }
            _ => self.catalog.suggest(name).map(String::from),
        }
    }

    fn type_of(&self, expr: &Expr) -> Option<(String, VarType)> {
        let Expr::Var { name, .. } = expr else { return None };
        let var_type = match self.resolve(name)? {
            Resolved::Catalog(v) => Some(v.var_type),
            Resolved::Alias { var_type, .. } | Resolved::Relative { var_type } => var_type,
        }?;
        Some((name.clone(), var_type))
    }

    fn check_types(&mut self, op: CompareOp, left: &Expr, right: &Expr, span: Span) {
        let (left_type, right_type) = (self.type_of(left), self.type_of(right));
        for (name, var_type) in left_type.iter().chain(&right_type) {
            if !op.is_equality() && !var_type.allows_ordering() {
                let message = format!("Operator `{}` is not allowed for variable `{name}`.", op.symbol());
                self.error(ErrorCode::OperatorNotAllowed, span, message);
                return;
            }
        }
        let mismatch = match (&left_type, &right_type, left, right) {
            (Some((a, ta)), Some((b, tb)), _, _) if ta != tb => Some(format!(
                "Type mismatch: variables `{a}` ({}) and `{b}` ({}) are incompatible with `{}`.",
                ta.name(),
                tb.name(),
                op.symbol()
            )),
            (Some((name, var_type)), None, _, Expr::Literal { value, .. })
            | (None, Some((name, var_type)), Expr::Literal { value, .. }, _)
                if !literal_fits(*var_type, value) =>
            {
                Some(format!(
                    "Type mismatch: variable `{name}` ({}) cannot be compared to {} literal.",
                    var_type.name(),
                    value.type_name()
                ))
            }
            _ => None,
        };
        if let Some(message) = mismatch {
            self.error(ErrorCode::TypeMismatch, span, message);
        }
    }

    fn check_exists(&mut self, argument: &Expr, span: Span) -> Expr {
        let Expr::Var { name, span: var_span } = argument else {
            let message = "`exists()` requires a catalog variable argument.".to_string();
            self.error(ErrorCode::InvalidConditionExists, argument.span(), message);
            return self.check(argument);
        };
        match self.resolve(name) {
            Some(Resolved::Alias { .. }) => {
                let message = format!("exists() only supports catalog variables. Alias `{name}` cannot be used here.");
                self.error(ErrorCode::InvalidConditionExists, *var_span, message);
                argument.clone()
            }
            Some(_) if !self.aliases.is_empty() => {
                let message = "exists() cannot be used inside a quantifier predicate.".to_string();
                self.error(ErrorCode::InvalidConditionExists, span, message);
                argument.clone()
            }
            Some(_) => self.check(argument),
            None => {
                let hint = self.suggest(name).map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default();
                let message =
                    format!("Variable `{name}` is not registered. exists() only supports catalog variables{hint}.");
                self.error(ErrorCode::InvalidConditionExists, *var_span, message);
                argument.clone()
            }
        }
    }

    fn check_collection(&mut self, quantifier: &str, collection: &Expr) -> Expr {
        let Expr::Var { .. } = collection else {
            let message = "Quantifier collection must reference a variable.".to_string();
            self.error(ErrorCode::InvalidQuantifier, collection.span(), message);
            return self.check(collection);
        };
        let checked = self.check(collection);
        if let Some((name, var_type)) = self.type_of(&checked)
            && var_type != VarType::Array
        {
            let message = format!("Quantifier `{quantifier}` expects collection `{name}` to be an array.");
            self.error(ErrorCode::InvalidQuantifier, collection.span(), message);
        }
        checked
    }

    /// The two JSON-Logic forms of a checked expression: (shown, evaluation).
    ///
    /// datalogic-rs 5.4 reads `{"val": [[n], …]}` one scope too low, and never reaches the scope
    /// just above the data: from inside two quantifiers, `[[1]]` is the current item again and
    /// `[[2]]` the data, so the outer quantifier's item cannot be read. An expression that reads an
    /// outer alias is therefore evaluated inside one more quantifier, over a list holding the data
    /// itself ([`ROOT_FRAME`]): every real quantifier's item is then a scope the engine reaches,
    /// `n` scopes up read as `[[n + 1]]`.
    pub fn emit_for_engine(&mut self, expr: &Expr) -> (Value, Value) {
        let (shown, eval) = self.emit(expr);
        if !self.reads_outer_item {
            return (shown, eval);
        }
        self.framed = true;
        let (_, eval) = self.emit(expr);
        (shown, json!({"some": [ROOT_FRAME.clone(), eval]}))
    }

    fn emit(&mut self, expr: &Expr) -> (Value, Value) {
        match expr {
            Expr::Literal { value, .. } => (value.to_json(), value.to_json()),
            Expr::Var { name, .. } => self.emit_var(name),
            Expr::Not { operand, .. } => {
                let (shown, eval) = self.emit(operand);
                (json!({"!": shown}), json!({"!": eval}))
            }
            Expr::And { operands, .. } => self.emit_all("and", operands),
            Expr::Or { operands, .. } => self.emit_all("or", operands),
            Expr::Compare { op, left, right, .. } => {
                let ((ls, le), (rs, re)) = (self.emit(left), self.emit(right));
                (json!({op.symbol(): [ls, rs]}), json!({op.symbol(): [le, re]}))
            }
            Expr::Exists { argument, .. } => {
                let path = match argument.as_ref() {
                    Expr::Var { name, .. } => self.var_path(name),
                    other => self.emit(other).0,
                };
                let missing = json!({"!": [{"missing": [path]}]});
                (missing.clone(), missing)
            }
            Expr::Quantify { quantifier, collection, alias, predicate, .. } => {
                let (cs, ce) = self.emit(collection);
                let name = alias.clone().unwrap_or_else(|| DEFAULT_ALIAS.to_string());
                self.aliases.push(Alias { name, collection: None });
                let (ps, pe) = self.emit(predicate);
                self.aliases.pop();
                let mut shown = vec![cs, ps];
                if let Some(alias) = alias {
                    shown.push(Value::String(alias.clone()));
                }
                (json!({quantifier.name(): shown}), json!({quantifier.name(): [ce, pe]}))
            }
        }
    }

    fn emit_all(&mut self, op: &str, operands: &[Expr]) -> (Value, Value) {
        let (shown, eval): (Vec<Value>, Vec<Value>) = operands.iter().map(|e| self.emit(e)).unzip();
        (json!({op: shown}), json!({op: eval}))
    }

    /// The path a (non-alias) variable reads.
    fn var_path(&self, name: &str) -> Value {
        match self.resolve(name) {
            Some(Resolved::Catalog(variable)) => Value::String(variable.path.clone()),
            _ => Value::String(name.to_string()),
        }
    }

    fn emit_var(&mut self, name: &str) -> (Value, Value) {
        let depth = self.aliases.len();
        // One more scope under the quantifiers when framed: the data's copy of `ROOT_FRAME`.
        let extra = usize::from(self.framed);
        match self.resolve(name) {
            Some(Resolved::Alias { depth: 0, rest, .. }) => (json!({"var": name}), json!({"var": rest})),
            Some(Resolved::Alias { depth: up, rest, .. }) => {
                self.reads_outer_item = true;
                (json!({"var": name}), scoped(up + extra, &rest))
            }
            resolved => {
                let path = match resolved {
                    Some(Resolved::Catalog(variable)) => variable.path.clone(),
                    _ => name.to_string(),
                };
                // The data: any level at least the number of scopes reaches it.
                let eval = if depth == 0 { json!({"var": path}) } else { scoped(depth + extra, &path) };
                (json!({"var": path}), eval)
            }
        }
    }
}

/// The list a framed evaluation form quantifies over ([`Checker::emit_for_engine`]): the data.
pub static ROOT_FRAME: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| json!([{"var": ""}]));

/// `{"val": [[levels], …segments]}`: a path read `levels` scopes above the current item.
fn scoped(levels: usize, path: &str) -> Value {
    let mut args = vec![json!([levels])];
    args.extend(path.split('.').filter(|s| !s.is_empty()).map(|s| Value::String(s.to_string())));
    json!({"val": args})
}

fn literal_fits(var_type: VarType, literal: &Literal) -> bool {
    matches!(
        (var_type, literal),
        (_, Literal::Null)
            | (VarType::String, Literal::String(_))
            | (VarType::Number, Literal::Number(_))
            | (VarType::Boolean, Literal::Bool(_))
    )
}

/// Whether `expr` mentions `alias` (as itself or as a prefix).
fn references(expr: &Expr, alias: &str) -> bool {
    match expr {
        Expr::Var { name, .. } => name == alias || name.starts_with(&format!("{alias}.")),
        Expr::Literal { .. } => false,
        Expr::Not { operand, .. } => references(operand, alias),
        Expr::And { operands, .. } | Expr::Or { operands, .. } => operands.iter().any(|e| references(e, alias)),
        Expr::Compare { left, right, .. } => references(left, alias) || references(right, alias),
        Expr::Exists { argument, .. } => references(argument, alias),
        Expr::Quantify { collection, predicate, .. } => references(collection, alias) || references(predicate, alias),
    }
}
