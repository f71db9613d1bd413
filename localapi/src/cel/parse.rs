//! The CEL parser: a recursive-descent parser over tokens, one method per precedence level.

use serde_json::{Value, json};

use super::Expr;
use super::lex::{Tok, lex};

/// Tokens and the position of the next one.
struct Parser {
    toks: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn peek_op(&self, op: &str) -> bool {
        matches!(self.toks.get(self.pos), Some(Tok::Op(o)) if o == op)
    }
    fn peek_ident(&self, name: &str) -> bool {
        matches!(self.toks.get(self.pos), Some(Tok::Ident(o)) if o == name)
    }
    fn eat(&mut self, op: &str) -> Result<(), String> {
        if self.peek_op(op) {
            self.pos += 1;
            Ok(())
        } else {
            Err(format!("expected '{op}'"))
        }
    }
    fn expr(&mut self) -> Result<Expr, String> {
        let c = self.or()?;
        if self.peek_op("?") {
            self.pos += 1;
            let a = self.expr()?;
            self.eat(":")?;
            let b = self.expr()?;
            return Ok(Expr::Cond(Box::new(c), Box::new(a), Box::new(b)));
        }
        Ok(c)
    }
    fn or(&mut self) -> Result<Expr, String> {
        let mut l = self.and()?;
        while self.peek_op("||") {
            self.pos += 1;
            l = Expr::Binary("||".into(), Box::new(l), Box::new(self.and()?));
        }
        Ok(l)
    }
    fn and(&mut self) -> Result<Expr, String> {
        let mut l = self.cmp()?;
        while self.peek_op("&&") {
            self.pos += 1;
            l = Expr::Binary("&&".into(), Box::new(l), Box::new(self.cmp()?));
        }
        Ok(l)
    }
    fn cmp(&mut self) -> Result<Expr, String> {
        let l = self.unary()?;
        for op in ["==", "!=", "<=", ">=", "<", ">"] {
            if self.peek_op(op) {
                self.pos += 1;
                return Ok(Expr::Binary(
                    op.into(),
                    Box::new(l),
                    Box::new(self.unary()?),
                ));
            }
        }
        if self.peek_ident("in") {
            self.pos += 1;
            return Ok(Expr::Binary(
                "in".into(),
                Box::new(l),
                Box::new(self.unary()?),
            ));
        }
        Ok(l)
    }
    fn unary(&mut self) -> Result<Expr, String> {
        for op in ['!', '-'] {
            if self.peek_op(&op.to_string()) {
                self.pos += 1;
                return Ok(Expr::Unary(op, Box::new(self.unary()?)));
            }
        }
        self.postfix()
    }
    fn args(&mut self) -> Result<Vec<Expr>, String> {
        let mut args = Vec::new();
        self.eat("(")?;
        while !self.peek_op(")") {
            args.push(self.expr()?);
            if !self.peek_op(")") {
                self.eat(",")?;
            }
        }
        self.eat(")")?;
        Ok(args)
    }
    fn postfix(&mut self) -> Result<Expr, String> {
        let mut e = self.primary()?;
        loop {
            if self.peek_op(".") {
                self.pos += 1;
                let Some(Tok::Ident(name)) = self.toks.get(self.pos).cloned() else {
                    return Err("expected a field name after '.'".into());
                };
                self.pos += 1;
                if self.peek_op("(") {
                    if !["size", "startsWith", "endsWith", "contains", "matches"]
                        .contains(&name.as_str())
                    {
                        return Err(format!("unsupported function '{name}'"));
                    }
                    let mut args = vec![e];
                    args.extend(self.args()?);
                    e = Expr::Call(name, args);
                } else {
                    e = Expr::Member(Box::new(e), name);
                }
            } else if self.peek_op("[") {
                self.pos += 1;
                let idx = self.expr()?;
                self.eat("]")?;
                e = Expr::Index(Box::new(e), Box::new(idx));
            } else {
                return Ok(e);
            }
        }
    }
    fn primary(&mut self) -> Result<Expr, String> {
        let tok = self
            .toks
            .get(self.pos)
            .cloned()
            .ok_or("unexpected end of expression")?;
        self.pos += 1;
        match tok {
            Tok::Num(v) => Ok(Expr::Lit(v)),
            Tok::Str(s) => Ok(Expr::Lit(Value::String(s))),
            Tok::Ident(id) => match id.as_str() {
                "true" => Ok(Expr::Lit(json!(true))),
                "false" => Ok(Expr::Lit(json!(false))),
                "null" => Ok(Expr::Lit(Value::Null)),
                "self" | "oldSelf" => Ok(Expr::Var(id)),
                "has" => {
                    let mut args = self.args()?;
                    match (args.pop(), args.is_empty()) {
                        (Some(Expr::Member(base, f)), true) => Ok(Expr::Has(base, f)),
                        _ => Err("has() needs one field selection".into()),
                    }
                }
                "size" | "int" | "string" => Ok(Expr::Call(id, self.args()?)),
                other => Err(format!("unsupported identifier '{other}'")),
            },
            Tok::Op(o) if o == "(" => {
                let e = self.expr()?;
                self.eat(")")?;
                Ok(e)
            }
            Tok::Op(o) if o == "[" => {
                let mut items = Vec::new();
                while !self.peek_op("]") {
                    items.push(self.expr()?);
                    if !self.peek_op("]") {
                        self.eat(",")?;
                    }
                }
                self.eat("]")?;
                Ok(Expr::List(items))
            }
            Tok::Op(o) => Err(format!("unexpected '{o}'")),
        }
    }
}

/// Parses a rule.
///
/// # Errors
/// A message when the rule uses syntax outside the supported subset.
pub fn parse(src: &str) -> Result<Expr, String> {
    let mut p = Parser {
        toks: lex(src)?,
        pos: 0,
    };
    let e = p.expr()?;
    if p.pos != p.toks.len() {
        return Err("unexpected trailing input".into());
    }
    Ok(e)
}
