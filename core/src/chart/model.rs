//! The statechart file format (`statecharts/*.toml`), shared by the generator
//! (`agentloop-codegen`) and the library.
//!
//! This file is compiled twice: by `codegen/` (to generate `core/src/generated/`)
//! and by the crate (to render diagrams). It must only use `serde` and `std`.

use serde::Deserialize;

/// One machine's chart.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chart {
    /// Machine name (`react`, `process`).
    pub machine: String,
    /// Human title.
    pub title: String,
    /// The initial leaf state.
    pub initial: String,
    /// Superstates (composite states).
    #[serde(default)]
    pub superstate: Vec<SuperstateDef>,
    /// Leaf states.
    pub state: Vec<StateDef>,
    /// Events.
    pub event: Vec<EventDef>,
    /// Named guards.
    #[serde(default)]
    pub guard: Vec<GuardDef>,
    /// Transition rows.
    pub row: Vec<RowDef>,
}

/// A composite state.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuperstateDef {
    /// Name.
    pub name: String,
    /// Enclosing superstate.
    #[serde(default)]
    pub parent: Option<String>,
    /// What it means.
    pub doc: String,
    /// Entry action: a function of the machine's `actions.rs` run on entering this state
    /// (after the row's action, after the exit actions), named here so that the chart, not a
    /// handler, says what entering the state does.
    #[serde(default)]
    pub entry: Option<String>,
    /// Exit action: a function of the machine's `actions.rs` run on leaving this state.
    #[serde(default)]
    pub exit: Option<String>,
}

/// A leaf state.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateDef {
    /// Name.
    pub name: String,
    /// Enclosing superstate.
    #[serde(default)]
    pub parent: Option<String>,
    /// Whether the state is terminal (absorbing).
    #[serde(default)]
    pub terminal: bool,
    /// What it means.
    pub doc: String,
    /// Entry action: a function of the machine's `actions.rs` run on entering this state
    /// (after the row's action, after the exit actions), named here so that the chart, not a
    /// handler, says what entering the state does.
    #[serde(default)]
    pub entry: Option<String>,
    /// Exit action: a function of the machine's `actions.rs` run on leaving this state.
    #[serde(default)]
    pub exit: Option<String>,
    /// The state's own data (statig state-local storage): a type of the machine's module,
    /// held by the state while it is active (`State::<Name> { local }`) and handed to its
    /// guards that take it (`&Type` in their signature), its rows' actions and its entry
    /// action. The action of a row that enters the state returns it, unless `local_default`.
    #[serde(default)]
    pub local: Option<String>,
    /// Entering the state starts its data at `Default::default()` (the entering row's action
    /// returns nothing).
    #[serde(default)]
    pub local_default: bool,
}

/// An event kind.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventDef {
    /// Name.
    pub name: String,
    /// Internal events are fed by the facade (run to completion), never by the runtime.
    #[serde(default)]
    pub internal: bool,
    /// The runtime input it stands for: a pattern on `Event` (`Event::Abort { .. }`), from
    /// which the generated `route()` classifies inputs. Absent for an event the machine feeds
    /// itself (an internal event, a step's `Begin`).
    #[serde(default)]
    pub input: Option<String>,
    /// What it means.
    pub doc: String,
}

/// A named guard.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardDef {
    /// Name.
    pub name: String,
    /// The condition, in words.
    pub doc: String,
}

/// How a row treats the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RowKindDef {
    /// Exit and entry run; the state changes (or re-enters).
    #[default]
    Transition,
    /// Handled in place; the state stays.
    Internal,
    /// Accepted and deliberately ignored; the state stays and nothing happens.
    Ignored,
}

/// One row: `from --event [guard]--> to / effects`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowDef {
    /// Unique id (snake_case); becomes a `Row` enum variant.
    pub id: String,
    /// Source state or superstate.
    pub from: String,
    /// Event name.
    pub event: String,
    /// Guard name, if any.
    #[serde(default)]
    pub guard: Option<String>,
    /// Target state (for internal/ignored rows, the state stays as it is).
    pub to: String,
    /// Row kind.
    #[serde(default)]
    pub kind: RowKindDef,
    /// Effects: in a typed chart (react, process), effect names (`call_model`, `persist:tool_started`,
    /// `emit:run_start`, `…?` when optional) that the dispatch checks against what the row's
    /// action and the entry/exit actions it runs produced; elsewhere still words.
    #[serde(default)]
    pub effects: Vec<String>,
    /// What the row does, in words, where the effect names do not say it all.
    #[serde(default)]
    pub note: Option<String>,
    /// Later rows (same event, tried after this one in some state) whose guards may hold
    /// together with this row's: the overlap is intended and this row wins it. The oracle
    /// fails on two guards that hold at once unless the earlier row names the later one here.
    #[serde(default)]
    pub wins_over: Vec<String>,
    /// Why this row wins the overlaps it declares in `wins_over` (required with it).
    #[serde(default)]
    pub why: Option<String>,
    /// The action the row calls, when rows that act alike share one (default: the row's id).
    #[serde(default)]
    pub action: Option<String>,
}

impl RowDef {
    /// The name of the action the row calls: its `action`, or its id.
    pub fn action(&self) -> &str {
        self.action.as_deref().unwrap_or(&self.id)
    }
}

