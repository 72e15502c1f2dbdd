//! The effect names rows declare (`effects = [...]` in a chart; `?` marks an optional one):
//! the shared `EffectName` enum (`effect_name.rs`), and for each name a pattern of the variant
//! it stands for, so that a name the vocabulary lacks fails to compile in the core instead of
//! being checked against its source text.

use std::collections::BTreeSet;

use proc_macro2::TokenStream;
use quote::quote;

use crate::model::{Chart, RowKindDef};
use crate::names::{camel_ident, doc};
use crate::{fail, ChartFile, Error};

/// `persist:user_input` → `PersistUserInput`.
pub(crate) fn variant(name: &str) -> syn::Ident {
    camel_ident(&name.replace(':', "_"))
}

/// A chart's declared effects, row by row: `(name, optional)`. Fails on an ignored row that
/// declares effects, or on a name that is not `word` or `word:word` in snake_case.
pub(crate) fn declared(chart: &Chart, c: &ChartFile) -> Result<Vec<Vec<(String, bool)>>, Error> {
    let mut rows = Vec::new();
    for r in &chart.row {
        let mut list = Vec::new();
        for e in &r.effects {
            let (name, optional) = match e.strip_suffix('?') {
                Some(n) => (n, true),
                None => (e.as_str(), false),
            };
            let well_formed = !name.is_empty()
                && name.split(':').count() <= 2
                && name.split(':').all(|p| {
                    !p.is_empty() && p.chars().all(|ch| ch.is_ascii_lowercase() || ch == '_')
                });
            if !well_formed {
                return fail(
                    c.file,
                    format!(
                        "row {} declares effect {e:?}, which is not an effect name (an Effect \
                         variant, persist:<entry>, emit:<event type>; for the session chart a \
                         SessionEffect variant or publish:<event type>; with ? when optional)",
                        r.id
                    ),
                );
            }
            if r.kind == RowKindDef::Ignored {
                return fail(c.file, format!("ignored row {} declares effects", r.id));
            }
            list.push((name.to_string(), optional));
        }
        rows.push(list);
    }
    Ok(rows)
}

/// The effect names of every chart, and which vocabulary each is checked against.
#[derive(Default)]
pub(crate) struct Names {
    /// Every name, sorted.
    all: BTreeSet<String>,
    /// The names the run's charts declare (`Effect` variants).
    run: BTreeSet<String>,
    /// The names the session chart declares (`SessionEffect` variants).
    session: BTreeSet<String>,
}

impl Names {
    /// Adds the names chart `c` declares.
    pub(crate) fn add(&mut self, chart: &Chart, c: &ChartFile) -> Result<(), Error> {
        for (name, _) in declared(chart, c)?.into_iter().flatten() {
            self.all.insert(name.clone());
            if c.file == "session" {
                self.session.insert(name);
            } else {
                self.run.insert(name);
            }
        }
        Ok(())
    }

    /// `effect_name.rs`: the enum, and the patterns that tie each name to its variant.
    pub(crate) fn tokens(&self) -> TokenStream {
        let derive = crate::enums::derives();
        let ty = syn::Ident::new("EffectName", proc_macro2::Span::call_site());
        let names: Vec<&String> = self.all.iter().collect();
        let variants: Vec<syn::Ident> = names.iter().map(|n| variant(n)).collect();
        let docs = names.iter().map(|n| doc(&format!("`{n}`.")));
        let all = crate::enums::all_const(&ty, "effect name", &variants);
        let run = self.run.iter().map(|n| run_pattern(n));
        let session = self.session.iter().map(|n| session_pattern(n));
        let head = doc(
            "The effect names the typed charts' rows declare (generated): an `Effect` variant, \
             `persist:<entry>` or `emit:<event type>`; for the session chart a `SessionEffect` \
             variant or `publish:<event type>`.",
        );
        quote! {
            #head
            #derive
            pub enum EffectName { #(#docs #variants,)* }

            impl EffectName {
                #all
                /// The name as the chart writes it.
                pub fn name(self) -> &'static str {
                    match self { #(EffectName::#variants => #names,)* }
                }
            }

            /// Each name the run's charts declare, as the `Effect` it stands for (generated): a
            /// name that is no `Effect` variant, `persist:<Entry variant>` or
            /// `emit:<AgentEvent variant>` does not compile.
            // A variant's pattern is written `{ .. }` whatever its kind (the chart does not say).
            #[allow(clippy::unneeded_struct_pattern, clippy::match_like_matches_macro)]
            const _: fn(&crate::effect::Effect) -> bool = |effect| {
                use crate::agent_event::AgentEvent;
                use crate::effect::Effect;
                use crate::entry::Entry;
                match effect {
                    #(#run)|* => true,
                    _ => false,
                }
            };

            /// Each name the session chart declares, as the `SessionEffect` it stands for
            /// (generated): a name that is no `SessionEffect` variant or
            /// `publish:<AgentEvent variant>` does not compile.
            #[allow(clippy::unneeded_struct_pattern, clippy::match_like_matches_macro)]
            const _: fn(&crate::session_machine::SessionEffect) -> bool = |effect| {
                use crate::agent_event::AgentEvent;
                use crate::session_machine::SessionEffect;
                match effect {
                    #(#session)|* => true,
                    _ => false,
                }
            };
        }
    }
}

/// The pattern of `Effect` a run chart's effect name stands for.
fn run_pattern(name: &str) -> TokenStream {
    match name.split_once(':') {
        Some(("persist", entry)) => {
            let v = camel_ident(entry);
            quote!(Effect::Persist { entry: Entry::#v { .. } })
        }
        Some(("emit", event)) => {
            let v = camel_ident(event);
            quote!(Effect::Emit { event: AgentEvent::#v { .. } })
        }
        _ => {
            // `call_model` → `Effect::CallModel`; an unknown `kind:name` becomes a variant
            // that does not exist, and the core fails to compile naming it.
            let v = variant(name);
            quote!(Effect::#v { .. })
        }
    }
}

/// The pattern of `SessionEffect` a session chart's effect name stands for.
fn session_pattern(name: &str) -> TokenStream {
    match name.split_once(':') {
        Some(("publish", event)) => {
            let v = camel_ident(event);
            quote!(SessionEffect::Publish(AgentEvent::#v { .. }))
        }
        _ => {
            let v = camel_ident(&name.replace(':', "_"));
            quote!(SessionEffect::#v { .. })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_the_variants_they_stand_for() {
        assert_eq!(
            variant("persist:user_input").to_string(),
            "PersistUserInput"
        );
        assert_eq!(
            run_pattern("persist:tool_result").to_string(),
            quote!(Effect::Persist {
                entry: Entry::ToolResult { .. }
            })
            .to_string()
        );
        assert_eq!(
            run_pattern("call_model").to_string(),
            quote!(Effect::CallModel { .. }).to_string()
        );
        assert_eq!(
            session_pattern("publish:prompt_queued").to_string(),
            quote!(SessionEffect::Publish(AgentEvent::PromptQueued { .. })).to_string()
        );
    }
}
