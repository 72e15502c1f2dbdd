//! The dispatch of a statig machine (`<x>_dispatch.rs`): for each state and superstate, one
//! function that tries the scope's rows for the input's chart event in chart order, calls the
//! hand-written guard of each, and for the first that holds records the row, calls its
//! hand-written action (none for an ignored row) and returns the row's outcome; the
//! `enter_<state>`/`exit_<state>` wrappers of the chart's entry and exit actions; and the
//! oracle's `holds`/`expected`.

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::TokenStream;
use quote::{format_ident, quote, ToTokens};

use crate::enums::{events_in, guard_label};
use crate::model::{Chart, RowDef, RowKindDef};
use crate::names::{camel_ident, doc, ident, one_line, snake_ident};
use crate::{fail, Error};

/// A machine whose dispatch is generated: its chart, the generated enums' prefix and its data
/// (statig context) type. The module that includes the file brings `Guards`, `Actions`,
/// `chart_event`, the machine's `Input` and statig's `State` into scope.
pub(crate) struct Dispatched {
    /// The chart's file stem (`statecharts/<file>.toml`).
    pub(crate) file: &'static str,
    /// The generated enums' prefix (`<prefix>Guard`, `<prefix>Row`, `<prefix>EventKind`).
    pub(crate) prefix: &'static str,
    /// The machine's data type.
    pub(crate) data: &'static str,
    /// The derives of statig's `State` enum.
    pub(crate) state_derive: &'static str,
    /// Where the dispatch records the row it takes (`data.<take>(row)`).
    pub(crate) take: &'static str,
    /// Whether the root marks an input no state accepted as unhandled (`outbox.unhandled`).
    pub(crate) unhandled: bool,
}

/// The statig machines whose dispatch is generated (the tool-call lifecycle's, whose calls are
/// slots of the inner machine, by [`crate::tool_call`]).
pub(crate) const DISPATCHED: &[Dispatched] = &[
    Dispatched {
        file: "react",
        prefix: "React",
        data: "ReactData",
        state_derive: "Debug",
        take: "outbox.take",
        unhandled: true,
    },
    Dispatched {
        file: "process",
        prefix: "Process",
        data: "ProcessData",
        state_derive: "Debug, Clone, PartialEq, Eq",
        take: "outbox.take",
        unhandled: true,
    },
    Dispatched {
        file: "session",
        prefix: "Session",
        data: "SessionData",
        state_derive: "Debug, Clone, PartialEq, Eq",
        take: "take",
        unhandled: false,
    },
];

/// The guards a chart's rows name (`otherwise` aside), in name order; fails on a declared guard
/// no row names.
pub(crate) fn used_guards(chart: &Chart, file: &str) -> Result<BTreeSet<String>, Error> {
    let used: BTreeSet<String> = chart
        .row
        .iter()
        .filter_map(|r| r.guard.clone())
        .filter(|g| g != "otherwise")
        .collect();
    for g in &chart.guard {
        if g.name != "otherwise" && !used.contains(&g.name) {
            return fail(
                file,
                format!("guard {} is declared but no row names it", g.name),
            );
        }
    }
    Ok(used)
}

/// State-local data (statig state-local storage): state → (type, starts at `Default`).
pub(crate) fn locals(chart: &Chart) -> BTreeMap<&str, (&str, bool)> {
    chart
        .state
        .iter()
        .filter_map(|s| {
            s.local
                .as_deref()
                .map(|t| (s.name.as_str(), (t, s.local_default)))
        })
        .collect()
}

/// The guards handed a state's data, with the states whose rows name them: a guard every row
/// of which is in a state holding data of one type is handed that data (`&Type` after the
/// machine's data).
pub(crate) fn local_guards(
    chart: &Chart,
    used: &BTreeSet<String>,
) -> BTreeMap<String, Vec<String>> {
    let locals = locals(chart);
    let mut out = BTreeMap::new();
    for g in used {
        let rows: Vec<&RowDef> = chart
            .row
            .iter()
            .filter(|r| r.guard.as_deref() == Some(g.as_str()))
            .collect();
        let types: BTreeSet<Option<&str>> = rows
            .iter()
            .map(|r| locals.get(r.from.as_str()).map(|l| l.0))
            .collect();
        if types.len() != 1 || types.contains(&None) {
            continue;
        }
        let mut scopes: Vec<String> = Vec::new();
        for r in rows {
            if !scopes.contains(&r.from) {
                scopes.push(r.from.clone());
            }
        }
        out.insert(g.clone(), scopes);
    }
    out
}

