//! Canonical rendering (minimal parentheses, double-quoted strings) and the way back from
//! JSON-Logic to the DSL for the operators the DSL has.

use serde_json::{Number, Value};

use super::ast::{CompareOp, DEFAULT_ALIAS, Expr, Literal, Quantifier};
use super::catalog::Catalog;
use super::error::{DslError, ErrorCode, Range, Span};
use super::parser::MAX_DEPTH;

/// The canonical text of an expression. A child is parenthesised when it binds more loosely than
/// its parent, or as tightly without being the same associative operator (`&&`, `||`).
pub fn render(expr: &Expr) -> String {
    match expr {
        Expr::Literal { value, .. } => literal(value),
        Expr::Var { name, .. } => name.clone(),
        Expr::Not { operand, .. } => format!("!{}", child(operand, 4)),
        Expr::And { operands, .. } => operands.iter().map(|e| child(e, 2)).collect::<Vec<_>>().join(" && "),
        Expr::Or { operands, .. } => operands.iter().map(|e| child(e, 1)).collect::<Vec<_>>().join(" || "),
        Expr::Compare { op, left, right, .. } => {
            format!("{} {} {}", child(left, 4), op.symbol(), child(right, 4))
        }
        Expr::Exists { argument, .. } => format!("exists({})", render(argument)),
        Expr::Quantify { quantifier, collection, alias, predicate, .. } => {
            let alias = alias.as_ref().map(|a| format!(" as {a}")).unwrap_or_default();
            format!("{}({}{alias}, {})", quantifier.name(), render(collection), render(predicate))
        }
    }
}

/// `expr` rendered, in parentheses unless it binds at least as tightly as `needed` (same-kind
/// `&&`/`||` children never occur: chains are flat).
fn child(expr: &Expr, needed: u8) -> String {
    if expr.precedence() < needed { format!("({})", render(expr)) } else { render(expr) }
}

/// How deeply the canonical text of `expr` nests, counted as the parser counts (parentheses, `!`,
/// `exists`, quantifiers, and one per comparison). An expression is only accepted when this is
/// within [`MAX_DEPTH`], so its canonical form always parses again.
pub fn nesting(expr: &Expr) -> usize {
    let within = |child: &Expr, needed: u8| nesting(child) + usize::from(child.precedence() < needed);
    match expr {
        Expr::Literal { .. } | Expr::Var { .. } => 0,
        Expr::Not { operand, .. } => 1 + within(operand, 4),
        Expr::And { operands, .. } => operands.iter().map(|e| within(e, 2)).max().unwrap_or(0),
        Expr::Or { operands, .. } => operands.iter().map(|e| within(e, 1)).max().unwrap_or(0),
        Expr::Compare { left, right, .. } => within(left, 4).max(within(right, 4)).max(1),
        Expr::Exists { argument, .. } => 1 + nesting(argument),
        Expr::Quantify { collection, predicate, .. } => 1 + nesting(collection).max(nesting(predicate)),
    }
}

fn literal(value: &Literal) -> String {
    match value {
        Literal::Null => "null".into(),
        Literal::Bool(b) => b.to_string(),
        Literal::Number(n) => number(n),
        Literal::String(s) => {
            let mut out = String::with_capacity(s.len() + 2);
            out.push('"');
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    '\u{8}' => out.push_str("\\b"),
                    '\u{c}' => out.push_str("\\f"),
                    c => out.push(c),
                }
            }
            out.push('"');
            out
        }
    }
}

/// Integers as written; other numbers in plain decimal notation (the lexer has no exponents),
/// always with a `.` so they read back as the same kind of number.
fn number(n: &Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let text = n.as_f64().map(|f| f.to_string()).unwrap_or_else(|| n.to_string());
    if text.contains('.') { text } else { format!("{text}.0") }
}

