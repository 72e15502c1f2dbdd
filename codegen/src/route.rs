//! The one classification of runtime inputs (`route.rs`): from the `input` patterns of the
//! outer and inner charts' `[[event]]` tables, a `route()` whose `match` on `Event` has one arm
//! per pattern, the outer chart's first, and no fallback: an `Event` variant no chart names
//! fails to compile in the core, and a pattern both charts name (`Abort`, `Steer`) is one arm
//! that gives both machines' events.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::model::Chart;
use crate::names::ident;
use crate::{fail, ChartFile, Error};

/// One arm: the pattern, and the event it stands for in each machine.
struct Arm {
    /// The pattern's tokens, normalized (two spellings of one pattern are one arm).
    key: String,
    pattern: syn::Pat,
    react: Option<String>,
    process: Option<String>,
}

/// The `route()` of the outer (`react`) and inner (`process`) charts.
pub(crate) fn route(
    react: (&Chart, &ChartFile),
    process: (&Chart, &ChartFile),
) -> Result<TokenStream, Error> {
    let mut arms: Vec<Arm> = Vec::new();
    for (chart, c) in [react, process] {
        for e in &chart.event {
            let Some(input) = &e.input else {
                continue;
            };
            if e.internal {
                return fail(
                    c.file,
                    format!("event {} is internal and names an input `{input}`", e.name),
                );
            }
            let pattern =
                syn::parse::Parser::parse_str(syn::Pat::parse_multi, input).or_else(|err| {
                    fail(
                        c.file,
                        format!("event {}: input `{input}` is not a pattern: {err}", e.name),
                    )
                })?;
            let key = quote!(#pattern).to_string();
            let idx = match arms.iter().position(|a| a.key == key) {
                Some(i) => i,
                None => {
                    arms.push(Arm {
                        key,
                        pattern,
                        react: None,
                        process: None,
                    });
                    arms.len() - 1
                }
            };
            let slot = if c.file == "react" {
                &mut arms[idx].react
            } else {
                &mut arms[idx].process
            };
            if let Some(other) = slot.replace(e.name.clone()) {
                return fail(
                    c.file,
                    format!(
                        "events {other} and {} name the same input `{input}`",
                        e.name
                    ),
                );
            }
        }
    }
    let kind = |c: &ChartFile, name: &Option<String>| -> TokenStream {
        let ev = format_ident!("{}EventKind", c.prefix);
        match name {
            Some(n) => {
                let v = ident(n);
                quote!(Some(#ev::#v))
            }
            None => quote!(None),
        }
    };
    let arms = arms.iter().map(|a| {
        let pattern = &a.pattern;
        let r = kind(react.1, &a.react);
        let p = kind(process.1, &a.process);
        quote!(#pattern => Route { react: #r, process: #p },)
    });
    Ok(quote! {
        /// The chart events `event` stands for: the outer machine's (it takes the input
        /// itself) and the inner machine's (it takes the input while a step runs, or when
        /// the outer machine hands it on). Generated from the charts' `input` patterns, the
        /// outer chart's first; every `Event` variant is named by some chart (no fallback).
        pub fn route(event: &Event) -> Route {
            match event {
                #(#arms)*
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CHARTS;

    /// The project's chart `file`, with `edit` applied to its text.
    fn chart(file: &str, edit: impl Fn(&str) -> String) -> Chart {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/statecharts");
        let text = std::fs::read_to_string(dir.join(format!("{file}.toml"))).expect("chart");
        Chart::parse(&edit(&text)).expect("chart parses")
    }

    fn same(s: &str) -> String {
        s.to_string()
    }

    #[test]
    fn a_pattern_both_charts_name_is_one_arm_with_both_events() {
        let (outer, inner) = (chart("react", same), chart("process", same));
        let text = route((&outer, &CHARTS[0]), (&inner, &CHARTS[1]))
            .expect("route")
            .to_string();
        assert!(
            text.contains(
                "Event :: Abort { .. } => Route { react : Some (ReactEventKind :: Abort) , \
                 process : Some (ProcessEventKind :: Abort) }"
            ),
            "{text}"
        );
        assert_eq!(text.matches("Event :: Abort").count(), 1, "{text}");
        // The outer chart's arms first: its deadline pattern before the inner `TimerElapsed`.
        let deadline = text
            .find("timer_id : RUN_DEADLINE_TIMER")
            .expect("deadline arm");
        let timer = text
            .find("Event :: TimerElapsed { .. }")
            .expect("timer arm");
        assert!(deadline < timer, "{text}");
        // Events the machines feed themselves have no arm.
        assert!(
            !text.contains("Begin") && !text.contains("Settle"),
            "{text}"
        );
    }

    #[test]
    fn a_bad_pattern_an_internal_input_or_two_events_of_one_input_are_refused() {
        let inner = chart("process", same);
        type Edit<'a> = &'a dyn Fn(&str) -> String;
        let cases: [(Edit, &str); 3] = [
            (
                &|t| t.replace("input = \"Event::Resume { .. }\"", "input = \"Event::(\""),
                "is not a pattern",
            ),
            (
                &|t| {
                    t.replace(
                        "name = \"Plan\"\n",
                        "name = \"Plan\"\ninput = \"Event::X\"\n",
                    )
                },
                "is internal",
            ),
            (
                &|t| t.replace("Event::Resume { .. }", "Event::Start { .. }"),
                "name the same input",
            ),
        ];
        for (edit, why) in cases {
            let outer = chart("react", edit);
            let e = route((&outer, &CHARTS[0]), (&inner, &CHARTS[1])).expect_err(why);
            assert!(e.message.contains(why), "{e}");
        }
    }
}
