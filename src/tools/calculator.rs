//! The `calculator` built-in tool: evaluates an arithmetic expression with `evalexpr`.
//!
//! Integer literals are evaluated as floating point, so `7/2` is `3.5` (not evalexpr's integer
//! division `3`); integral results are printed without a fractional part (`2+3` → `5`).
//! Expressions are capped at [`MAX_EXPRESSION_CHARS`] characters and [`MAX_NESTING`] levels of
//! parentheses so a hostile input cannot exhaust the evaluator's stack.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{ToolContext, ToolError, TypedTool};

/// Longest expression accepted, in characters.
pub(crate) const MAX_EXPRESSION_CHARS: usize = 1000;
/// Deepest parenthesis nesting accepted.
pub(crate) const MAX_NESTING: usize = 64;

/// The `calculator` tool. Pure, so it is safe to retry.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Calculator;

/// Arguments of `calculator`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CalculatorArgs {
    /// An arithmetic expression, e.g. `(2+3)*4` or `2^10 / 3`. Operators: + - * / % ^ and
    /// parentheses; functions such as `math::sqrt(2)` are available.
    pub(crate) expression: String,
}

#[async_trait]
impl TypedTool for Calculator {
    type Args = CalculatorArgs;
    const NAME: &'static str = "calculator";
    const DESCRIPTION: &'static str =
        "Evaluates an arithmetic expression and returns the numeric result.";

    fn retry_safe(&self) -> bool {
        true
    }

    /// Arithmetic: the same expression always gives the same number (R-TOOL-6).
    fn pure(&self) -> bool {
        true
    }

    async fn run(&self, _ctx: ToolContext, args: CalculatorArgs) -> Result<String, ToolError> {
        evaluate(&args.expression).map_err(ToolError::Failed)
    }
}

/// Evaluates `expression` and renders the result (`"2+3"` → `"5"`, `"7/2"` → `"3.5"`).
pub(crate) fn evaluate(expression: &str) -> Result<String, String> {
    let trimmed = expression.trim();
    if trimmed.is_empty() {
        return Err("the expression is empty".into());
    }
    let chars = trimmed.chars().count();
    if chars > MAX_EXPRESSION_CHARS {
        return Err(format!(
            "the expression is too long ({chars} characters; the limit is {MAX_EXPRESSION_CHARS})"
        ));
    }
    let depth = nesting_depth(trimmed);
    if depth > MAX_NESTING {
        return Err(format!(
            "the expression nests parentheses too deeply ({depth} levels; the limit is {MAX_NESTING})"
        ));
    }
    let value = evalexpr::eval(&floatify_integers(trimmed))
        .map_err(|e| format!("cannot evaluate `{trimmed}`: {e}"))?;
    match value {
        evalexpr::Value::Float(f) => render_float(f)
            .ok_or_else(|| format!("`{trimmed}` has no finite result (division by zero?)")),
        evalexpr::Value::Int(i) => Ok(i.to_string()),
        evalexpr::Value::Empty => Err(format!(
            "`{trimmed}` is not arithmetic: it evaluates to nothing"
        )),
        other => Err(format!(
            "`{trimmed}` is not arithmetic: it evaluates to {} `{other}`",
            type_name(&other)
        )),
    }
}

fn type_name(v: &evalexpr::Value) -> &'static str {
    match v {
        evalexpr::Value::String(_) => "the string",
        evalexpr::Value::Boolean(_) => "the boolean",
        evalexpr::Value::Tuple(_) => "the tuple",
        _ => "the value",
    }
}

fn nesting_depth(s: &str) -> usize {
    let mut depth = 0usize;
    let mut max = 0usize;
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                max = max.max(depth);
            }
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Rewrites standalone integer literals (`7`) as float literals (`7.0`) so that division is
/// real division. Digits that are part of an identifier (`log2`), a float (`1.5`, `.5`), an
/// exponent (`1e5`), a hex literal (`0x1f`) or a string are left alone.
fn floatify_integers(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len() + 8);
    let mut i = 0;
    let mut in_string = false;
    while i < chars.len() {
        let c = chars[i];
        if in_string {
            out.push(c);
            if c == '\\' {
                if let Some(&next) = chars.get(i + 1) {
                    out.push(next);
                    i += 1;
                }
            } else if c == '"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        if c == '"' {
            in_string = true;
            out.push(c);
            i += 1;
            continue;
        }
        let prev = if i == 0 { None } else { Some(chars[i - 1]) };
        let starts_number = c.is_ascii_digit()
            && !prev.is_some_and(|p| p.is_alphanumeric() || p == '_' || p == '.' || p == ':');
        if !starts_number {
            out.push(c);
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && chars[i].is_ascii_digit() {
            i += 1;
        }
        out.extend(&chars[start..i]);
        let next = chars.get(i).copied();
        let plain_integer = !next.is_some_and(|n| n.is_alphanumeric() || n == '_' || n == '.');
        if plain_integer {
            out.push_str(".0");
        }
    }
    out
}

