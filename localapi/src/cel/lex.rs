//! The CEL lexer: numbers, quoted strings, identifiers and operators.

use serde_json::{Value, json};

/// A token: a number, a string, an identifier or an operator.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    Num(Value),
    Str(String),
    Ident(String),
    Op(String),
}

/// Splits a rule into tokens.
pub(super) fn lex(src: &str) -> Result<Vec<Tok>, String> {
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
