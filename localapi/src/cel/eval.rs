//! The CEL evaluator: expressions over JSON values with `self` and `oldSelf` bound.

use serde_json::{Value, json};

use super::Expr;

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

/// A bool value, or the CEL error for anything else.
pub(super) fn truthy(v: &Value) -> Result<bool, String> {
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
        ("lowerAscii", 1) => Ok(json!(s(0)?.to_ascii_lowercase())),
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
