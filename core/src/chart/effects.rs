//! Typed effects: the names a row declares in its chart's `effects` (generated as
//! [`EffectName`](crate::chart::EffectName) and each row's `effects()`), the name of an
//! [`Effect`] a machine produced, and the check that the two agree.
//!
//! The rule ([`check_effects`]): every declared effect without `?` was produced at least once
//! by the row's action and the entry/exit actions its transition ran; every effect those
//! produced has its name declared (with or without `?`). How often an effect appears is not
//! checked. Effects the inner machine produced while the row ran (an `inner Begin`) are its
//! own rows', and the `state_changed` the facade inserts belongs to no row.

use crate::chart::{EffectName, MachineKind};
use crate::effect::Effect;
use crate::entry::Entry;

/// One effect a row declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeclaredEffect {
    /// Its name.
    pub name: EffectName,
    /// Declared with `?`: the row may produce it (a condition of the row's data decides).
    pub optional: bool,
}

/// The effect's name in the charts' vocabulary: the `Effect` variant (`call_model`,
/// `cancel_timer`, …), `persist:<entry>` for a persisted entry, `emit:<event type>` for an
/// emitted event.
pub fn effect_name(effect: &Effect) -> String {
    let name = match effect {
        Effect::GenerateTitle { .. } => "generate_title",
        Effect::Persist { entry } => return format!("persist:{}", entry_name(entry)),
        Effect::CommitRunEnd { .. } => "commit_run_end",
        Effect::CallModel { .. } => "call_model",
        Effect::CancelModel { .. } => "cancel_model",
        Effect::StartTimer { .. } => "start_timer",
        Effect::CancelTimer { .. } => "cancel_timer",
        Effect::RunTool { .. } => "run_tool",
        Effect::KillTool { .. } => "kill_tool",
        Effect::GateTool { .. } => "gate_tool",
        Effect::AskUser { .. } => "ask_user",
        Effect::RequestApproval { .. } => "request_approval",
        Effect::WithdrawApproval { .. } => "withdraw_approval",
        Effect::Compact { .. } => "compact",
        Effect::Emit { event } => return format!("emit:{}", event.type_name()),
    };
    name.to_string()
}

/// An entry's kind, snake_case (its serialized `entry` tag).
fn entry_name(entry: &Entry) -> &'static str {
    match entry {
        Entry::Metadata { .. } => "metadata",
        Entry::UserInput { .. } => "user_input",
        Entry::Assistant { .. } => "assistant",
        Entry::ToolStarted { .. } => "tool_started",
        Entry::ToolResult { .. } => "tool_result",
        Entry::Compaction { .. } => "compaction",
        Entry::RunEnd { .. } => "run_end",
        Entry::Title { .. } => "title",
        Entry::Repair { .. } => "repair",
    }
}

/// The verdict on one row's effects (see the module docs for the rule).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectCheck {
    /// Which machine.
    pub machine: MachineKind,
    /// The row taken, by chart id.
    pub row: &'static str,
    /// Declared without `?` but not produced.
    pub missing: Vec<EffectName>,
    /// Produced but not declared (by name).
    pub undeclared: Vec<String>,
}

impl EffectCheck {
    /// Whether the row produced what it declares and nothing else.
    pub fn holds(&self) -> bool {
        self.missing.is_empty() && self.undeclared.is_empty()
    }
}

impl std::fmt::Display for EffectCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} row {}: effects declared but not produced: {:?}; produced but not declared: {:?}",
            self.machine,
            self.row,
            self.missing.iter().map(|n| n.name()).collect::<Vec<_>>(),
            self.undeclared
        )
    }
}

/// Checks the effects a row produced (`produced`, by [`effect_name`]) against those it
/// declares: every declared effect without `?` appears, and every produced one is declared.
pub fn check_effects(
    machine: MachineKind,
    row: &'static str,
    declared: &[DeclaredEffect],
    produced: &[String],
) -> EffectCheck {
    let missing = declared
        .iter()
        .filter(|d| !d.optional && !produced.iter().any(|p| p == d.name.name()))
        .map(|d| d.name)
        .collect();
    let mut undeclared: Vec<String> = Vec::new();
    for p in produced {
        if !declared.iter().any(|d| d.name.name() == p) && !undeclared.contains(p) {
            undeclared.push(p.clone());
        }
    }
    EffectCheck {
        machine,
        row,
        missing,
        undeclared,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent_event::AgentEvent;
    use crate::chart::ReactRow;

    fn names(effects: &[Effect]) -> Vec<String> {
        effects.iter().map(effect_name).collect()
    }

    /// An action that emits an effect its row does not declare is reported, and so is a
    /// declared (non-optional) effect it left out; an optional one may be absent.
    #[test]
    fn undeclared_and_missing_effects_are_reported() {
        let row = ReactRow::CompactingDone;
        let declared = row.effects().expect("react's effects are typed");
        let done = [
            Effect::Persist {
                entry: Entry::Compaction {
                    run_id: "r".into(),
                    removed: 1,
                    messages: vec![],
                },
            },
            Effect::Emit {
                event: AgentEvent::CompactEnd { removed: 1 },
            },
        ];
        let check = |declared: &[DeclaredEffect], effects: &[Effect]| {
            check_effects(MachineKind::React, row.spec().id, declared, &names(effects))
        };
        let ok = check(declared, &done);
        assert!(ok.holds(), "{ok}");
        let mut extra = done.to_vec();
        extra.push(Effect::CancelTimer { timer_id: 1 });
        let bad = check(declared, &extra);
        assert!(!bad.holds());
        assert_eq!(bad.undeclared, ["cancel_timer"]);
        let short = check(declared, &done[..1]);
        assert_eq!(short.missing, [EffectName::EmitCompactEnd]);
        // A declared list edited to drop an effect: what the action still produces is reported.
        let fewer: Vec<DeclaredEffect> = declared
            .iter()
            .copied()
            .filter(|d| d.name != EffectName::EmitCompactEnd)
            .collect();
        let mutated = check(&fewer, &done);
        assert_eq!(mutated.undeclared, ["emit:compact_end"]);
        // Optional: may be absent, may appear.
        let optional: Vec<DeclaredEffect> = declared
            .iter()
            .map(|d| DeclaredEffect {
                optional: true,
                ..*d
            })
            .collect();
        assert!(check_effects(MachineKind::React, "x", &optional, &[]).holds());
    }

    /// Every row of the typed react chart declares its effects; the vocabulary's names
    /// round-trip through [`effect_name`]'s spelling.
    #[test]
    fn react_rows_declare_typed_effects() {
        for r in ReactRow::ALL {
            assert!(r.effects().is_some(), "{r:?}");
        }
        assert!(EffectName::ALL.iter().all(|n| n
            .name()
            .chars()
            .all(|c| c.is_ascii_lowercase() || c == '_' || c == ':')));
    }
}
