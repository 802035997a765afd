//! Recursive-descent parser, lowest precedence first:
//!
//! ```text
//! expr       := or
//! or         := and ( "||" and )*
//! and        := equality ( "&&" equality )*
//! equality   := comparison ( ("==" | "!=") comparison )*      left-associative
//! comparison := unary ( (">=" | "<=" | ">" | "<") unary )*     left-associative
//! unary      := "!" unary | primary
//! primary    := NUMBER | STRING | "true" | "false" | "null"
//!             | ("some" | "all") "(" expr [ "as" IDENT ] "," expr ")"
//!             | "exists" "(" expr ")"
//!             | IDENT | "(" expr ")"
//! ```
//!
//! Nesting is limited to [`MAX_DEPTH`], so a hostile expression gets an error, not a stack
//! overflow.

use super::ast::{CompareOp, Expr, Literal, Quantifier};
use super::error::{DslError, ErrorCode, SourceMap, Span};
use super::lexer::{Tok, Token};

/// Deepest nesting of parentheses, `!`, `exists` and quantifiers.
pub const MAX_DEPTH: usize = 64;

pub fn parse(tokens: &[Token], source_len: usize, map: &SourceMap) -> Result<Expr, DslError> {
    let mut parser = Parser { tokens, pos: 0, map, depth: 0, end: source_len };
    let expr = parser.or()?;
    match parser.peek() {
        None => Ok(expr),
        Some(token) => Err(parser.unexpected(token)),
    }
}