/// How the oracle's functions are called after the data: `params` (the signature of `holds`
/// and `expected`), `pass` (what `expected` hands `holds`), `guard_pass` (what `holds` hands a
/// guard), and the guards that read a state's own data with the states that hold it (`holds`
/// takes those from the statig state).
pub(crate) struct OracleArgs<'a> {
    pub(crate) params: TokenStream,
    pub(crate) pass: TokenStream,
    pub(crate) guard_pass: TokenStream,
    pub(crate) local_guards: &'a BTreeMap<String, Vec<String>>,
}

/// The oracle's functions for a chart: `holds` (evaluates a guard by calling its predicate in
/// `guards`) and `expected` (the row the chart prescribes, see `crate::chart::oracle`).
pub(crate) fn oracle_fns(
    chart: &Chart,
    prefix: &str,
    data: TokenStream,
    guards: &str,
    args: &OracleArgs,
) -> TokenStream {
    let OracleArgs {
        params,
        pass,
        guard_pass,
        local_guards,
    } = args;
    let guard = format_ident!("{prefix}Guard");
    let st = format_ident!("{prefix}State");
    let ev = format_ident!("{prefix}EventKind");
    let row = format_ident!("{prefix}Row");
    let machine = ident(prefix);
    let module = ident(guards);
    let arms = chart.guard.iter().map(|g| {
        let v = camel_ident(&g.name);
        let f = ident(&g.name);
        if g.name == "otherwise" {
            quote!(#guard::Otherwise => true)
        } else if let Some(scopes) = local_guards.get(&g.name) {
            // A guard reading a state's data holds only in the states that have it.
            let scopes = scopes.iter().map(|s| ident(s));
            quote! {
                #guard::#v => match sm {
                    #(State::#scopes { local } => #module::#f(data, local, input),)*
                    _ => false,
                }
            }
        } else {
            quote!(#guard::#v => #module::#f(data, #guard_pass))
        }
    });
    let holds_doc = doc(&format!(
        "Evaluates guard `g` by calling its predicate in `{guards}` (generated): the same \
         predicates the dispatch calls."
    ));
    quote! {
        #holds_doc
        pub(crate) fn holds(g: #guard, data: &#data, #params) -> bool {
            match g { #(#arms,)* }
        }

        /// The oracle (generated): the row the chart prescribes for the event `kind` in `state`, the first
        /// candidate (leaf state first, then its superstates) whose guard holds, evaluated before the
        /// machine moves, and two rows whose guards both held without the chart saying which wins
        /// (see [`crate::chart::oracle`]); neither when the oracle does not run
        /// ([`crate::chart::ORACLE`]).
        pub(crate) fn expected(
            state: #st,
            kind: #ev,
            data: &#data,
            #params,
        ) -> (Option<#row>, Option<(&'static str, &'static str)>) {
            if !crate::chart::ORACLE {
                return (None, None);
            }
            crate::chart::oracle(
                crate::chart::MachineKind::#machine,
                state.candidates(kind),
                #row::spec,
                #row::guard,
                |g| holds(g, data, #pass),
            )
        }
    }
}

/// The entry and exit actions a chart names: `(state or superstate, "entry" | "exit",
/// action)`, superstates first, in chart order.
fn state_hooks(chart: &Chart) -> Vec<(String, &'static str, String)> {
    let scopes = chart
        .superstate
        .iter()
        .map(|s| (&s.name, &s.entry, &s.exit))
        .chain(chart.state.iter().map(|s| (&s.name, &s.entry, &s.exit)));
    let mut out = Vec::new();
    for (name, entry, exit) in scopes {
        if let Some(f) = entry {
            out.push((name.clone(), "entry", f.clone()));
        }
        if let Some(f) = exit {
            out.push((name.clone(), "exit", f.clone()));
        }
    }
    out
}

/// The `enter_<state>` / `exit_<state>` wrappers statig's `entry_action`/`exit_action` name.
fn hook_wrappers(chart: &Chart, data: &syn::Ident) -> TokenStream {
    let locals = locals(chart);
    let wrappers = state_hooks(chart).into_iter().map(|(scope, kind, f)| {
        let prefix = if kind == "entry" { "enter" } else { "exit" };
        let name = format_ident!("{prefix}_{}", snake_ident(&scope));
        let action = ident(&f);
        let d = doc(&format!(
            "The {kind} action of `{scope}` (generated): `Actions::{f}`."
        ));
        match locals.get(scope.as_str()) {
            Some((t, _)) => {
                let t = ident(t);
                quote! {
                    #d
                    pub(crate) fn #name(data: &mut #data, local: &mut #t) {
                        Actions::#action(data, local);
                    }
                }
            }
            None => quote! {
                #d
                pub(crate) fn #name(data: &mut #data) {
                    Actions::#action(data);
                }
            },
        }
    });
    quote!(#(#wrappers)*)
}

/// What taking row `r` does after recording it: the call of its action (none for an ignored
/// row; `next` is the data it returns for the state it enters) and the outcome statig gets.
fn take_row(
    r: &RowDef,
    has_local: bool,
    locals: &BTreeMap<&str, (&str, bool)>,
) -> (TokenStream, TokenStream) {
    let action = ident(r.action());
    let args = if has_local {
        quote!(data, local, input)
    } else {
        quote!(data, input)
    };
    // The target's data: returned by the row's action, or its default.
    let target = (r.kind == RowKindDef::Transition)
        .then(|| locals.get(r.to.as_str()))
        .flatten();
    let call = match (r.kind, target) {
        (RowKindDef::Ignored, _) => quote!(),
        (_, Some((_, false))) => quote!(let next = Actions::#action(#args);),
        _ => quote!(Actions::#action(#args);),
    };
    let to = ident(&r.to);
    let outcome = match (r.kind, target) {
        (RowKindDef::Transition, None) => quote!(Transition(State::#to {})),
        (RowKindDef::Transition, Some((_, false))) => {
            quote!(Transition(State::#to { local: next }))
        }
        (RowKindDef::Transition, Some((_, true))) => {
            quote!(Transition(State::#to { local: Default::default() }))
        }
        (RowKindDef::Internal | RowKindDef::Ignored, _) => quote!(Handled),
    };
    (call, outcome)
}

/// One scope's rows for one event, in chart order: the statements and the tail (`Super` when
/// every row is guarded). Fails on a row after an unconditional one.
fn event_arm(
    chart: &Chart,
    m: &Dispatched,
    scope: &str,
    rows: &[&RowDef],
    local_guards: &BTreeMap<String, Vec<String>>,
) -> Result<TokenStream, Error> {
    let locals = locals(chart);
    let has_local = locals.contains_key(scope);
    let row = format_ident!("{}Row", m.prefix);
    let take: TokenStream = m
        .take
        .parse()
        .or_else(|e| fail(m.file, format!("take: {e}")))?;
    let mut stmts = Vec::new();
    let mut open = true;
    for r in rows {
        if !open {
            return fail(
                m.file,
                format!(
                    "row {} is unreachable: an earlier row of {scope} for {} has no guard (or \
                     `otherwise`)",
                    r.id, r.event
                ),
            );
        }
        let v = camel_ident(&r.id);
        let (call, outcome) = take_row(r, has_local, &locals);
        match r.guard.as_deref().filter(|g| *g != "otherwise") {
            Some(g) => {
                let gargs = if local_guards.contains_key(g) {
                    quote!(data, local, input)
                } else {
                    quote!(data, input)
                };
                let g = ident(g);
                stmts.push(quote! {
                    if Guards::#g(#gargs) {
                        data.#take(#row::#v);
                        #call
                        return #outcome;
                    }
                });
            }
            None => {
                stmts.push(quote! {
                    data.#take(#row::#v);
                    #call
                    #outcome
                });
                open = false;
            }
        }
    }
    if open {
        stmts.push(quote!(Super));
    }
    Ok(quote!(#(#stmts)*))
}

/// The function of one state or superstate.
fn scope_fn(
    chart: &Chart,
    m: &Dispatched,
    scope: &str,
    scope_doc: &str,
    local_guards: &BTreeMap<String, Vec<String>>,
) -> Result<TokenStream, Error> {
    let data = ident(m.data);
    let ev = format_ident!("{}EventKind", m.prefix);
    let locals = locals(chart);
    let local = locals.get(scope);
    let f = snake_ident(scope);
    let d = doc(&format!(
        "`{scope}` (generated): {}\n\nTries this scope's rows for the input's chart event, in \
         chart order; `Super` when none holds.",
        one_line(scope_doc)
    ));
    let local_param = match local {
        Some((t, _)) => {
            let t = ident(t);
            quote!(local: &mut #t,)
        }
        None => quote!(),
    };
    let rows: Vec<&RowDef> = chart.row.iter().filter(|r| r.from == scope).collect();
    let body = if rows.is_empty() {
        let unused = if local.is_some() {
            quote!((data, local, input))
        } else {
            quote!((data, input))
        };
        quote! {
            let _ = #unused;
            Super
        }
    } else {
        let mut arms = Vec::new();
        for e in events_in(rows.iter().copied()) {
            let of_event: Vec<&RowDef> = rows.iter().copied().filter(|r| r.event == e).collect();
            let arm = event_arm(chart, m, scope, &of_event, local_guards)?;
            let e = ident(e);
            arms.push(quote!(#ev::#e => { #arm }));
        }
        quote! {
            let Some(event) = chart_event(data, input) else { return Super; };
            match event {
                #(#arms)*
                _ => Super,
            }
        }
    };
    Ok(quote! {
        #d
        pub(crate) fn #f(data: &mut #data, #local_param input: &Input<'_>) -> Outcome<State> {
            #body
        }
    })
}

/// A trait method's signature, for telling two uses of one action name apart.
type Method = (String, TokenStream);

/// Adds `name` with `sig` to `methods`, once; fails when the name comes back with another
/// signature (an entry action of two states holding different data).
fn add_method(
    methods: &mut Vec<Method>,
    file: &str,
    name: &str,
    sig: TokenStream,
) -> Result<(), Error> {
    match methods.iter().find(|(n, _)| n == name) {
        Some((_, s)) if s.to_string() == sig.to_string() => Ok(()),
        Some(_) => fail(
            file,
            format!("action {name} is named by states holding different data"),
        ),
        None => {
            methods.push((name.to_string(), sig));
            Ok(())
        }
    }
}

/// The doc of a row's action: the row as the chart writes it, and its note.
pub(crate) fn row_text(r: &RowDef) -> String {
    let g = guard_label(r);
    let mut text = format!("`{}`: `{} --{}{g}--> {}`.", r.id, r.from, r.event, r.to);
    if let Some(n) = &r.note {
        text.push_str(&format!(" {}", one_line(n)));
    }
    text
}

/// The methods of the actions trait: one per row that acts (with its state's data, returning
/// the data of the state it enters), then one per entry/exit action a state names.
fn action_methods(chart: &Chart, m: &Dispatched) -> Result<Vec<TokenStream>, Error> {
    let data = ident(m.data);
    let locals = locals(chart);
    let local_type = |scope: &str| locals.get(scope).map(|(t, _)| ident(t));
    let mut actions: Vec<Method> = Vec::new();
    let mut docs: BTreeMap<String, String> = BTreeMap::new();
    for r in chart.row.iter().filter(|r| r.kind != RowKindDef::Ignored) {
        let local = local_type(&r.from).map(|t| quote!(local: &mut #t,));
        let ret = match (r.kind, locals.get(r.to.as_str())) {
            (RowKindDef::Transition, Some((t, false))) => {
                let t = ident(t);
                quote!(-> #t)
            }
            _ => quote!(),
        };
        let f = ident(r.action());
        // An action rows share lists each of them, one paragraph a row.
        docs.entry(r.action().to_string())
            .and_modify(|d| *d = format!("{d}\n\n{}", row_text(r)))
            .or_insert_with(|| row_text(r));
        add_method(
            &mut actions,
            m.file,
            r.action(),
            quote!(fn #f(data: &mut #data, #local input: &Input<'_>) #ret;),
        )?;
    }
    for (scope, kind, action) in state_hooks(chart) {
        let local = local_type(&scope).map(|t| quote!(local: &mut #t));
        let f = ident(&action);
        docs.entry(action.clone())
            .or_insert_with(|| format!("`{action}`: the {kind} action of `{scope}`."));
        add_method(
            &mut actions,
            m.file,
            &action,
            quote!(fn #f(data: &mut #data, #local);),
        )?;
    }
    Ok(actions
        .iter()
        .map(|(name, sig)| {
            let d = docs.get(name).map(|d| doc(d));
            quote!(#d #sig)
        })
        .collect())
}

/// The guards and actions traits of machine `m` (`<prefix>Guards`, `<prefix>Actions`): one
/// method per guard a row names and per action a row or a state's entry/exit names, with the
/// signature the dispatch calls it with. The hand-written `guards::Guards` and
/// `actions::Actions` implement them, so the compiler ties each name and signature to the chart.
fn traits(
    chart: &Chart,
    m: &Dispatched,
    used: &BTreeSet<String>,
    local_guards: &BTreeMap<String, Vec<String>>,
) -> Result<TokenStream, Error> {
    let data = ident(m.data);
    let locals = locals(chart);
    let local_type = |scope: &str| locals.get(scope).map(|(t, _)| ident(t));
    let guards = chart
        .guard
        .iter()
        .filter(|g| used.contains(&g.name))
        .map(|g| {
            let d = doc(&format!("`{}`: {}", g.name, one_line(&g.doc)));
            let f = ident(&g.name);
            let local = local_guards
                .get(&g.name)
                .and_then(|scopes| scopes.first())
                .and_then(|s| local_type(s))
                .map(|t| quote!(local: &#t,));
            quote! {
                #d
                fn #f(data: &#data, #local input: &Input<'_>) -> bool;
            }
        });
    let actions = action_methods(chart, m)?;
    let gt = format_ident!("{}Guards", m.prefix);
    let at = format_ident!("{}Actions", m.prefix);
    let gdoc = doc(&format!(
        "The guards of `statecharts/{}.toml` (generated): one pure predicate per guard a row \
         names (`otherwise` needs none), implemented by the hand-written `guards::Guards`. A \
         guard whose rows are all in one state holding data is handed that data.",
        m.file
    ));
    let adoc = doc(&format!(
        "The actions of `statecharts/{}.toml` (generated): one per row that acts (every row but \
         an ignored one), named after the row, and one per entry/exit action a state names, \
         implemented by the hand-written `actions::Actions`. A row's action gets its state's \
         data, and returns the data of the state it enters (unless that starts at `Default`).",
        m.file
    ));
    Ok(quote! {
        #gdoc
        pub(crate) trait #gt { #(#guards)* }

        #adoc
        pub(crate) trait #at { #(#actions)* }
    })
}

/// The whole dispatch file of machine `m`.
pub(crate) fn dispatch(chart: &Chart, m: &Dispatched) -> Result<TokenStream, Error> {
    let used = used_guards(chart, m.file)?;
    let local_guards = local_guards(chart, &used);
    // When a guard reads a state's own data, the oracle's `holds` also takes the statig state
    // (which holds that data); a chart whose states hold data no guard reads needs none.
    let args = if local_guards.is_empty() {
        OracleArgs {
            params: quote!(input: &Input<'_>),
            pass: quote!(input),
            guard_pass: quote!(input),
            local_guards: &local_guards,
        }
    } else {
        OracleArgs {
            params: quote!(sm: &State, input: &Input<'_>),
            pass: quote!(sm, input),
            guard_pass: quote!(input),
            local_guards: &local_guards,
        }
    };
    let oracle = oracle_fns(
        chart,
        m.prefix,
        ident(m.data).into_token_stream(),
        "Guards",
        &args,
    );
    let hooks = hook_wrappers(chart, &ident(m.data));
    let traits = traits(chart, m, &used, &local_guards)?;
    let mut scopes = Vec::new();
    let all = chart
        .superstate
        .iter()
        .map(|s| (s.name.as_str(), s.doc.as_str()))
        .chain(
            chart
                .state
                .iter()
                .map(|s| (s.name.as_str(), s.doc.as_str())),
        );
    for (scope, scope_doc) in all {
        scopes.push(scope_fn(chart, m, scope, scope_doc, &local_guards)?);
    }
    Ok(quote!(#traits #oracle #hooks #(#scopes)*))
}
