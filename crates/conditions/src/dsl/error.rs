//! DSL errors as data: a code, a message and the range of source text they are about.

use serde::Serialize;

/// A place in the source: `offset` counts characters from 0, `line` and `column` count from 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Position {
    pub offset: usize,
    pub line: usize,
    pub column: usize,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Range {
    pub start: Position,
    pub end: Position,
}

/// Character offsets `[start, end)` into the source, turned into a [`Range`] by [`SourceMap`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Self {
        Self { start, end }
    }

    /// The span covering both.
    pub fn to(self, other: Span) -> Span {
        Span { start: self.start.min(other.start), end: self.end.max(other.end) }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    EmptyExpression,
    SyntaxError,
    UnknownVariable,
    OperatorNotAllowed,
    TypeMismatch,
    InvalidQuantifier,
    InvalidConditionExists,
    InvalidJsonLogic,
}

/// One problem with an expression.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DslError {
    pub code: ErrorCode,
    pub message: String,
    pub range: Range,
}

/// The most problems reported of one expression: a long one with thousands of unknown names (or
/// stray characters) gets these and one more saying how many were left out — the answer does not
/// grow with the input, nor does the time spent suggesting names.
pub const MAX_ERRORS: usize = 20;

/// `errors`, at most [`MAX_ERRORS`] of them and one saying how many more there were.
pub fn bounded(mut errors: Vec<DslError>) -> Vec<DslError> {
    if errors.len() > MAX_ERRORS {
        let left = errors.len() - MAX_ERRORS;
        let first_left = errors.swap_remove(MAX_ERRORS);
        errors.truncate(MAX_ERRORS);
        let message = format!("and {left} more problem{} like these", if left == 1 { "" } else { "s" });
        errors.push(DslError { message, ..first_left });
    }
    errors
}

/// A name of the expression as a message quotes it: at most [`NAME_SHOWN`] characters.
pub fn shown(name: &str) -> String {
    match name.char_indices().nth(NAME_SHOWN) {
        Some((cut, _)) => format!("{}…", &name[..cut]),
        None => name.to_string(),
    }
}

/// The most characters of a name a message quotes.
pub const NAME_SHOWN: usize = 80;

/// A warning about an expression that compiled (same shape as an error).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Warning {
    pub code: &'static str,
    pub message: String,
}

/// Turns character offsets into line/column positions.
pub struct SourceMap {
    /// Character offset at which each line starts.
    line_starts: Vec<usize>,
    len: usize,
}

impl SourceMap {
    pub fn new(source: &str) -> Self {
        let mut line_starts = vec![0];
        let mut len = 0;
        for (i, c) in source.chars().enumerate() {
            if c == '\n' {
                line_starts.push(i + 1);
            }
            len = i + 1;
        }
        Self { line_starts, len }
    }

    pub fn position(&self, offset: usize) -> Position {
        let offset = offset.min(self.len);
        let line = self.line_starts.partition_point(|&start| start <= offset);
        Position { offset, line, column: offset - self.line_starts[line - 1] + 1 }
    }

    pub fn range(&self, span: Span) -> Range {
        Range { start: self.position(span.start), end: self.position(span.end) }
    }

    pub fn error(&self, code: ErrorCode, span: Span, message: impl Into<String>) -> DslError {
        DslError { code, message: message.into(), range: self.range(span) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_lines_and_columns_from_one() {
        let map = SourceMap::new("ab\ncd");
        assert_eq!(map.position(0), Position { offset: 0, line: 1, column: 1 });
        assert_eq!(map.position(3), Position { offset: 3, line: 2, column: 1 });
        assert_eq!(map.position(5), Position { offset: 5, line: 2, column: 3 });
        assert_eq!(map.position(99).offset, 5);
    }
}