/// Renders JSON-Logic as canonical DSL, when it only uses operators the DSL has. Catalog paths
/// become their shortest names; inside quantifiers, plain `var`s are read as fields of the item.
pub fn from_json_logic(logic: &Value, catalog: &Catalog) -> Result<String, DslError> {
    if logic.is_array() {
        return Err(invalid("Unexpected array at root level in JSON-Logic expression."));
    }
    let expr = Reverse { catalog, aliases: Vec::new() }.expr(logic, 0)?;
    if nesting(&expr) > MAX_DEPTH {
        return Err(invalid(format!("JSON-Logic nests deeper than the DSL allows ({MAX_DEPTH} levels).")));
    }
    Ok(render(&expr))
}

/// How deep JSON-Logic may nest while it is read back (a guard for the stack; what the DSL can
/// show is decided by [`nesting`] afterwards, and `&&`/`||` levels do not nest in the DSL).
const READ_LIMIT: usize = 4 * MAX_DEPTH;

fn invalid(message: impl Into<String>) -> DslError {
    DslError { code: ErrorCode::InvalidJsonLogic, message: message.into(), range: Range::default() }
}

struct Reverse<'a> {
    catalog: &'a Catalog,
    /// Active quantifier scopes, innermost last.
    aliases: Vec<Scope>,
}

/// A quantifier being read back.
struct Scope {
    alias: String,
    /// Plain JSON-Logic (`{"some": [c, p]}` whose predicate reads the item as `{"var": "f"}`):
    /// other names are fields of the item and get the alias. In the DSL's own form the item is
    /// always read through the alias, so other names stay as they are (outer variables).
    plain: bool,
}