impl Chart {
    /// Parses and validates a chart.
    pub fn parse(text: &str) -> Result<Chart, String> {
        let chart: Chart = toml::from_str(text).map_err(|e| e.to_string())?;
        chart.validate()?;
        Ok(chart)
    }

    fn is_superstate(&self, name: &str) -> bool {
        self.superstate.iter().any(|s| s.name == name)
    }

    fn is_state(&self, name: &str) -> bool {
        self.state.iter().any(|s| s.name == name)
    }

    /// The enclosing superstates of `name`, innermost first.
    pub fn ancestors(&self, name: &str) -> Vec<String> {
        // The parent of a state or superstate (names are unique across both).
        let parent_of = |name: &str| {
            let states = self.state.iter().map(|s| (&s.name, &s.parent));
            let superstates = self.superstate.iter().map(|s| (&s.name, &s.parent));
            let mut all = states.chain(superstates);
            all.find(|(n, _)| *n == name).and_then(|(_, p)| p.clone())
        };
        let mut out = Vec::new();
        let mut parent = parent_of(name);
        while let Some(p) = parent {
            if out.contains(&p) {
                break;
            }
            parent = parent_of(&p);
            out.push(p);
        }
        out
    }

    /// The intended overlaps the chart declares: `(winner, loser)` row ids, one per entry of a
    /// row's `wins_over`.
    pub fn declared_wins(&self) -> Vec<(String, String)> {
        self.row
            .iter()
            .flat_map(|r| r.wins_over.iter().map(move |l| (r.id.clone(), l.clone())))
            .collect()
    }

    /// Whether, in some state, row `winner` is tried before row `loser` (same event; same
    /// scope and earlier in the file, or `loser` in a superstate enclosing `winner`'s scope).
    fn tried_before(&self, winner: &RowDef, loser: &RowDef) -> bool {
        if winner.event != loser.event {
            return false;
        }
        if winner.from == loser.from {
            let pos = |id: &str| self.row.iter().position(|r| r.id == id);
            return pos(&winner.id) < pos(&loser.id);
        }
        self.ancestors(&winner.from).contains(&loser.from)
    }

    /// Checks that every name a row uses is declared, ids are unique, and the chart is consistent.
    pub fn validate(&self) -> Result<(), String> {
        // Fails with the message, prefixed by the machine's name.
        macro_rules! fail {
            ($($arg:tt)*) => {
                return Err(format!("{}: {}", self.machine, format_args!($($arg)*)))
            };
        }
        let states = self.state.iter().map(|s| ("state", &s.name, &s.parent));
        let superstates = self
            .superstate
            .iter()
            .map(|s| ("superstate", &s.name, &s.parent));
        let mut names = std::collections::BTreeSet::new();
        for (_, n, _) in states.clone().chain(superstates.clone()) {
            if !names.insert(n.clone()) {
                fail!("state name {n} declared twice");
            }
        }
        if !self.is_state(&self.initial) {
            fail!("initial state {} is not a leaf state", self.initial);
        }
        for (kind, name, parent) in states.chain(superstates) {
            if let Some(p) = parent.as_ref().filter(|p| !self.is_superstate(p)) {
                fail!("{kind} {name} has unknown parent {p}");
            }
        }
        let mut ids = std::collections::BTreeSet::new();
        for r in &self.row {
            let id = &r.id;
            if !ids.insert(id.clone()) {
                fail!("row id {id} used twice");
            }
            if !names.contains(&r.from) {
                fail!("row {id} from unknown state {}", r.from);
            }
            if !names.contains(&r.to) {
                fail!("row {id} to unknown state {}", r.to);
            }
            if r.kind == RowKindDef::Transition && !self.is_state(&r.to) {
                fail!("row {id} transitions to superstate {}", r.to);
            }
            if r.kind != RowKindDef::Transition && r.to != r.from {
                fail!("internal/ignored row {id} must have to == from");
            }
            if !self.event.iter().any(|e| e.name == r.event) {
                fail!("row {id} uses unknown event {}", r.event);
            }
            if let Some(g) = &r.guard {
                if !self.guard.iter().any(|d| &d.name == g) {
                    fail!("row {id} uses unknown guard {g}");
                }
            }
            for l in &r.wins_over {
                let Some(loser) = self.row.iter().find(|x| &x.id == l) else {
                    fail!("row {id} wins over unknown row {l}");
                };
                if !self.tried_before(r, loser) {
                    fail!(
                        "row {id} wins over {l}, which is not a later row for the same event in \
                         its state (the winner of an overlap is the row tried first)"
                    );
                }
            }
            match (&r.why, r.wins_over.is_empty()) {
                (None, false) => fail!("row {id} declares wins_over without a why"),
                (Some(_), true) => fail!("row {id} gives a why but wins over no row"),
                _ => {}
            }
            if self.state.iter().any(|s| {
                s.terminal && (s.name == r.from || self.ancestors(&s.name).contains(&r.from))
            }) {
                fail!("row {id} leaves a terminal state");
            }
        }
        for g in &self.guard {
            if !self.row.iter().any(|r| r.guard.as_ref() == Some(&g.name)) {
                fail!("guard {} is used by no row", g.name);
            }
        }
        for e in &self.event {
            if !self.row.iter().any(|r| r.event == e.name) {
                fail!("event {} is used by no row", e.name);
            }
        }
        Ok(())
    }
}
