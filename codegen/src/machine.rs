//! The statig machine of a chart (`<x>_machine.rs`): one `#[state_machine]` impl whose
//! handlers carry the chart's hierarchy (`superstate = ...`), state-local data (`local`) and
//! entry/exit actions, each calling the scope's function or wrapper in `<x>_dispatch.rs`; and
//! `kind`, the chart state of a statig state. The
//! module that includes the file brings statig, `dispatch`, the machine's `Input`, its data
//! type and the state-local types into scope.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::dispatch::{locals, Dispatched};
use crate::model::Chart;
use crate::names::{doc, ident, one_line, snake, snake_ident};
use crate::{fail, Error};

/// The `#[state_machine]` impl of machine `m`.
pub(crate) fn machine(chart: &Chart, m: &Dispatched) -> Result<TokenStream, Error> {
    let data = ident(m.data);
    let locals = locals(chart);
    if locals.contains_key(chart.initial.as_str()) {
        return fail(
            m.file,
            "the initial state holds data: statig needs its value",
        );
    }
    let local_type = |scope: &str| locals.get(scope).map(|(t, _)| ident(t));
    let root = if m.unhandled {
        quote! {
            /// Root (generated): every event no state accepted ends here and is reported as
            /// unhandled.
            #[superstate]
            fn root(context: &mut #data, event: &Input<'_>) -> Outcome<State> {
                let _ = event;
                context.outbox.unhandled = true;
                Handled
            }
        }
    } else {
        quote! {
            /// Root (generated): an input no state accepts ends here (no row is recorded).
            #[superstate]
            fn root(context: &mut #data, event: &Input<'_>) -> Outcome<State> {
                let _ = (context, event);
                Handled
            }
        }
    };
    let scopes = chart
        .superstate
        .iter()
        .map(|s| (true, &s.name, &s.parent, &s.doc, &s.entry, &s.exit))
        .chain(
            chart
                .state
                .iter()
                .map(|s| (false, &s.name, &s.parent, &s.doc, &s.entry, &s.exit)),
        );
    let mut handlers = Vec::new();
    let mut actions = Vec::new();
    for (is_super, name, parent, scope_doc, entry, exit) in scopes {
        let f = snake_ident(name);
        let parent = snake(parent.as_deref().unwrap_or("root"));
        let mut attrs = vec![quote!(superstate = #parent)];
        let local = local_type(name);
        let (param, arg) = match &local {
            Some(t) => (quote!(local: &mut #t,), quote!(local,)),
            None => (quote!(), quote!()),
        };
        for (kind, hook, key) in [
            ("enter", entry, "entry_action"),
            ("exit", exit, "exit_action"),
        ] {
            let Some(action) = hook else { continue };
            let wrapper = format_ident!("{kind}_{f}");
            let w = wrapper.to_string();
            let key = ident(key);
            attrs.push(quote!(#key = #w));
            let d = doc(&format!("`{w}` (generated): `Actions::{action}`."));
            actions.push(quote! {
                #d
                #[action]
                fn #wrapper(context: &mut #data, #param) {
                    dispatch::#wrapper(context, #arg);
                }
            });
        }
        let kind = if is_super {
            quote!(superstate)
        } else {
            quote!(state)
        };
        let d = doc(&format!("`{name}` (generated): {}", one_line(scope_doc)));
        handlers.push(quote! {
            #d
            #[#kind(#(#attrs),*)]
            fn #f(context: &mut #data, #param event: &Input<'_>) -> Outcome<State> {
                dispatch::#f(context, #arg event)
            }
        });
    }
    let initial = format!("State::{}()", snake(&chart.initial));
    let derive: TokenStream = m
        .state_derive
        .parse()
        .or_else(|e| fail(m.file, format!("state_derive: {e}")))?;
    let machine = format_ident!("{}Machine", m.prefix);
    let st = format_ident!("{}State", m.prefix);
    let leaves: Vec<_> = chart.state.iter().map(|s| ident(&s.name)).collect();
    let chart_leaves = leaves.clone();
    Ok(quote! {
        /// The chart state of a statig state (generated).
        pub(crate) fn kind(state: &State) -> crate::chart::#st {
            match state {
                #(State::#leaves { .. } => crate::chart::#st::#chart_leaves,)*
            }
        }

        #[state_machine(
            initial = #initial,
            state(derive(#derive)),
            superstate(derive(Debug))
        )]
        impl #machine {
            #root
            #(#handlers)*
            #(#actions)*
        }
    })
}