impl Reverse<'_> {
    fn expr(&mut self, logic: &Value, depth: usize) -> Result<Expr, DslError> {
        if depth > READ_LIMIT {
            return Err(invalid(format!("JSON-Logic nests deeper than {READ_LIMIT} levels.")));
        }
        let span = Span::default();
        let value = match logic {
            Value::Null => Literal::Null,
            Value::Bool(b) => Literal::Bool(*b),
            Value::Number(n) => Literal::Number(n.clone()),
            Value::String(s) => Literal::String(s.clone()),
            Value::Array(_) => return Err(invalid("Arrays are not supported by the DSL renderer.")),
            Value::Object(map) => {
                let (op, args) = match (map.len(), map.iter().next()) {
                    (1, Some(entry)) => entry,
                    _ => return Err(invalid("JSON-Logic object must have exactly one operator.")),
                };
                return self.operation(op, args, depth);
            }
        };
        Ok(Expr::Literal { value, span })
    }

    fn operation(&mut self, op: &str, args: &Value, depth: usize) -> Result<Expr, DslError> {
        let span = Span::default();
        let list: Vec<&Value> = match args {
            Value::Array(items) => items.iter().collect(),
            single => vec![single],
        };
        match op {
            // The DSL has no default: shown without it, the condition would read otherwise.
            "var" if list.len() > 1 => Err(invalid("`var` with a default is not expressible in the DSL.")),
            "var" => self.var(list.first().copied()),
            "and" | "or" => {
                let mut operands = list.iter().map(|a| self.expr(a, depth + 1)).collect::<Result<Vec<_>, _>>()?;
                match operands.len() {
                    0 => Err(invalid(format!("Operator `{op}` needs operands."))),
                    1 => Ok(operands.remove(0)),
                    _ if op == "and" => Ok(flatten(operands, true)),
                    _ => Ok(flatten(operands, false)),
                }
            }
            "!" => {
                let [operand] = list.as_slice() else { return Err(invalid("Operator `!` expects one operand.")) };
                if let Some(missing) = operand.get("missing") {
                    let path = match missing {
                        Value::Array(paths) if paths.len() == 1 => paths[0].as_str(),
                        Value::String(path) => Some(path.as_str()),
                        _ => None,
                    };
                    let path = path.ok_or_else(|| invalid("`missing` inside `!` must name one path."))?;
                    return Ok(Expr::Exists { argument: Box::new(self.var_named(path)?), span });
                }
                Ok(Expr::Not { operand: Box::new(self.expr(operand, depth + 1)?), span })
            }
            "some" | "all" => {
                let quantifier = if op == "some" { Quantifier::Some } else { Quantifier::All };
                let (collection, predicate, alias) = match list.as_slice() {
                    [c, p] => (*c, *p, None),
                    [c, p, Value::String(a)] => (*c, *p, Some(a.clone())),
                    _ => return Err(invalid(format!("Operator `{op}` expects a collection and a predicate."))),
                };
                let collection = self.expr(collection, depth + 1)?;
                let name = alias.clone().unwrap_or_else(|| DEFAULT_ALIAS.to_string());
                let plain = alias.is_none() && !reads_alias(predicate, &name);
                self.aliases.push(Scope { alias: name, plain });
                let predicate = self.expr(predicate, depth + 1);
                self.aliases.pop();
                Ok(Expr::Quantify {
                    quantifier,
                    collection: Box::new(collection),
                    alias,
                    predicate: Box::new(predicate?),
                    span,
                })
            }
            symbol => {
                let op = CompareOp::from_symbol(symbol)
                    .ok_or_else(|| invalid(format!("Operator `{symbol}` is not supported by the DSL renderer.")))?;
                let [left, right] = list.as_slice() else {
                    return Err(invalid(format!("Operator `{symbol}` expects two operands.")));
                };
                let (left, right) = (self.expr(left, depth + 1)?, self.expr(right, depth + 1)?);
                Ok(Expr::Compare { op, left: Box::new(left), right: Box::new(right), span })
            }
        }
    }

    fn var(&self, path: Option<&Value>) -> Result<Expr, DslError> {
        let path = match path {
            Some(Value::String(p)) => p.as_str(),
            Some(Value::Array(items)) => items.first().and_then(Value::as_str).unwrap_or_default(),
            _ => return Err(invalid("`var` needs a path.")),
        };
        self.var_named(path)
    }

    /// A variable by path: alias-relative inside quantifiers, else the catalog's shortest name;
    /// refused when that is not a name the DSL reads back as a variable (`first-name`, `null`,
    /// the whole data).
    fn var_named(&self, path: &str) -> Result<Expr, DslError> {
        let span = Span::default();
        let mut name = self.catalog.get(path).map_or_else(|| path.to_string(), |v| v.dsl_path.clone());
        if let Some(scope) = self.aliases.last().filter(|s| s.plain) {
            let prefixed = self.aliases.iter().any(|s| path == s.alias || path.starts_with(&format!("{}.", s.alias)));
            if !prefixed && self.catalog.get(path).is_none() {
                let alias = &scope.alias;
                name = if path.is_empty() { alias.clone() } else { format!("{alias}.{path}") };
            }
        }
        if !super::lexer::is_name(&name) {
            return Err(invalid(
                "A `var` path is not a name the DSL can read (a letter or `_` first, then letters, digits, `_` or `.`).",
            ));
        }
        Ok(Expr::Var { name, span })
    }
}

/// Whether JSON-Logic reads `alias` or `alias.…` through a `var`.
fn reads_alias(logic: &Value, alias: &str) -> bool {
    match logic {
        Value::Object(map) => map.iter().any(|(op, args)| match (op.as_str(), args) {
            ("var", Value::String(path)) => path == alias || path.starts_with(&format!("{alias}.")),
            _ => reads_alias(args, alias),
        }),
        Value::Array(items) => items.iter().any(|item| reads_alias(item, alias)),
        _ => false,
    }
}

fn flatten(operands: Vec<Expr>, and: bool) -> Expr {
    let mut flat = Vec::with_capacity(operands.len());
    for operand in operands {
        match (operand, and) {
            (Expr::And { operands, .. }, true) | (Expr::Or { operands, .. }, false) => flat.extend(operands),
            (other, _) => flat.push(other),
        }
    }
    let span = Span::default();
    if and { Expr::And { operands: flat, span } } else { Expr::Or { operands: flat, span } }
}
