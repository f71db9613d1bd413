//! A small CEL subset for `x-kubernetes-validations` rules, evaluated over JSON values.
//!
//! Supported: literals (int, double, string, bool, null, lists), `self`, `oldSelf`, member access
//! `a.b`, indexing `a[0]` / `a["k"]`, `has(a.b)`, `size(x)` / `x.size()`, `x.startsWith(s)`,
//! `x.endsWith(s)`, `x.contains(s)`, `x.matches(re)`, `!`, unary `-`, `&&`, `||`, `? :`,
//! `==`, `!=`, `<`, `<=`, `>`, `>=`, `in`. Anything else is reported as unsupported and the rule is skipped.

use serde_json::{Value, json};

/// A parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A literal value.
    Lit(Value),
    /// A variable (`self`, `oldSelf`).
    Var(String),
    /// `base.field`.
    Member(Box<Expr>, String),
    /// `base[index]`.
    Index(Box<Expr>, Box<Expr>),
    /// `has(base.field)`.
    Has(Box<Expr>, String),
    /// `name(args)` or `target.name(args)` (target first in args).
    Call(String, Vec<Expr>),
    /// Unary operator (`!`, `-`).
    Unary(char, Box<Expr>),
    /// Binary operator.
    Binary(String, Box<Expr>, Box<Expr>),
    /// `cond ? a : b`.
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    /// `[a, b]`.
    List(Vec<Expr>),
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(Value),
    Str(String),
    Ident(String),
    Op(String),
}

fn lex(src: &str) -> Result<Vec<Tok>, String> {
    let cs: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < cs.len() && (cs[i].is_ascii_digit() || cs[i] == '.') {
                i += 1;
            }
            let s: String = cs[start..i].iter().collect();
            let v = if s.contains('.') {
                s.parse::<f64>()
                    .map(|f| json!(f))
                    .map_err(|e| e.to_string())?
            } else {
                s.parse::<i64>()
                    .map(|n| json!(n))
                    .map_err(|e| e.to_string())?
            };
            if i < cs.len() && cs[i] == 'u' {
                i += 1;
            }
            out.push(Tok::Num(v));
        } else if c == '"' || c == '\'' {
            i += 1;
            let mut s = String::new();
            while i < cs.len() && cs[i] != c {
                if cs[i] == '\\' && i + 1 < cs.len() {
                    i += 1;
                    s.push(match cs[i] {
                        'n' => '\n',
                        't' => '\t',
                        other => other,
                    });
                } else {
                    s.push(cs[i]);
                }
                i += 1;
            }
            if i >= cs.len() {
                return Err("unterminated string".into());
            }
            i += 1;
            out.push(Tok::Str(s));
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < cs.len() && (cs[i].is_alphanumeric() || cs[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(cs[start..i].iter().collect()));
        } else {
            let two: String = cs[i..(i + 2).min(cs.len())].iter().collect();
            if ["==", "!=", "<=", ">=", "&&", "||"].contains(&two.as_str()) {
                out.push(Tok::Op(two));
                i += 2;
            } else if "!<>()[].,?:-+".contains(c) {
                out.push(Tok::Op(c.to_string()));
                i += 1;
            } else {
                return Err(format!("unsupported character '{c}'"));
            }
        }
    }
    Ok(out)
}

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