/// Renders a finite float, without a trailing `.0` when it is integral; very large or very
/// small magnitudes use scientific notation (`1e300`, not 301 digits).
fn render_float(f: f64) -> Option<String> {
    if !f.is_finite() {
        return None;
    }
    if f != 0.0 && !(1e-6..1e16).contains(&f.abs()) {
        return Some(format!("{f:e}"));
    }
    // Integral and exactly representable as i64 (|f| < 2^53): print as an integer.
    if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
        // The range check above makes this cast exact.
        #[allow(clippy::cast_possible_truncation)]
        let i = f as i64;
        return Some(i.to_string());
    }
    Some(f.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::Tool;
    use serde_json::json;

    #[test]
    fn integral_results_have_no_fraction() {
        assert_eq!(evaluate("2+3").as_deref(), Ok("5"));
        assert_eq!(evaluate(" (2+3)*4 ").as_deref(), Ok("20"));
        assert_eq!(evaluate("2^10").as_deref(), Ok("1024"));
        assert_eq!(evaluate("-3 - 4").as_deref(), Ok("-7"));
        assert_eq!(evaluate("10 % 4").as_deref(), Ok("2"));
        assert_eq!(evaluate("0 * -1").as_deref(), Ok("0"));
    }

    #[test]
    fn division_is_real_division() {
        assert_eq!(evaluate("7/2").as_deref(), Ok("3.5"));
        assert_eq!(evaluate("1.5 * 3").as_deref(), Ok("4.5"));
        assert_eq!(evaluate(".5 + 1").as_deref(), Ok("1.5"));
        assert_eq!(evaluate("math::sqrt(16)").as_deref(), Ok("4"));
        assert_eq!(evaluate("2^100").as_deref(), Ok("1.2676506002282294e30"));
        assert_eq!(evaluate("1/2^30").as_deref(), Ok("9.313225746154785e-10"));
        assert_eq!(evaluate("2^52").as_deref(), Ok("4503599627370496"));
    }

    #[test]
    fn floatify_leaves_identifiers_and_floats_alone() {
        assert_eq!(floatify_integers("2+3"), "2.0+3.0");
        assert_eq!(floatify_integers("math::log2(8)"), "math::log2(8.0)");
        assert_eq!(floatify_integers("1.25*x1"), "1.25*x1");
        assert_eq!(floatify_integers("\"a1\" + 2"), "\"a1\" + 2.0");
    }

    #[test]
    fn errors_are_clear() {
        let e = evaluate("1/0").unwrap_err();
        assert!(e.contains("no finite result"), "{e}");
        let e = evaluate("2 +").unwrap_err();
        assert!(e.starts_with("cannot evaluate `2 +`"), "{e}");
        let e = evaluate("").unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let e = evaluate("1 < 2").unwrap_err();
        assert!(e.contains("not arithmetic"), "{e}");
        let e = evaluate("a = 1").unwrap_err();
        assert!(e.ends_with("evaluates to nothing"), "{e}");
        let e = evaluate(&"1+".repeat(MAX_EXPRESSION_CHARS)).unwrap_err();
        assert!(e.contains("too long"), "{e}");
        let deep = format!("{}1{}", "(".repeat(100), ")".repeat(100));
        let e = evaluate(&deep).unwrap_err();
        assert!(e.contains("too deeply"), "{e}");
    }

    #[tokio::test]
    async fn tool_validates_arguments_and_runs() {
        let tool = Calculator;
        assert_eq!(Tool::spec(&tool).name, "calculator");
        assert!(Tool::retry_safe(&tool));
        assert!(Tool::killable(&tool));
        let schema = Tool::spec(&tool).parameters;
        assert_eq!(schema["required"], json!(["expression"]));
        assert!(schema["properties"]["expression"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("arithmetic")));

        let ctx = || ToolContext::for_test(std::env::temp_dir(), "call_0_0");
        let out = tool.call(ctx(), json!({"expression": "2+3"})).await;
        assert_eq!(out.ok().as_deref(), Some("5"));
        let err = tool.call(ctx(), json!({"expr": "2+3"})).await;
        assert!(matches!(err, Err(ToolError::InvalidArguments(_))));
        let err = tool.call(ctx(), json!({"expression": "2/0"})).await;
        assert!(matches!(err, Err(ToolError::Failed(m)) if m.contains("no finite result")));
    }
}

#[cfg(test)]
mod stress {
    use super::evaluate;

    #[test]
    fn long_chains_at_the_limit_do_not_overflow() {
        // Run on a small stack (like a tokio worker) to catch deep recursion in the evaluator.
        let handle = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(|| {
                let chain = "1+".repeat(499) + "1";
                assert_eq!(evaluate(&chain).as_deref(), Ok("500"));
                let minus = "-".repeat(998) + "1";
                assert!(evaluate(&minus).is_ok());
                let pow = "1^".repeat(499) + "1";
                assert_eq!(evaluate(&pow).as_deref(), Ok("1"));
            })
            .unwrap();
        handle.join().unwrap();
    }
}
