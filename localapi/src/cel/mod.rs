//! A small CEL subset for `x-kubernetes-validations` rules, evaluated over JSON values.
//!
//! Supported: literals (int, double, string, bool, null, lists), `self`, `oldSelf`, member access
//! `a.b`, indexing `a[0]` / `a["k"]`, `has(a.b)`, `size(x)` / `x.size()`, `x.startsWith(s)`,
//! `x.endsWith(s)`, `x.contains(s)`, `x.matches(re)`, `x.lowerAscii()`, `!`, unary `-`, `&&`, `||`, `? :`,
//! `==`, `!=`, `<`, `<=`, `>`, `>=`, `in`. Anything else is reported as unsupported and the rule is skipped.
//!
//! lex.rs turns a rule into tokens, parse.rs into an [`Expr`], eval.rs evaluates it over JSON.

mod eval;
mod lex;
mod parse;

pub use eval::eval;
pub use parse::parse;

use serde_json::Value;

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

/// Parses and evaluates a rule to a bool.
///
/// # Errors
/// `Err(Unsupported)` for syntax outside the subset, `Err(Runtime)` for evaluation errors.
pub fn check(rule: &str, this: &Value, old: Option<&Value>) -> Result<bool, CelError> {
    let e = parse(rule).map_err(CelError::Unsupported)?;
    eval(&e, this, old)
        .and_then(|v| eval::truthy(&v))
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
    use serde_json::json;

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
