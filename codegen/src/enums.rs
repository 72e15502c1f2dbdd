//! A chart's enums (`<x>_chart.rs`): states, event kinds, guards and rows, with the tables the
//! machines and the oracle read (`ALL`, `name`, `ancestors`, `candidates`, `spec`, ...).

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::model::{Chart, RowKindDef};
use crate::names::{camel_ident, doc, ident, one_line, snake};
use crate::{effects, ChartFile, Error};

/// The derives of every generated enum.
pub(crate) fn derives() -> TokenStream {
    quote! {
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
            serde::Serialize, serde::Deserialize, schemars::JsonSchema
        )]
    }
}

/// `pub const ALL` listing `variants` of `ty`.
pub(crate) fn all_const(ty: &syn::Ident, what: &str, variants: &[syn::Ident]) -> TokenStream {
    let d = doc(&format!("Every {what}, in chart order."));
    quote! {
        #d
        pub const ALL: &'static [#ty] = &[#(#ty::#variants),*];
    }
}

/// `pub fn name` mapping each variant to its chart name.
pub(crate) fn name_fn(
    ty: &syn::Ident,
    what: &str,
    variants: &[syn::Ident],
    names: &[String],
) -> TokenStream {
    let d = doc(&format!("The chart name of the {what}."));
    quote! {
        #d
        pub fn name(self) -> &'static str {
            match self { #(#ty::#variants => #names,)* }
        }
    }
}

/// `pub fn <name>(self) -> bool`, true for the `yes` variants.
fn flag_fn(name: &str, text: &str, ty: &syn::Ident, yes: &[syn::Ident]) -> TokenStream {
    let d = doc(text);
    let f = ident(name);
    let body = if yes.is_empty() {
        quote!(let _ = self; false)
    } else {
        quote!(matches!(self, #(#ty::#yes)|*))
    };
    quote! {
        #d
        pub fn #f(self) -> bool { #body }
    }
}

/// ` [guard]` for a guarded row, empty for another (the rows' docs).
pub(crate) fn guard_label(r: &crate::model::RowDef) -> String {
    r.guard
        .as_ref()
        .map(|g| format!(" [{g}]"))
        .unwrap_or_default()
}

/// The scopes a leaf state tries rows in: itself, then its superstates, innermost first.
pub(crate) fn scopes_of(chart: &Chart, state: &str) -> Vec<String> {
    let mut scopes = vec![state.to_string()];
    scopes.extend(chart.ancestors(state));
    scopes
}

/// The events `rows` handle, in the order their first row appears.
pub(crate) fn events_in<'a>(
    rows: impl IntoIterator<Item = &'a crate::model::RowDef>,
) -> Vec<&'a str> {
    let mut events: Vec<&str> = Vec::new();
    for r in rows {
        if !events.contains(&r.event.as_str()) {
            events.push(&r.event);
        }
    }
    events
}

