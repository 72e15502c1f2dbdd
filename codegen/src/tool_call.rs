//! The tool-call lifecycle's dispatch (`tool_call_dispatch.rs`). A call is a slot of the inner
//! machine's data, not a statig machine, so the dispatch is three functions over the calls'
//! view of that data (`Calls`): `select` tries the rows of the slot's state and its
//! superstates (innermost first) for the event, in chart order, calling each row's guard in
//! `call_guards` (`(calls, slot, facts)`), and returns the first whose guard holds; `act` runs
//! the row's action in `call_actions`; `holds` and `expected` are the oracle's.

use std::collections::BTreeSet;

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::dispatch::{oracle_fns, row_text, used_guards, OracleArgs};
use crate::enums::events_in;
use crate::model::{Chart, RowDef, RowKindDef};
use crate::names::{camel_ident, doc, ident, snake};
use crate::{fail, Error};

const FILE: &str = "tool_call";

/// The function that tries the rows of one state or superstate.
fn scope_fn(chart: &Chart, scope: &str) -> Result<TokenStream, Error> {
    let f = format_ident!("scope_{}", snake(scope));
    let d = doc(&format!(
        "The rows of `{scope}` for `event`, in chart order: the first whose guard holds \
         (generated)."
    ));
    let rows: Vec<&RowDef> = chart.row.iter().filter(|r| r.from == scope).collect();
    if rows.is_empty() {
        return Ok(quote! {
            #d
            fn #f(event: ToolCallEventKind, data: &Calls<'_>, i: usize, facts: &Facts<'_>) -> Option<ToolCallRow> {
                let _ = (event, data, i, facts);
                None
            }
        });
    }
    let mut arms = Vec::new();
    for e in events_in(rows.iter().copied()) {
        let mut stmts = Vec::new();
        let mut open = true;
        for r in rows.iter().filter(|r| r.event == e) {
            if !open {
                return fail(
                    FILE,
                    format!(
                        "row {} is unreachable: an earlier row of {scope} for {e} has no guard \
                         (or `otherwise`)",
                        r.id
                    ),
                );
            }
            let v = camel_ident(&r.id);
            match r.guard.as_deref().filter(|g| *g != "otherwise") {
                Some(g) => {
                    let g = ident(g);
                    stmts.push(quote! {
                        if Guards::#g(data, i, facts) { return Some(ToolCallRow::#v); }
                    });
                }
                None => {
                    stmts.push(quote!(Some(ToolCallRow::#v)));
                    open = false;
                }
            }
        }
        if open {
            stmts.push(quote!(None));
        }
        let e = ident(e);
        arms.push(quote!(ToolCallEventKind::#e => { #(#stmts)* }));
    }
    Ok(quote! {
        #d
        fn #f(event: ToolCallEventKind, data: &Calls<'_>, i: usize, facts: &Facts<'_>) -> Option<ToolCallRow> {
            let _ = (data, i, facts);
            match event {
                #(#arms)*
                _ => None,
            }
        }
    })
}

/// The traits the hand-written `call_guards::Guards` and `call_actions::Actions` implement:
/// one method per guard a row names and per row that acts.
fn traits(chart: &Chart, used: &BTreeSet<String>) -> TokenStream {
    let guards = chart
        .guard
        .iter()
        .filter(|g| used.contains(&g.name))
        .map(|g| {
            let d = doc(&format!("`{}`: {}", g.name, crate::names::one_line(&g.doc)));
            let f = ident(&g.name);
            quote! {
                #d
                fn #f(data: &Calls<'_>, i: usize, facts: &Facts<'_>) -> bool;
            }
        });
    // One method per action, its doc a paragraph per row that calls it.
    let mut docs: Vec<(&str, String)> = Vec::new();
    for r in chart.row.iter().filter(|r| r.kind != RowKindDef::Ignored) {
        match docs.iter_mut().find(|(a, _)| *a == r.action()) {
            Some((_, d)) => *d = format!("{d}\n\n{}", row_text(r)),
            None => docs.push((r.action(), row_text(r))),
        }
    }
    let actions = docs.iter().map(|(a, text)| {
        let (d, f) = (doc(text), ident(a));
        quote! {
            #d
            fn #f(data: &mut Calls<'_>, i: usize, from: ToolCallState, facts: &Facts<'_>);
        }
    });
    quote! {
        /// The guards of `statecharts/tool_call.toml` (generated): one pure predicate per guard a
        /// row names, over the calls' view of the inner machine's data (`Calls`), the call's
        /// slot and the event's facts; implemented by the hand-written `call_guards::Guards`.
        pub(crate) trait ToolCallGuards { #(#guards)* }

        /// The actions of `statecharts/tool_call.toml` (generated): one per row that acts (every
        /// row but an ignored one), named after the row; implemented by the hand-written
        /// `call_actions::Actions`.
        pub(crate) trait ToolCallActions { #(#actions)* }
    }
}

/// The whole `tool_call_dispatch.rs`.
pub(crate) fn call_dispatch(chart: &Chart) -> Result<TokenStream, Error> {
    let traits = traits(chart, &used_guards(chart, FILE)?);
    let oracle = oracle_fns(
        chart,
        "ToolCall",
        quote!(Calls<'_>),
        "Guards",
        &OracleArgs {
            params: quote!(i: usize, facts: &Facts<'_>),
            pass: quote!(i, facts),
            guard_pass: quote!(i, facts),
            local_guards: &Default::default(),
        },
    );
    let mut scopes = Vec::new();
    for scope in chart
        .superstate
        .iter()
        .map(|s| s.name.as_str())
        .chain(chart.state.iter().map(|s| s.name.as_str()))
    {
        scopes.push(scope_fn(chart, scope)?);
    }
    let select = chart.state.iter().map(|s| {
        let v = ident(&s.name);
        let first = format_ident!("scope_{}", snake(&s.name));
        let rest = chart
            .ancestors(&s.name)
            .into_iter()
            .map(|a| format_ident!("scope_{}", snake(&a)));
        quote! {
            ToolCallState::#v => #first(event, data, i, facts)
                #(.or_else(|| #rest(event, data, i, facts)))*
        }
    });
    let act = chart.row.iter().map(|r| {
        let v = camel_ident(&r.id);
        if r.kind == RowKindDef::Ignored {
            quote!(ToolCallRow::#v => { let _ = (data, i, from, facts); })
        } else {
            let f = ident(r.action());
            quote!(ToolCallRow::#v => Actions::#f(data, i, from, facts))
        }
    });
    Ok(quote! {
        #traits
        #oracle
        #(#scopes)*

        /// The row slot `i` takes for `event` (generated): its state's rows, then each enclosing
        /// superstate's, innermost first; `None` when no row holds.
        pub(crate) fn select(event: ToolCallEventKind, data: &Calls<'_>, i: usize, facts: &Facts<'_>) -> Option<ToolCallRow> {
            match data.tools.slots.get(i).state() {
                #(#select,)*
            }
        }

        /// Runs row `row`'s action for slot `i`, which was in `from` (generated).
        pub(crate) fn act(row: ToolCallRow, data: &mut Calls<'_>, i: usize, from: ToolCallState, facts: &Facts<'_>) {
            match row {
                #(#act,)*
            }
        }
    })
}
