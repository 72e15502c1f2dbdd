//! Names: chart ids to Rust identifiers, and doc attributes.

use proc_macro2::{Ident, Span, TokenStream};
use quote::quote;

/// `snake_case` → `CamelCase` (row ids and guards → enum variants).
pub(crate) fn camel(id: &str) -> String {
    id.split('_')
        .map(|p| {
            let mut c = p.chars();
            match c.next() {
                Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// `CamelCase` → `snake_case` (state names → statig's state handlers).
pub(crate) fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// An identifier.
pub(crate) fn ident(name: &str) -> Ident {
    Ident::new(name, Span::call_site())
}

/// `CamelCase` identifier of a snake_case chart id.
pub(crate) fn camel_ident(id: &str) -> Ident {
    ident(&camel(id))
}

/// `snake_case` identifier of a CamelCase chart name.
pub(crate) fn snake_ident(name: &str) -> Ident {
    ident(&snake(name))
}

/// `/// …` lines for `text`: one doc attribute per line, each line wrapped at [`WIDTH`]
/// characters (a chart's state lists every row it may take).
pub(crate) fn doc(text: &str) -> TokenStream {
    let lines = text.split('\n').flat_map(wrap).map(|l| {
        let l = if l.is_empty() {
            String::new()
        } else {
            format!(" {l}")
        };
        quote!(#[doc = #l])
    });
    quote!(#(#lines)*)
}

/// Where [`doc`] wraps a line.
pub(crate) const WIDTH: usize = 92;

/// `line` cut at spaces into pieces of at most [`WIDTH`] characters (a longer word stays whole).
fn wrap(line: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::new();
    for word in line.split(' ') {
        if !cur.is_empty() && cur.chars().count() + 1 + word.chars().count() > WIDTH {
            out.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(word);
    }
    out.push(cur);
    out
}

/// A chart's doc text on one line.
pub(crate) fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camel_and_snake_are_inverse_on_chart_names() {
        assert_eq!(camel("planning_max_steps"), "PlanningMaxSteps");
        assert_eq!(snake("AwaitingApproval"), "awaiting_approval");
        assert_eq!(snake(&camel("tool_executing")), "tool_executing");
    }

    #[test]
    fn doc_emits_one_attribute_per_line() {
        let d = doc("a\n\nb").to_string();
        assert_eq!(d.matches("doc").count(), 3, "{d}");
        assert!(
            d.contains("\" a\"") && d.contains("\"\"") && d.contains("\" b\""),
            "{d}"
        );
    }

    #[test]
    fn doc_wraps_long_lines_at_spaces() {
        let long = "word ".repeat(60);
        let lines = wrap(long.trim_end());
        assert!(lines.len() > 2, "{lines:?}");
        assert!(
            lines.iter().all(|l| l.chars().count() <= WIDTH),
            "{lines:?}"
        );
        assert_eq!(lines.join(" "), long.trim_end());
        assert_eq!(wrap(""), vec![String::new()]);
    }
}
