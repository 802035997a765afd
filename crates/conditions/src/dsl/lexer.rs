//! Tokens of the condition DSL. Identifiers include dots (`facets.post.score` is one token);
//! `true`/`false` are literals; a `-` directly before a digit starts a negative number.

use serde_json::Number;

use super::error::{DslError, ErrorCode, SourceMap, Span};

#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    LParen,
    RParen,
    Comma,
    And,
    Or,
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    Not,
    Str(String),
    Num(Number),
    Bool(bool),
    Ident(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub tok: Tok,
    pub span: Span,
    /// The source text of the token, for messages.
    pub text: String,
}

/// Splits `source` into tokens. Every lexical error is reported; tokens around them are kept.
pub fn lex(source: &str, map: &SourceMap) -> (Vec<Token>, Vec<DslError>) {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut errors = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        let two = |next: char| chars.get(i + 1) == Some(&next);
        let (tok, len) = match c {
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            '(' => (Tok::LParen, 1),
            ')' => (Tok::RParen, 1),
            ',' => (Tok::Comma, 1),
            '&' if two('&') => (Tok::And, 2),
            '|' if two('|') => (Tok::Or, 2),
            '=' if two('=') => (Tok::Eq, 2),
            '!' if two('=') => (Tok::Ne, 2),
            '!' => (Tok::Not, 1),
            '>' if two('=') => (Tok::Ge, 2),
            '>' => (Tok::Gt, 1),
            '<' if two('=') => (Tok::Le, 2),
            '<' => (Tok::Lt, 1),
            '"' | '\'' => match string(&chars, i) {
                Ok((value, len)) => (Tok::Str(value), len),
                Err(len) => {
                    errors.push(map.error(
                        ErrorCode::SyntaxError,
                        Span::new(start, start + len),
                        "Unterminated string literal.",
                    ));
                    i += len;
                    continue;
                }
            },
            c if c.is_ascii_digit() || (c == '.' && next_is_digit(&chars, i)) => {
                match number(&chars, i, map, &mut errors) {
                    Some((tok, len)) => (tok, len),
                    None => {
                        i += number_len(&chars, i);
                        continue;
                    }
                }
            }
            '-' if next_is_digit(&chars, i) || (chars.get(i + 1) == Some(&'.') && next_is_digit(&chars, i + 1)) => {
                match number(&chars, i + 1, map, &mut errors) {
                    Some((Tok::Num(n), len)) => (Tok::Num(negate(&n)), len + 1),
                    _ => {
                        i += 1 + number_len(&chars, i + 1);
                        continue;
                    }
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let len =
                    chars[i..].iter().take_while(|c| c.is_ascii_alphanumeric() || **c == '_' || **c == '.').count();
                let word: String = chars[i..i + len].iter().collect();
                let tok = match word.as_str() {
                    "true" => Tok::Bool(true),
                    "false" => Tok::Bool(false),
                    _ => Tok::Ident(word),
                };
                (tok, len)
            }
            other => {
                errors.push(map.error(
                    ErrorCode::SyntaxError,
                    Span::new(start, start + 1),
                    format!("Unexpected character `{other}`."),
                ));
                i += 1;
                continue;
            }
        };
        i += len;
        tokens.push(Token { tok, span: Span::new(start, i), text: chars[start..i].iter().collect() });
    }
    (tokens, errors)
}

fn next_is_digit(chars: &[char], i: usize) -> bool {
    chars.get(i + 1).is_some_and(char::is_ascii_digit)
}

fn number_len(chars: &[char], i: usize) -> usize {
    chars[i..].iter().take_while(|c| c.is_ascii_digit() || **c == '.').count()
}

/// A number literal at `i`: digits and dots, read as an integer when there is no dot.
fn number(chars: &[char], i: usize, map: &SourceMap, errors: &mut Vec<DslError>) -> Option<(Tok, usize)> {
    let len = number_len(chars, i);
    let text: String = chars[i..i + len].iter().collect();
    let parsed = if text.contains('.') {
        text.parse::<f64>().ok().filter(|f| f.is_finite()).and_then(Number::from_f64)
    } else {
        text.parse::<i64>().ok().map(Number::from).or_else(|| text.parse::<f64>().ok().and_then(Number::from_f64))
    };
    match parsed {
        Some(n) => Some((Tok::Num(n), len)),
        None => {
            errors.push(map.error(ErrorCode::SyntaxError, Span::new(i, i + len), format!("Invalid number `{text}`.")));
            None
        }
    }
}

fn negate(n: &Number) -> Number {
    match (n.as_i64(), n.as_f64()) {
        (Some(i), _) => Number::from(-i),
        (None, Some(f)) => Number::from_f64(-f).unwrap_or_else(|| n.clone()),
        _ => n.clone(),
    }
}

/// A quoted string starting at `i`; `Err(len)` when it is not terminated.
fn string(chars: &[char], i: usize) -> Result<(String, usize), usize> {
    let quote = chars[i];
    let mut value = String::new();
    let mut j = i + 1;
    while j < chars.len() {
        match chars[j] {
            c if c == quote => return Ok((value, j + 1 - i)),
            '\\' if j + 1 < chars.len() => {
                let escaped = chars[j + 1];
                match escaped {
                    'b' => value.push('\u{8}'),
                    'f' => value.push('\u{c}'),
                    'n' => value.push('\n'),
                    'r' => value.push('\r'),
                    't' => value.push('\t'),
                    '\'' | '"' | '\\' => value.push(escaped),
                    other => {
                        value.push('\\');
                        value.push(other);
                    }
                }
                j += 2;
            }
            c => {
                value.push(c);
                j += 1;
            }
        }
    }
    Err(chars.len() - i)
}

/// Whether `word` lexes as one variable name: what an identifier token takes, and no literal.
pub fn is_name(word: &str) -> bool {
    let mut chars = word.chars();
    let first = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        && !word.ends_with('.')
        && !word.contains("..")
        && !matches!(word, "true" | "false" | "null")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(source: &str) -> Vec<Tok> {
        let (tokens, errors) = lex(source, &SourceMap::new(source));
        assert!(errors.is_empty(), "{errors:?}");
        tokens.into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn operators_identifiers_and_literals() {
        assert_eq!(
            toks("facets.a.b >= -1.5 && !x || y != 'it\\'s' == true"),
            [
                Tok::Ident("facets.a.b".into()),
                Tok::Ge,
                Tok::Num(Number::from_f64(-1.5).unwrap()),
                Tok::And,
                Tok::Not,
                Tok::Ident("x".into()),
                Tok::Or,
                Tok::Ident("y".into()),
                Tok::Ne,
                Tok::Str("it's".into()),
                Tok::Eq,
                Tok::Bool(true),
            ]
        );
        assert_eq!(
            toks("2 .5 -3"),
            [Tok::Num(2.into()), Tok::Num(Number::from_f64(0.5).unwrap()), Tok::Num((-3).into())]
        );
        assert_eq!(toks(r#""a\nb\x""#), [Tok::Str("a\nb\\x".into())]);
    }

    #[test]
    fn reports_every_lexical_error() {
        let source = "a & b = 'open";
        let (_, errors) = lex(source, &SourceMap::new(source));
        let messages: Vec<_> = errors.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(
            messages,
            ["Unexpected character `&`.", "Unexpected character `=`.", "Unterminated string literal."]
        );
        assert_eq!(errors[0].range.start.offset, 2);
        assert_eq!(errors[2].range.start.column, 9);
        assert!(lex("1.2.3", &SourceMap::new("1.2.3")).1[0].message.contains("Invalid number"));
    }
}
