//! The syntax tree of a condition. `&&`/`||` chains are flat; spans point into the source.

use serde_json::{Number, Value};

use super::error::Span;

#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
}

impl Literal {
    pub fn to_json(&self) -> Value {
        match self {
            Self::Null => Value::Null,
            Self::Bool(b) => Value::Bool(*b),
            Self::Number(n) => Value::Number(n.clone()),
            Self::String(s) => Value::String(s.clone()),
        }
    }

    /// How a literal's type is named in messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::Bool(_) => "boolean",
            Self::Number(_) => "number",
            Self::String(_) => "string",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

impl CompareOp {
    pub const ALL: [CompareOp; 6] = [Self::Eq, Self::Ne, Self::Gt, Self::Ge, Self::Lt, Self::Le];

    pub fn symbol(self) -> &'static str {
        match self {
            Self::Eq => "==",
            Self::Ne => "!=",
            Self::Gt => ">",
            Self::Ge => ">=",
            Self::Lt => "<",
            Self::Le => "<=",
        }
    }

    pub fn from_symbol(symbol: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.symbol() == symbol)
    }

    /// `==` and `!=` (precedence below the ordering comparisons in the grammar).
    pub fn is_equality(self) -> bool {
        matches!(self, Self::Eq | Self::Ne)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantifier {
    Some,
    All,
}

impl Quantifier {
    pub fn name(self) -> &'static str {
        match self {
            Self::Some => "some",
            Self::All => "all",
        }
    }
}

/// The alias a quantifier predicate uses when none is given.
pub const DEFAULT_ALIAS: &str = "item";

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Literal { value: Literal, span: Span },
    Var { name: String, span: Span },
    Not { operand: Box<Expr>, span: Span },
    And { operands: Vec<Expr>, span: Span },
    Or { operands: Vec<Expr>, span: Span },
    Compare { op: CompareOp, left: Box<Expr>, right: Box<Expr>, span: Span },
    Exists { argument: Box<Expr>, span: Span },
    Quantify { quantifier: Quantifier, collection: Box<Expr>, alias: Option<String>, predicate: Box<Expr>, span: Span },
}

impl Expr {
    pub fn span(&self) -> Span {
        match self {
            Self::Literal { span, .. }
            | Self::Var { span, .. }
            | Self::Not { span, .. }
            | Self::And { span, .. }
            | Self::Or { span, .. }
            | Self::Compare { span, .. }
            | Self::Exists { span, .. }
            | Self::Quantify { span, .. } => *span,
        }
    }

    /// The same tree with every span zeroed: for comparing trees parsed from different text.
    pub fn without_spans(&self) -> Expr {
        let none = Span::default();
        let boxed = |e: &Expr| Box::new(e.without_spans());
        match self {
            Self::Literal { value, .. } => Self::Literal { value: value.clone(), span: none },
            Self::Var { name, .. } => Self::Var { name: name.clone(), span: none },
            Self::Not { operand, .. } => Self::Not { operand: boxed(operand), span: none },
            Self::And { operands, .. } => {
                Self::And { operands: operands.iter().map(Expr::without_spans).collect(), span: none }
            }
            Self::Or { operands, .. } => {
                Self::Or { operands: operands.iter().map(Expr::without_spans).collect(), span: none }
            }
            Self::Compare { op, left, right, .. } => {
                Self::Compare { op: *op, left: boxed(left), right: boxed(right), span: none }
            }
            Self::Exists { argument, .. } => Self::Exists { argument: boxed(argument), span: none },
            Self::Quantify { quantifier, collection, alias, predicate, .. } => Self::Quantify {
                quantifier: *quantifier,
                collection: boxed(collection),
                alias: alias.clone(),
                predicate: boxed(predicate),
                span: none,
            },
        }
    }

    /// Binding strength for rendering: `||` 1, `&&` 2, comparisons 3, `!` 4, atoms 5.
    pub fn precedence(&self) -> u8 {
        match self {
            Self::Or { .. } => 1,
            Self::And { .. } => 2,
            Self::Compare { .. } => 3,
            Self::Not { .. } => 4,
            _ => 5,
        }
    }
}