/// The state enum's variants, each with its doc and the rows it may take.
fn state_variants(chart: &Chart) -> Vec<TokenStream> {
    chart
        .state
        .iter()
        .map(|s| {
            let scopes = scopes_of(chart, &s.name);
            let transitions: Vec<String> = chart
                .row
                .iter()
                .filter(|r| scopes.contains(&r.from))
                .map(|r| {
                    let g = guard_label(r);
                    let to = if r.kind == RowKindDef::Transition {
                        r.to.clone()
                    } else {
                        format!("({:?})", r.kind).to_lowercase()
                    };
                    format!("`{}{g} → {to}`", r.event)
                })
                .collect();
            let mut text = one_line(&s.doc);
            if !transitions.is_empty() {
                text.push_str(&format!("\n\nRows: {}.", transitions.join(", ")));
            }
            let d = doc(&text);
            let v = ident(&s.name);
            quote!(#d #v,)
        })
        .collect()
}

/// The arms of `candidates`: the rows of each (state, event), listed from the chart rather
/// than searched for at run time (the oracle asks for them on every event, every streamed
/// delta).
fn candidate_arms(chart: &Chart, c: &ChartFile) -> Vec<TokenStream> {
    let st = format_ident!("{}State", c.prefix);
    let ev = format_ident!("{}EventKind", c.prefix);
    let row = format_ident!("{}Row", c.prefix);
    let mut arms = Vec::new();
    for s in &chart.state {
        let scopes = scopes_of(chart, &s.name);
        let v = ident(&s.name);
        for e in events_in(chart.row.iter().filter(|r| scopes.contains(&r.from))) {
            let rows = scopes.iter().flat_map(|scope| {
                chart
                    .row
                    .iter()
                    .filter(move |r| &r.from == scope && r.event == e)
                    .map(|r| camel_ident(&r.id))
            });
            let e = ident(e);
            arms.push(quote!((#st::#v, #ev::#e) => &[#(#row::#rows),*]));
        }
    }
    arms
}

/// `in_<superstate>` for every superstate.
fn superstate_flags(chart: &Chart, st: &syn::Ident) -> Vec<TokenStream> {
    chart
        .superstate
        .iter()
        .map(|sup| {
            let yes: Vec<syn::Ident> = chart
                .state
                .iter()
                .filter(|s| chart.ancestors(&s.name).contains(&sup.name))
                .map(|s| ident(&s.name))
                .collect();
            flag_fn(
                &format!("in_{}", snake(&sup.name)),
                &format!("Whether the state lies inside superstate `{}`.", sup.name),
                st,
                &yes,
            )
        })
        .collect()
}

/// The state enum and its `impl`.
fn states(chart: &Chart, c: &ChartFile) -> TokenStream {
    let st = format_ident!("{}State", c.prefix);
    let ev = format_ident!("{}EventKind", c.prefix);
    let derive = derives();
    let head = doc(&format!(
        "Leaf states of the {} (generated from `statecharts/{}.toml`).",
        chart.title, chart.machine
    ));
    let row = format_ident!("{}Row", c.prefix);
    let variants = state_variants(chart);
    let names: Vec<String> = chart.state.iter().map(|s| s.name.clone()).collect();
    let idents: Vec<syn::Ident> = names.iter().map(|n| ident(n)).collect();
    let terminal: Vec<syn::Ident> = chart
        .state
        .iter()
        .filter(|s| s.terminal)
        .map(|s| ident(&s.name))
        .collect();
    let all = all_const(&st, "leaf state", &idents);
    let name = name_fn(&st, "state", &idents, &names);
    let is_terminal = flag_fn(
        "is_terminal",
        "Whether the state is terminal (absorbing).",
        &st,
        &terminal,
    );
    let initial = ident(&chart.initial);
    let ancestors = chart.state.iter().map(|s| {
        let v = ident(&s.name);
        let a = chart.ancestors(&s.name);
        quote!(#st::#v => &[#(#a),*])
    });
    let arms = candidate_arms(chart, c);
    let inside = superstate_flags(chart, &st);
    quote! {
        #head
        #derive
        pub enum #st { #(#variants)* }

        impl #st {
            #all
            /// The initial state.
            pub const INITIAL: #st = #st::#initial;
            #name
            #is_terminal
            /// The enclosing superstates, innermost first.
            pub fn ancestors(self) -> &'static [&'static str] {
                match self { #(#ancestors,)* }
            }
            /// Whether this state is `name` or lies inside superstate `name`.
            pub fn is_in(self, name: &str) -> bool {
                self.name() == name || self.ancestors().contains(&name)
            }
            /// The rows this state may take for `event`, in the order the chart decides: the leaf
            /// state's rows first, then each enclosing superstate's (innermost first), each level in
            /// chart order. The first row whose guard holds is the one the machine must take.
            pub fn candidates(self, event: #ev) -> &'static [#row] {
                match (self, event) { #(#arms,)* _ => &[] }
            }
            #(#inside)*
        }
    }
}

/// The event-kind enum and its `impl`.
fn events(chart: &Chart, c: &ChartFile) -> TokenStream {
    let ev = format_ident!("{}EventKind", c.prefix);
    let derive = derives();
    let head = doc(&format!("Event kinds of the {} (generated).", chart.title));
    let variants = chart.event.iter().map(|e| {
        let d = doc(&one_line(&e.doc));
        let v = ident(&e.name);
        quote!(#d #v,)
    });
    let names: Vec<String> = chart.event.iter().map(|e| e.name.clone()).collect();
    let idents: Vec<syn::Ident> = names.iter().map(|n| ident(n)).collect();
    let internal: Vec<syn::Ident> = chart
        .event
        .iter()
        .filter(|e| e.internal)
        .map(|e| ident(&e.name))
        .collect();
    let all = all_const(&ev, "event kind", &idents);
    let name = name_fn(&ev, "event", &idents, &names);
    let is_internal = flag_fn(
        "is_internal",
        "Whether the facade feeds this event itself (run to completion).",
        &ev,
        &internal,
    );
    quote! {
        #head
        #derive
        pub enum #ev { #(#variants)* }

        impl #ev {
            #all
            #name
            #is_internal
        }
    }
}

/// The guard enum and its `impl`.
fn guards(chart: &Chart, c: &ChartFile) -> TokenStream {
    let guard = format_ident!("{}Guard", c.prefix);
    let derive = derives();
    let head = doc(&format!(
        "Named guards of the {} (generated): each is a pure predicate the machine and the \
         conformance oracle evaluate.",
        chart.title
    ));
    let variants = chart.guard.iter().map(|g| {
        let d = doc(&one_line(&g.doc));
        let v = camel_ident(&g.name);
        quote!(#d #v,)
    });
    let names: Vec<String> = chart.guard.iter().map(|g| g.name.clone()).collect();
    let idents: Vec<syn::Ident> = names.iter().map(|n| camel_ident(n)).collect();
    let all = all_const(&guard, "guard", &idents);
    let name = name_fn(&guard, "guard", &idents, &names);
    quote! {
        #head
        #derive
        pub enum #guard { #(#variants)* }

        impl #guard {
            #all
            #name
        }
    }
}

/// The row enum's variants, each documented with the row as the chart writes it.
fn row_variants(chart: &Chart) -> Vec<TokenStream> {
    chart
        .row
        .iter()
        .map(|r| {
            let g = guard_label(r);
            let d = doc(&format!(
                "`{} --{}{g}--> {}` ({:?})",
                r.from, r.event, r.to, r.kind
            ));
            let v = camel_ident(&r.id);
            quote!(#d #v,)
        })
        .collect()
}

/// The arms of `spec`: each row as a `RowSpec`.
fn spec_arms(chart: &Chart, c: &ChartFile, idents: &[syn::Ident]) -> Vec<TokenStream> {
    let ev = format_ident!("{}EventKind", c.prefix);
    let row = format_ident!("{}Row", c.prefix);
    chart
        .row
        .iter()
        .zip(idents)
        .map(|(r, v)| {
            let kind = match r.kind {
                RowKindDef::Transition => quote!(RowKind::Transition),
                RowKindDef::Internal => quote!(RowKind::Internal),
                RowKindDef::Ignored => quote!(RowKind::Ignored),
            };
            let g = match &r.guard {
                Some(g) => quote!(Some(#g)),
                None => quote!(None),
            };
            let (id, from, to, e) = (&r.id, &r.from, &r.to, ident(&r.event));
            quote! {
                #row::#v => RowSpec { id: #id, from: #from, event: #ev::#e, guard: #g, to: #to, kind: #kind }
            }
        })
        .collect()
}

/// The row enum and its `impl`.
fn rows(chart: &Chart, c: &ChartFile) -> Result<TokenStream, Error> {
    let st = format_ident!("{}State", c.prefix);
    let ev = format_ident!("{}EventKind", c.prefix);
    let row = format_ident!("{}Row", c.prefix);
    let guard = format_ident!("{}Guard", c.prefix);
    let derive = derives();
    let head = doc(&format!(
        "Rows of the {} (generated): the allowed transitions.",
        chart.title
    ));
    let variants = row_variants(chart);
    let idents: Vec<syn::Ident> = chart.row.iter().map(|r| camel_ident(&r.id)).collect();
    let all = all_const(&row, "row", &idents);
    let specs = spec_arms(chart, c, &idents);
    let guard_arms = chart.row.iter().zip(&idents).map(|(r, v)| match &r.guard {
        Some(g) => {
            let g = camel_ident(g);
            quote!(#row::#v => Some(#guard::#g))
        }
        None => quote!(#row::#v => None),
    });
    let target_arms = chart.row.iter().zip(&idents).map(|(r, v)| match r.kind {
        RowKindDef::Transition => {
            let to = ident(&r.to);
            quote!(#row::#v => Some(#st::#to))
        }
        _ => quote!(#row::#v => None),
    });
    let declared = effects::declared(chart, c)?;
    let effect_arms = idents.iter().zip(&declared).map(|(v, list)| {
        let list = list.iter().map(|(name, optional)| {
            let n = effects::variant(name);
            quote!(DeclaredEffect { name: EffectName::#n, optional: #optional })
        });
        quote!(#row::#v => Some(&[#(#list),*]))
    });
    Ok(quote! {
        #head
        #derive
        pub enum #row { #(#variants)* }

        impl #row {
            #all
            /// The row as written in the chart.
            pub fn spec(self) -> RowSpec<#ev> {
                match self { #(#specs,)* }
            }
            /// The row's guard, if it has one.
            pub fn guard(self) -> Option<#guard> {
                match self { #(#guard_arms,)* }
            }
            /// The state a transition row leads to (`None` for an internal or ignored row).
            pub fn target(self) -> Option<#st> {
                match self { #(#target_arms,)* }
            }
            /// The effects the row declares, typed (`None`: this chart's effects are still prose,
            /// not checked). See [`check_effects`] for the rule.
            pub fn effects(self) -> Option<&'static [DeclaredEffect]> {
                match self { #(#effect_arms,)* }
            }
        }
    })
}

/// Everything `<x>_chart.rs` holds.
pub(crate) fn chart_enums(chart: &Chart, c: &ChartFile) -> Result<TokenStream, Error> {
    let states = states(chart, c);
    let events = events(chart, c);
    let guards = guards(chart, c);
    let rows = rows(chart, c)?;
    Ok(quote!(#states #events #guards #rows))
}