struct Parser<'a> {
    tokens: &'a [Token],
    pos: usize,
    map: &'a SourceMap,
    depth: usize,
    end: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a Token> {
        self.tokens.get(self.pos)
    }

    fn peek_is(&self, tok: &Tok) -> bool {
        self.peek().is_some_and(|t| &t.tok == tok)
    }

    fn next(&mut self) -> Option<&'a Token> {
        let token = self.tokens.get(self.pos);
        self.pos += 1;
        token
    }

    /// Consumes the next token if it is `tok`.
    fn next_if(&mut self, tok: &Tok) -> Option<&'a Token> {
        if self.peek_is(tok) { self.next() } else { None }
    }

    fn error(&self, span: Span, message: impl Into<String>) -> DslError {
        self.map.error(ErrorCode::SyntaxError, span, message)
    }

    fn here(&self) -> Span {
        self.peek().map_or(Span::new(self.end, self.end + 1), |t| t.span)
    }

    fn unexpected(&self, token: &Token) -> DslError {
        self.error(token.span, format!("Unexpected token `{}`.", token.text))
    }

    fn end_of_input(&self) -> DslError {
        self.error(Span::new(self.end, self.end + 1), "Unexpected end of expression.")
    }

    /// Consumes `tok` or fails with `message` at the current position.
    fn expect(&mut self, tok: &Tok, message: &str) -> Result<&'a Token, DslError> {
        match self.next_if(tok) {
            Some(token) => Ok(token),
            None => Err(self.error(self.here(), message)),
        }
    }

    fn nested<T>(&mut self, at: Span, f: impl FnOnce(&mut Self) -> Result<T, DslError>) -> Result<T, DslError> {
        if self.depth >= MAX_DEPTH {
            return Err(self.error(at, format!("Expression nests deeper than {MAX_DEPTH} levels.")));
        }
        self.depth += 1;
        let result = f(self);
        self.depth -= 1;
        result
    }

    fn or(&mut self) -> Result<Expr, DslError> {
        self.chain(&Tok::Or, Self::and, |operands, span| Expr::Or { operands, span })
    }

    fn and(&mut self) -> Result<Expr, DslError> {
        self.chain(&Tok::And, Self::equality, |operands, span| Expr::And { operands, span })
    }

    /// `operand (sep operand)*`, flattening nested chains of the same kind.
    fn chain(
        &mut self,
        separator: &Tok,
        operand: fn(&mut Self) -> Result<Expr, DslError>,
        build: fn(Vec<Expr>, Span) -> Expr,
    ) -> Result<Expr, DslError> {
        let first = operand(self)?;
        if !self.peek_is(separator) {
            return Ok(first);
        }
        let mut operands = Vec::new();
        let push = |e: Expr, operands: &mut Vec<Expr>| match (e, separator) {
            (Expr::And { operands: inner, .. }, Tok::And) | (Expr::Or { operands: inner, .. }, Tok::Or) => {
                operands.extend(inner)
            }
            (e, _) => operands.push(e),
        };
        let start = first.span();
        push(first, &mut operands);
        while self.peek_is(separator) {
            self.next();
            let next = operand(self)?;
            push(next, &mut operands);
        }
        let span = start.to(operands.last().map_or(start, Expr::span));
        Ok(build(operands, span))
    }

    fn equality(&mut self) -> Result<Expr, DslError> {
        self.binary(Self::comparison, |tok| match tok {
            Tok::Eq => Some(CompareOp::Eq),
            Tok::Ne => Some(CompareOp::Ne),
            _ => None,
        })
    }

    fn comparison(&mut self) -> Result<Expr, DslError> {
        self.binary(Self::unary, |tok| match tok {
            Tok::Gt => Some(CompareOp::Gt),
            Tok::Ge => Some(CompareOp::Ge),
            Tok::Lt => Some(CompareOp::Lt),
            Tok::Le => Some(CompareOp::Le),
            _ => None,
        })
    }

    fn binary(
        &mut self,
        operand: fn(&mut Self) -> Result<Expr, DslError>,
        operator: fn(&Tok) -> Option<CompareOp>,
    ) -> Result<Expr, DslError> {
        let mut left = operand(self)?;
        let mut chained = 0;
        while let Some(op) = self.peek().and_then(|t| operator(&t.tok)) {
            // `a < b < c` is `(a < b) < c`: each link nests, and its canonical form shows the
            // parentheses, so the chain counts toward the nesting limit.
            chained += 1;
            let Some(at) = self.next().map(|t| t.span) else { break };
            if self.depth + chained > MAX_DEPTH {
                return Err(self.error(at, format!("Expression nests deeper than {MAX_DEPTH} levels.")));
            }
            let right = operand(self)?;
            let span = left.span().to(right.span());
            left = Expr::Compare { op, left: Box::new(left), right: Box::new(right), span };
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, DslError> {
        if self.peek_is(&Tok::Not) {
            let bang = self.here();
            self.next();
            let operand = self.nested(bang, Self::unary)?;
            let span = bang.to(operand.span());
            return Ok(Expr::Not { operand: Box::new(operand), span });
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Expr, DslError> {
        let Some(token) = self.next() else { return Err(self.end_of_input()) };
        let literal = |value| Ok(Expr::Literal { value, span: token.span });
        match &token.tok {
            Tok::Num(n) => literal(Literal::Number(n.clone())),
            Tok::Str(s) => literal(Literal::String(s.clone())),
            Tok::Bool(b) => literal(Literal::Bool(*b)),
            Tok::Ident(name) if name == "null" => literal(Literal::Null),
            Tok::Ident(name) if name == "exists" => self.exists(token),
            Tok::Ident(name) if (name == "some" || name == "all") && self.peek_is(&Tok::LParen) => {
                let quantifier = if name == "some" { Quantifier::Some } else { Quantifier::All };
                self.quantifier(token, quantifier)
            }
            Tok::Ident(name) => Ok(Expr::Var { name: name.clone(), span: token.span }),
            Tok::LParen => self.nested(token.span, |p| {
                let inner = p.or()?;
                p.expect(&Tok::RParen, "Unclosed parenthesis.")?;
                Ok(inner)
            }),
            _ => Err(self.unexpected(token)),
        }
    }

    fn exists(&mut self, keyword: &Token) -> Result<Expr, DslError> {
        self.expect(&Tok::LParen, "Expected `(` after `exists`.")?;
        self.nested(keyword.span, |p| {
            let argument = p.or()?;
            let close = p.expect(&Tok::RParen, "Unclosed `exists` argument.")?;
            Ok(Expr::Exists { argument: Box::new(argument), span: keyword.span.to(close.span) })
        })
    }

    /// `some(`/`all(`: the keyword is only one when `(` follows, which the caller checked.
    fn quantifier(&mut self, keyword: &Token, quantifier: Quantifier) -> Result<Expr, DslError> {
        self.next();
        self.nested(keyword.span, |p| {
            let collection = p.or()?;
            let alias = if p.peek().is_some_and(|t| t.tok == Tok::Ident("as".into())) {
                p.next();
                Some(p.alias()?)
            } else {
                None
            };
            p.expect(&Tok::Comma, "Expected `,` after quantifier collection.")?;
            let predicate = p.or()?;
            let close = p.expect(&Tok::RParen, "Unclosed quantifier predicate.")?;
            Ok(Expr::Quantify {
                quantifier,
                collection: Box::new(collection),
                alias,
                predicate: Box::new(predicate),
                span: keyword.span.to(close.span),
            })
        })
    }

    fn alias(&mut self) -> Result<String, DslError> {
        match self.peek() {
            Some(Token { tok: Tok::Ident(name), span, .. }) => {
                if name.contains('.') {
                    return Err(self.error(*span, "Alias may not contain `.` segments."));
                }
                self.next();
                Ok(name.clone())
            }
            _ => Err(self.error(self.here(), "Expected alias identifier after `as`.")),
        }
    }
}