/// Whether an expression mentions `oldSelf` (a transition rule).
pub fn uses_old_self(e: &Expr) -> bool {
    match e {
        Expr::Var(v) => v == "oldSelf",
        Expr::Lit(_) => false,
        Expr::Member(b, _) | Expr::Has(b, _) | Expr::Unary(_, b) => uses_old_self(b),
        Expr::Index(a, b) | Expr::Binary(_, a, b) => uses_old_self(a) || uses_old_self(b),
        Expr::Cond(a, b, c) => uses_old_self(a) || uses_old_self(b) || uses_old_self(c),
        Expr::Call(_, xs) | Expr::List(xs) => xs.iter().any(uses_old_self),
    }
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn compare(op: &str, a: &Value, b: &Value) -> Result<bool, String> {
    if op == "==" {
        return Ok(a == b || matches!((num(a), num(b)), (Some(x), Some(y)) if x == y));
    }
    if op == "!=" {
        return compare("==", a, b).map(|e| !e);
    }
    let ord = match (a, b) {
        (Value::Number(_), Value::Number(_)) => num(a).partial_cmp(&num(b)),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
    .ok_or_else(|| format!("no such overload for '{op}'"))?;
    Ok(match op {
        "<" => ord.is_lt(),
        "<=" => ord.is_le(),
        ">" => ord.is_gt(),
        _ => ord.is_ge(),
    })
}

fn truthy(v: &Value) -> Result<bool, String> {
    v.as_bool().ok_or_else(|| "expected a bool".to_string())
}

/// Evaluates an expression with `self` and optional `oldSelf` bound.
///
/// # Errors
/// A CEL-like runtime error (`no such key: x`, `no such overload`).
pub fn eval(e: &Expr, this: &Value, old: Option<&Value>) -> Result<Value, String> {
    match e {
        Expr::Lit(v) => Ok(v.clone()),
        Expr::Var(v) if v == "self" => Ok(this.clone()),
        Expr::Var(_) => old
            .cloned()
            .ok_or_else(|| "oldSelf is not available".to_string()),
        Expr::Member(b, f) => {
            let base = eval(b, this, old)?;
            base.get(f)
                .cloned()
                .ok_or_else(|| format!("no such key: {f}"))
        }
        Expr::Index(b, i) => {
            let base = eval(b, this, old)?;
            let idx = eval(i, this, old)?;
            let got = match &idx {
                Value::String(k) => base.get(k),
                Value::Number(n) => n.as_u64().and_then(|n| base.get(n as usize)),
                _ => None,
            };
            got.cloned().ok_or_else(|| format!("no such key: {idx}"))
        }
        Expr::Has(b, f) => Ok(json!(eval(b, this, old)?.get(f).is_some())),
        Expr::Unary('!', x) => Ok(json!(!truthy(&eval(x, this, old)?)?)),
        Expr::Unary(_, x) => {
            let v = eval(x, this, old)?;
            v.as_i64()
                .map(|n| json!(-n))
                .or_else(|| v.as_f64().map(|f| json!(-f)))
                .ok_or("no such overload for '-'".into())
        }
        Expr::Binary(op, a, b) if op == "&&" || op == "||" => {
            let l = truthy(&eval(a, this, old)?)?;
            if (op == "&&" && !l) || (op == "||" && l) {
                return Ok(json!(l));
            }
            Ok(json!(truthy(&eval(b, this, old)?)?))
        }
        Expr::Binary(op, a, b) if op == "in" => {
            let needle = eval(a, this, old)?;
            match eval(b, this, old)? {
                Value::Array(xs) => Ok(json!(xs.contains(&needle))),
                Value::Object(m) => Ok(json!(needle.as_str().is_some_and(|k| m.contains_key(k)))),
                _ => Err("no such overload for 'in'".into()),
            }
        }
        Expr::Binary(op, a, b) => Ok(json!(compare(
            op,
            &eval(a, this, old)?,
            &eval(b, this, old)?
        )?)),
        Expr::Cond(c, a, b) => {
            if truthy(&eval(c, this, old)?)? {
                eval(a, this, old)
            } else {
                eval(b, this, old)
            }
        }
        Expr::List(xs) => Ok(Value::Array(
            xs.iter()
                .map(|x| eval(x, this, old))
                .collect::<Result<_, _>>()?,
        )),
        Expr::Call(name, args) => {
            let vals: Vec<Value> = args
                .iter()
                .map(|x| eval(x, this, old))
                .collect::<Result<_, _>>()?;
            call(name, &vals)
        }
    }
}

fn call(name: &str, a: &[Value]) -> Result<Value, String> {
    let s = |i: usize| {
        a.get(i)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("no such overload for '{name}'"))
    };
    match (name, a.len()) {
        ("size", 1) => match &a[0] {
            Value::String(x) => Ok(json!(x.chars().count())),
            Value::Array(x) => Ok(json!(x.len())),
            Value::Object(x) => Ok(json!(x.len())),
            _ => Err("no such overload for 'size'".into()),
        },
        ("startsWith", 2) => Ok(json!(s(0)?.starts_with(s(1)?))),
        ("endsWith", 2) => Ok(json!(s(0)?.ends_with(s(1)?))),
        ("contains", 2) => Ok(json!(s(0)?.contains(s(1)?))),
        ("matches", 2) => {
            let re = regex::Regex::new(s(1)?).map_err(|e| e.to_string())?;
            Ok(json!(re.is_match(s(0)?)))
        }
        ("int", 1) => a[0]
            .as_i64()
            .or_else(|| a[0].as_str().and_then(|x| x.parse().ok()))
            .map(|n| json!(n))
            .ok_or_else(|| "no such overload for 'int'".into()),
        ("string", 1) => Ok(json!(
            a[0].as_str()
                .map(str::to_string)
                .unwrap_or_else(|| a[0].to_string())
        )),
        _ => Err(format!("unsupported function '{name}'")),
    }
}

/// Parses and evaluates a rule to a bool.
///
/// # Errors
/// `Err(Unsupported)` for syntax outside the subset, `Err(Runtime)` for evaluation errors.
pub fn check(rule: &str, this: &Value, old: Option<&Value>) -> Result<bool, CelError> {
    let e = parse(rule).map_err(CelError::Unsupported)?;
    eval(&e, this, old)
        .and_then(|v| truthy(&v))
        .map_err(CelError::Runtime)
}

/// Why a rule could not be decided.
#[derive(Debug, Clone, PartialEq)]
pub enum CelError {
    /// The rule uses CEL outside the supported subset; it is skipped.
    Unsupported(String),
    /// Evaluation failed (counts as a failed rule, like kube).
    Runtime(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn immutability_rule_compares_self_and_old_self() {
        assert_eq!(
            check("self == oldSelf", &json!("a"), Some(&json!("a"))),
            Ok(true)
        );
        assert_eq!(
            check("self == oldSelf", &json!("a"), Some(&json!("b"))),
            Ok(false)
        );
    }

    #[test]
    fn has_and_boolean_operators_work_on_objects() {
        let obj = json!({"a": 1, "b": {"c": "x"}});
        assert_eq!(check("has(self.a) && !has(self.z)", &obj, None), Ok(true));
        assert_eq!(check("self.b.c == 'x' || self.a > 5", &obj, None), Ok(true));
        assert_eq!(
            check("size(self.b.c) == 1 && self.a in [1, 2]", &obj, None),
            Ok(true)
        );
        assert_eq!(check("self.b.c.startsWith('y')", &obj, None), Ok(false));
    }

    #[test]
    fn unknown_functions_are_unsupported_not_failures() {
        assert!(matches!(
            check("duration(self) > duration('1s')", &json!("1s"), None),
            Err(CelError::Unsupported(_))
        ));
    }
}
