//! Generates the state, event, guard and row enums of the machines from `statecharts/*.toml`,
//! and the dispatch (which row an input takes) of every chart — the outer machine, the inner
//! process machine, each tool call's lifecycle and the session — so the charts and the code
//! share one source of truth (R-ARCH-3).

use std::fmt::Write as _;
use std::path::Path;

#[path = "src/chart/model.rs"]
#[allow(dead_code)]
mod model;

use model::{Chart, RowKindDef};

fn camel(id: &str) -> String {
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

/// `CamelCase` → `snake_case` (state names → statig's state constructors).
fn snake(name: &str) -> String {
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

fn doc(s: &str) -> String {
    s.replace('\n', " ")
}

/// `pub const ALL` listing `variants` of `ty`.
fn all_const(ty: &str, what: &str, variants: &[&str]) -> String {
    let list: Vec<String> = variants.iter().map(|v| format!("{ty}::{v}")).collect();
    format!(
        "    /// Every {what}, in chart order.\n    pub const ALL: &'static [{ty}] = &[{}];\n",
        list.join(", ")
    )
}

/// `pub fn name` mapping each variant to its chart name.
fn name_fn(ty: &str, what: &str, variants: &[&str]) -> String {
    let arms: Vec<String> = variants
        .iter()
        .map(|v| format!("{ty}::{v} => \"{v}\""))
        .collect();
    format!(
        "    /// The chart name of the {what}.\n    pub fn name(self) -> &'static str {{ match self {{ {} }} }}\n",
        arms.join(", ")
    )
}

/// `pub fn <name>(self) -> bool`, true for the `yes` variants.
fn flag_fn(name: &str, doc: &str, ty: &str, yes: &[&str]) -> String {
    let body = if yes.is_empty() {
        "let _ = self; false".to_string()
    } else {
        let arms: Vec<String> = yes.iter().map(|v| format!("{ty}::{v}")).collect();
        format!("matches!(self, {})", arms.join(" | "))
    };
    format!("    /// {doc}\n    pub fn {name}(self) -> bool {{ {body} }}\n")
}

fn generate(chart: &Chart, prefix: &str, out: &mut String) {
    let st = format!("{prefix}State");
    let ev = format!("{prefix}EventKind");
    let row = format!("{prefix}Row");
    let guard = format!("{prefix}Guard");
    let derive = "#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]";

    // States.
    writeln!(
        out,
        "/// Leaf states of the {} (generated from `statecharts/{}.toml`).",
        chart.title, chart.machine
    )
    .ok();
    writeln!(out, "{derive}").ok();
    writeln!(out, "pub enum {st} {{").ok();
    for s in &chart.state {
        let mut transitions: Vec<String> = Vec::new();
        let mut scopes = vec![s.name.clone()];
        scopes.extend(chart.ancestors(&s.name));
        for r in chart.row.iter().filter(|r| scopes.contains(&r.from)) {
            let g = r
                .guard
                .as_ref()
                .map(|g| format!(" [{g}]"))
                .unwrap_or_default();
            let to = if r.kind == RowKindDef::Transition {
                r.to.clone()
            } else {
                format!("({:?})", r.kind).to_lowercase()
            };
            transitions.push(format!("`{}{g} → {to}`", r.event));
        }
        writeln!(out, "    /// {}", doc(&s.doc)).ok();
        if !transitions.is_empty() {
            writeln!(out, "    ///\n    /// Rows: {}.", transitions.join(", ")).ok();
        }
        writeln!(out, "    {},", s.name).ok();
    }
    writeln!(out, "}}\n").ok();
    let states: Vec<&str> = chart.state.iter().map(|s| s.name.as_str()).collect();
    let terminal: Vec<&str> = chart
        .state
        .iter()
        .filter(|s| s.terminal)
        .map(|s| s.name.as_str())
        .collect();
    writeln!(out, "impl {st} {{").ok();
    out.push_str(&all_const(&st, "leaf state", &states));
    writeln!(out, "    /// The initial state.").ok();
    writeln!(
        out,
        "    pub const INITIAL: {st} = {st}::{};",
        chart.initial
    )
    .ok();
    out.push_str(&name_fn(&st, "state", &states));
    out.push_str(&flag_fn(
        "is_terminal",
        "Whether the state is terminal (absorbing).",
        &st,
        &terminal,
    ));
    writeln!(out, "    /// The enclosing superstates, innermost first.").ok();
    writeln!(
        out,
        "    pub fn ancestors(self) -> &'static [&'static str] {{ match self {{ {} }} }}",
        chart
            .state
            .iter()
            .map(|s| format!(
                "{st}::{} => &[{}]",
                s.name,
                chart
                    .ancestors(&s.name)
                    .iter()
                    .map(|a| format!("\"{a}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .collect::<Vec<_>>()
            .join(", ")
    )
    .ok();
    writeln!(
        out,
        "    /// Whether this state is `name` or lies inside superstate `name`."
    )
    .ok();
    writeln!(out, "    pub fn is_in(self, name: &str) -> bool {{ self.name() == name || self.ancestors().contains(&name) }}").ok();
    // The candidate rows of each (state, event), listed here from the chart rather than
    // searched for at run time: the oracle asks for them on every event (every streamed delta).
    let mut arms = Vec::new();
    for s in &chart.state {
        let mut scopes = vec![s.name.clone()];
        scopes.extend(chart.ancestors(&s.name));
        let mut events: Vec<&str> = Vec::new();
        for r in &chart.row {
            if scopes.contains(&r.from) && !events.contains(&r.event.as_str()) {
                events.push(&r.event);
            }
        }
        for e in events {
            let rows: Vec<String> = scopes
                .iter()
                .flat_map(|scope| {
                    chart
                        .row
                        .iter()
                        .filter(move |r| &r.from == scope && r.event == e)
                        .map(|r| format!("{row}::{}", camel(&r.id)))
                })
                .collect();
            arms.push(format!(
                "({st}::{}, {ev}::{e}) => &[{}]",
                s.name,
                rows.join(", ")
            ));
        }
    }
    writeln!(
        out,
        "    /// The rows this state may take for `event`, in the order the chart decides: the leaf\n    \
         /// state's rows first, then each enclosing superstate's (innermost first), each level in\n    \
         /// chart order. The first row whose guard holds is the one the machine must take.\n    \
         pub fn candidates(self, event: {ev}) -> &'static [{row}] {{ match (self, event) {{ {}, _ => &[] }} }}",
        arms.join(", ")
    )
    .ok();
    for sup in &chart.superstate {
        let inside: Vec<&str> = chart
            .state
            .iter()
            .filter(|s| chart.ancestors(&s.name).contains(&sup.name))
            .map(|s| s.name.as_str())
            .collect();
        out.push_str(&flag_fn(
            &format!("in_{}", snake(&sup.name)),
            &format!("Whether the state lies inside superstate `{}`.", sup.name),
            &st,
            &inside,
        ));
    }
    writeln!(out, "}}\n").ok();

    // Events.
    writeln!(out, "/// Event kinds of the {} (generated).", chart.title).ok();
    writeln!(out, "{derive}").ok();
    writeln!(out, "pub enum {ev} {{").ok();
    for e in &chart.event {
        writeln!(out, "    /// {}", doc(&e.doc)).ok();
        writeln!(out, "    {},", e.name).ok();
    }
    writeln!(out, "}}\n").ok();
    let events: Vec<&str> = chart.event.iter().map(|e| e.name.as_str()).collect();
    let internal: Vec<&str> = chart
        .event
        .iter()
        .filter(|e| e.internal)
        .map(|e| e.name.as_str())
        .collect();
    writeln!(out, "impl {ev} {{").ok();
    out.push_str(&all_const(&ev, "event kind", &events));
    out.push_str(&name_fn(&ev, "event", &events));
    out.push_str(&flag_fn(
        "is_internal",
        "Whether the facade feeds this event itself (run to completion).",
        &ev,
        &internal,
    ));
    writeln!(out, "}}\n").ok();

    // Guards.
    writeln!(
        out,
        "/// Named guards of the {} (generated): each is a pure predicate the machine and the \
         conformance oracle evaluate.",
        chart.title
    )
    .ok();
    writeln!(out, "{derive}").ok();
    writeln!(out, "pub enum {guard} {{").ok();
    for g in &chart.guard {
        writeln!(out, "    /// {}", doc(&g.doc)).ok();
        writeln!(out, "    {},", camel(&g.name)).ok();
    }
    writeln!(out, "}}\n").ok();
    let guards: Vec<String> = chart.guard.iter().map(|g| camel(&g.name)).collect();
    let guards: Vec<&str> = guards.iter().map(String::as_str).collect();
    writeln!(out, "impl {guard} {{").ok();
    out.push_str(&all_const(&guard, "guard", &guards));
    let arms: Vec<String> = chart
        .guard
        .iter()
        .map(|g| format!("{guard}::{} => \"{}\"", camel(&g.name), g.name))
        .collect();
    writeln!(
        out,
        "    /// The chart name of the guard.\n    pub fn name(self) -> &'static str {{ match self {{ {} }} }}",
        arms.join(", ")
    )
    .ok();
    writeln!(out, "}}\n").ok();

    // Rows.
    writeln!(
        out,
        "/// Rows of the {} (generated): the allowed transitions.",
        chart.title
    )
    .ok();
    writeln!(out, "{derive}").ok();
    writeln!(out, "pub enum {row} {{").ok();
    for r in &chart.row {
        let g = r
            .guard
            .as_ref()
            .map(|g| format!(" [{g}]"))
            .unwrap_or_default();
        writeln!(
            out,
            "    /// `{} --{}{g}--> {}` ({:?})",
            r.from, r.event, r.to, r.kind
        )
        .ok();
        writeln!(out, "    {},", camel(&r.id)).ok();
    }
    writeln!(out, "}}\n").ok();
    writeln!(out, "impl {row} {{").ok();
    let rows: Vec<String> = chart.row.iter().map(|r| camel(&r.id)).collect();
    let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
    out.push_str(&all_const(&row, "row", &rows));
    writeln!(out, "    /// The row as written in the chart.").ok();
    writeln!(
        out,
        "    pub fn spec(self) -> RowSpec<{ev}> {{ match self {{"
    )
    .ok();
    for r in &chart.row {
        let kind = match r.kind {
            RowKindDef::Transition => "RowKind::Transition",
            RowKindDef::Internal => "RowKind::Internal",
            RowKindDef::Ignored => "RowKind::Ignored",
        };
        let guard = r
            .guard
            .as_ref()
            .map(|g| format!("Some(\"{g}\")"))
            .unwrap_or_else(|| "None".into());
        writeln!(out, "        {row}::{} => RowSpec {{ id: \"{}\", from: \"{}\", event: {ev}::{}, guard: {guard}, to: \"{}\", kind: {kind} }},", camel(&r.id), r.id, r.from, r.event, r.to).ok();
    }
    writeln!(out, "    }} }}").ok();
    writeln!(out, "    /// The row's guard, if it has one.").ok();
    let arms: Vec<String> = chart
        .row
        .iter()
        .map(|r| match &r.guard {
            Some(g) => format!("{row}::{} => Some({guard}::{})", camel(&r.id), camel(g)),
            None => format!("{row}::{} => None", camel(&r.id)),
        })
        .collect();
    writeln!(
        out,
        "    pub fn guard(self) -> Option<{guard}> {{ match self {{ {} }} }}",
        arms.join(", ")
    )
    .ok();
    writeln!(
        out,
        "    /// The state a transition row leads to (`None` for an internal or ignored row)."
    )
    .ok();
    let arms: Vec<String> = chart
        .row
        .iter()
        .map(|r| match r.kind {
            RowKindDef::Transition => format!("{row}::{} => Some({st}::{})", camel(&r.id), r.to),
            _ => format!("{row}::{} => None", camel(&r.id)),
        })
        .collect();
    writeln!(
        out,
        "    pub fn target(self) -> Option<{st}> {{ match self {{ {} }} }}",
        arms.join(", ")
    )
    .ok();
    writeln!(
        out,
        "    /// The effects the row declares, typed (`None`: this chart's effects are still prose,\n    \
         /// not checked). See [`check_effects`] for the rule."
    )
    .ok();
    match typed_effects(chart) {
        Some(rows) => {
            let arms: Vec<String> = chart
                .row
                .iter()
                .zip(&rows)
                .map(|(r, effects)| {
                    let list: Vec<String> = effects
                        .iter()
                        .map(|(name, optional)| {
                            format!(
                                "DeclaredEffect {{ name: EffectName::{}, optional: {optional} }}",
                                effect_variant(name)
                            )
                        })
                        .collect();
                    format!("{row}::{} => Some(&[{}])", camel(&r.id), list.join(", "))
                })
                .collect();
            writeln!(
                out,
                "    pub fn effects(self) -> Option<&'static [DeclaredEffect]> {{ match self {{ {} }} }}",
                arms.join(", ")
            )
            .ok();
        }
        None => {
            writeln!(
                out,
                "    pub fn effects(self) -> Option<&'static [DeclaredEffect]> {{ let _ = self; None }}"
            )
            .ok();
        }
    }
    writeln!(out, "}}\n").ok();
}

/// The charts whose rows' `effects` are typed (every entry an effect name of the vocabulary,
/// see [`vocabulary`]); the others' are still prose.
const TYPED_EFFECTS: &[&str] = &["react", "process", "tool_call", "session"];

/// `persist:user_input` → `PersistUserInput`.
fn effect_variant(name: &str) -> String {
    camel(&name.replace(':', "_"))
}

/// The effect names a row may declare, derived from the code: each `Effect` variant
/// (`call_model`, `start_timer`, …), with `persist` / `commit_run_end` as `persist:<entry>` /
/// `commit_run_end` and `emit` as `emit:<event type>` (each `Entry` / `AgentEvent` variant,
/// snake_case like their serialized tags).
fn vocabulary() -> std::collections::BTreeSet<String> {
    let effect = enum_variants("src/vocab/effect.rs", "Effect");
    let entry = enum_variants("src/vocab/entry.rs", "Entry");
    let event = enum_variants("src/vocab/agent_event.rs", "AgentEvent");
    let mut out = std::collections::BTreeSet::new();
    for v in effect {
        match v.as_str() {
            "persist" => out.extend(entry.iter().map(|e| format!("persist:{e}"))),
            "emit" => out.extend(event.iter().map(|e| format!("emit:{e}"))),
            _ => {
                out.insert(v);
            }
        }
    }
    out
}

/// The effect names a session row may declare: each `SessionEffect` variant (`start_run`,
/// `forward`, `reply`, …), with `publish` as `publish:<event type>`.
fn session_vocabulary() -> std::collections::BTreeSet<String> {
    let effect = enum_variants("src/session_machine/mod.rs", "SessionEffect");
    let event = enum_variants("src/vocab/agent_event.rs", "AgentEvent");
    let mut out = std::collections::BTreeSet::new();
    for v in effect {
        if v == "publish" {
            out.extend(event.iter().map(|e| format!("publish:{e}")));
        } else {
            out.insert(v);
        }
    }
    out
}

/// The variants of `pub enum <name>` in `path`, snake_case.
fn enum_variants(path: &str, name: &str) -> Vec<String> {
    println!("cargo:rerun-if-changed={path}");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let open = format!("pub enum {name} {{");
    let mut lines = text.lines().skip_while(|l| l.trim_end() != open).skip(1);
    let mut out = Vec::new();
    for l in lines.by_ref() {
        if l == "}" {
            break;
        }
        let Some(rest) = l.strip_prefix("    ") else {
            continue;
        };
        if rest.starts_with(|c: char| c.is_ascii_uppercase()) {
            let id: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push(snake(&id));
        }
    }
    assert!(!out.is_empty(), "{path}: no variants of enum {name}");
    out
}

/// A typed chart's declared effects, row by row: `(name, optional)`; an entry ending in `?` is
/// optional. Fails the build on a name outside the [`vocabulary`]. `None` for a prose chart.
fn typed_effects(chart: &Chart) -> Option<Vec<Vec<(String, bool)>>> {
    if !TYPED_EFFECTS.contains(&chart.machine.as_str()) {
        return None;
    }
    let vocab = if chart.machine == "session" {
        session_vocabulary()
    } else {
        vocabulary()
    };
    let rows = chart
        .row
        .iter()
        .map(|r| {
            r.effects
                .iter()
                .map(|e| {
                    let (name, optional) = match e.strip_suffix('?') {
                        Some(n) => (n, true),
                        None => (e.as_str(), false),
                    };
                    if !vocab.contains(name) {
                        panic!(
                            "statecharts/{}.toml: row {} declares effect {e:?}, which is not an \
                             effect name (an Effect variant, persist:<entry>, emit:<event type>; \
                             for the session chart a SessionEffect variant or \
                             publish:<event type>; with ? when optional)",
                            chart.machine, r.id
                        );
                    }
                    if r.kind == RowKindDef::Ignored {
                        panic!(
                            "statecharts/{}.toml: ignored row {} declares effects",
                            chart.machine, r.id
                        );
                    }
                    (name.to_string(), optional)
                })
                .collect()
        })
        .collect();
    Some(rows)
}

/// The shared enum of the effect names the typed charts declare.
fn effect_enum(names: &std::collections::BTreeSet<String>) -> String {
    let derive = "#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]";
    let mut out = String::from(
        "/// The effect names the typed charts' rows declare (generated): an `Effect` variant, \
         `persist:<entry>` or `emit:<event type>`; for the session chart a `SessionEffect` \
         variant or `publish:<event type>`.\n",
    );
    writeln!(out, "{derive}\npub enum EffectName {{").ok();
    for n in names {
        writeln!(out, "    /// `{n}`.\n    {},", effect_variant(n)).ok();
    }
    writeln!(out, "}}\n\nimpl EffectName {{").ok();
    let variants: Vec<String> = names.iter().map(|n| effect_variant(n)).collect();
    let variants: Vec<&str> = variants.iter().map(String::as_str).collect();
    out.push_str(&all_const("EffectName", "effect name", &variants));
    let arms: Vec<String> = names
        .iter()
        .map(|n| format!("EffectName::{} => \"{n}\"", effect_variant(n)))
        .collect();
    writeln!(
        out,
        "    /// The name as the chart writes it.\n    pub fn name(self) -> &'static str {{ match self {{ {} }} }}\n}}\n",
        arms.join(", ")
    )
    .ok();
    out
}

/// The names of the top-level `pub`/`pub(crate)` functions of a hand-written module (the guards
/// or the actions).
fn declared_fns(path: &str) -> std::collections::BTreeSet<String> {
    println!("cargo:rerun-if-changed={path}");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    text.lines()
        .filter_map(|l| {
            ["pub(crate) fn ", "pub(super) fn ", "pub fn "]
                .iter()
                .find_map(|p| l.strip_prefix(p))
        })
        .filter_map(|rest| {
            rest.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .map(str::to_string)
        })
        .collect()
}

/// The parameter list of the `pub(crate) fn name(...)` in the source `text` (empty when
/// absent).
fn fn_params(text: &str, name: &str) -> String {
    let head = format!("pub(crate) fn {name}(");
    text.find(&head)
        .and_then(|i| {
            let rest = &text[i + head.len()..];
            rest.find(')').map(|j| rest[..j].to_string())
        })
        .unwrap_or_default()
}

/// Fails the build when the hand-written functions and the names the chart gives them differ.
fn same_names(
    toml: &str,
    what: &str,
    path: &str,
    chart: &std::collections::BTreeSet<String>,
    code: &std::collections::BTreeSet<String>,
) {
    let missing: Vec<&String> = chart.difference(code).collect();
    let extra: Vec<&String> = code.difference(chart).collect();
    if !missing.is_empty() || !extra.is_empty() {
        panic!(
            "statecharts/{toml}.toml and {path} disagree: {what} the chart names but {path} lacks: \
             {missing:?}; functions in {path} no row names: {extra:?}"
        );
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

/// The generated wrapper's prefix for an entry (`enter`) or exit (`exit`) action.
fn hook_prefix(kind: &str) -> &'static str {
    if kind == "entry" {
        "enter"
    } else {
        "exit"
    }
}

/// The statig `entry_action = "..."` / `exit_action = "..."` attributes of a machine.
fn machine_hooks(path: &str) -> std::collections::BTreeSet<String> {
    println!("cargo:rerun-if-changed={path}");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let mut out = std::collections::BTreeSet::new();
    for kind in ["entry_action = \"", "exit_action = \""] {
        for (i, _) in text.match_indices(kind) {
            let rest = &text[i + kind.len()..];
            if let Some(end) = rest.find('"') {
                out.insert(format!("{kind}{}\"", &rest[..end]));
            }
        }
    }
    out
}

/// A machine whose dispatch is generated: its chart, the generated enums' prefix, its data
/// type and the module (`src/<module>/`) that holds its `guards.rs`, `actions.rs` and the
/// `dispatch.rs` that includes the generated file. The dispatch module brings `guards`,
/// `actions`, `chart_event`, the machine's `Input` and statig's `State` into scope.
struct Dispatched {
    /// The chart's file stem (`statecharts/<file>.toml`, `OUT_DIR/<file>_dispatch.rs`).
    file: &'static str,
    /// The generated enums' prefix (`<prefix>Guard`, `<prefix>Row`, `<prefix>EventKind`).
    prefix: &'static str,
    /// The machine's data (statig context) type.
    data: &'static str,
    /// The module under `src/` that holds the hand-written guards and actions.
    module: &'static str,
}

/// The statig machines whose dispatch `build.rs` generates (the tool-call lifecycle's, whose
/// calls are slots of the inner machine, by [`call_dispatch`]).
const DISPATCHED: &[Dispatched] = &[
    Dispatched {
        file: "react",
        prefix: "React",
        data: "ReactData",
        module: "react",
    },
    Dispatched {
        file: "process",
        prefix: "Process",
        data: "ProcessData",
        module: "process",
    },
    Dispatched {
        file: "session",
        prefix: "Session",
        data: "SessionData",
        module: "session_machine",
    },
];

/// A machine's dispatch (`<file>_dispatch.rs`): for each state and superstate, one function
/// that tries the scope's rows for the input's chart event in chart order, calls the
/// hand-written guard (`guards::<guard>`) of each, and for the first that holds records the
/// row, calls its hand-written action (`actions::<row id>`, none for an ignored row) and
/// returns the row's outcome. Also the oracle's guard evaluation, `holds`.
fn dispatch(chart: &Chart, m: &Dispatched) -> String {
    use std::collections::BTreeSet;
    let (toml, prefix, data) = (m.file, m.prefix, m.data);
    let guards_rs = format!("src/{}/guards.rs", m.module);
    let actions_rs = format!("src/{}/actions.rs", m.module);
    let used: BTreeSet<String> = chart
        .row
        .iter()
        .filter_map(|r| r.guard.clone())
        .filter(|g| g != "otherwise")
        .collect();
    for g in &chart.guard {
        if g.name != "otherwise" && !used.contains(&g.name) {
            panic!(
                "statecharts/{toml}.toml: guard {} is declared but no row names it",
                g.name
            );
        }
    }
    same_names(toml, "guards", &guards_rs, &used, &declared_fns(&guards_rs));
    let mut acting: BTreeSet<String> = chart
        .row
        .iter()
        .filter(|r| r.kind != RowKindDef::Ignored)
        .map(|r| r.id.clone())
        .collect();
    // Entry and exit actions: (scope, "entry"/"exit", the action the chart names).
    let hooks = state_hooks(chart);
    acting.extend(hooks.iter().map(|(_, _, f)| f.clone()));
    same_names(
        toml,
        "row, entry and exit actions (every row but an ignored one; each state's entry/exit)",
        &actions_rs,
        &acting,
        &declared_fns(&actions_rs),
    );
    let machine_rs = format!("src/{}/machine.rs", m.module);
    let wired: BTreeSet<String> = hooks
        .iter()
        .map(|(scope, kind, _)| {
            format!("{kind}_action = \"{}_{}\"", hook_prefix(kind), snake(scope))
        })
        .collect();
    same_names(
        toml,
        "entry/exit attributes",
        &machine_rs,
        &wired,
        &machine_hooks(&machine_rs),
    );

    // State-local data (statig state-local storage): state → (type, starts at Default).
    let locals: std::collections::BTreeMap<&str, (&str, bool)> = chart
        .state
        .iter()
        .filter_map(|s| {
            s.local
                .as_deref()
                .map(|t| (s.name.as_str(), (t, s.local_default)))
        })
        .collect();
    // The guards that read a state's data (their predicate takes `&<local type>`), with the
    // states whose rows name them: every one of those states must hold data of that type.
    let mut guard_scopes: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let guards_text =
        std::fs::read_to_string(&guards_rs).unwrap_or_else(|e| panic!("reading {guards_rs}: {e}"));
    for g in &used {
        let params = fn_params(&guards_text, g);
        let Some(ty) = locals
            .values()
            .map(|l| l.0)
            .find(|t| params.contains(&format!("&{t}")))
        else {
            continue;
        };
        let mut scopes: Vec<String> = Vec::new();
        for r in chart
            .row
            .iter()
            .filter(|r| r.guard.as_deref() == Some(g.as_str()))
        {
            if locals.get(r.from.as_str()).map(|l| l.0) != Some(ty) {
                panic!(
                    "statecharts/{toml}.toml: guard {g} reads {ty}, but row {} is in {}, which \
                     does not hold one",
                    r.id, r.from
                );
            }
            if !scopes.contains(&r.from) {
                scopes.push(r.from.clone());
            }
        }
        guard_scopes.insert(g.clone(), scopes);
    }
    let mut out =
        format!("// @generated by build.rs from statecharts/{toml}.toml. Do not edit.\n\n");
    // With state-local data, the oracle's `holds` also takes the statig state (whose data the
    // guards that read it need).
    let oracle_args = if locals.is_empty() {
        OracleArgs {
            params: "input: &Input<'_>",
            pass: "input",
            guard_pass: "input",
            local_guards: &guard_scopes,
        }
    } else {
        OracleArgs {
            params: "sm: &State, input: &Input<'_>",
            pass: "sm, input",
            guard_pass: "input",
            local_guards: &guard_scopes,
        }
    };
    out.push_str(&oracle_fns(chart, prefix, data, "guards", &oracle_args));

    for (scope, kind, f) in &hooks {
        let (param, arg) = match locals.get(scope.as_str()) {
            Some((t, _)) => (format!(", local: &mut {t}"), ", local"),
            None => (String::new(), ""),
        };
        writeln!(
            out,
            "/// The {kind} action of `{scope}` (generated): `actions::{f}`.\n\
             pub(crate) fn {}_{}(data: &mut {data}{param}) {{\n    actions::{f}(data{arg});\n}}\n",
            hook_prefix(kind),
            snake(scope)
        )
        .ok();
    }

    let scopes: Vec<(&str, &str)> = chart
        .superstate
        .iter()
        .map(|s| (s.name.as_str(), s.doc.as_str()))
        .chain(
            chart
                .state
                .iter()
                .map(|s| (s.name.as_str(), s.doc.as_str())),
        )
        .collect();
    for (scope, sdoc) in scopes {
        let rows: Vec<_> = chart.row.iter().filter(|r| r.from == scope).collect();
        writeln!(
            out,
            "/// `{scope}` (generated): {}\n///\n/// Tries this scope's rows for the input's chart event, in chart order; `Super` when \
             none holds.",
            doc(sdoc)
        )
        .ok();
        let local = locals.get(scope);
        let local_param = match local {
            Some((t, _)) => format!("local: &mut {t}, "),
            None => String::new(),
        };
        writeln!(
            out,
            "pub(crate) fn {}(data: &mut {data}, {local_param}input: &Input<'_>) -> Outcome<State> {{",
            snake(scope)
        )
        .ok();
        if rows.is_empty() {
            let unused = if local.is_some() {
                "(data, local, input)"
            } else {
                "(data, input)"
            };
            writeln!(out, "    let _ = {unused};\n    Super\n}}\n").ok();
            continue;
        }
        let args = if local.is_some() {
            "data, local, input"
        } else {
            "data, input"
        };
        let mut events: Vec<&str> = Vec::new();
        for r in &rows {
            if !events.contains(&r.event.as_str()) {
                events.push(&r.event);
            }
        }
        writeln!(
            out,
            "    let Some(event) = chart_event(data, input) else {{ return Super; }};\n    match event {{"
        )
        .ok();
        for e in events {
            writeln!(out, "        {prefix}EventKind::{e} => {{").ok();
            let mut open = true;
            for r in rows.iter().filter(|r| r.event == e) {
                if !open {
                    panic!(
                        "statecharts/{toml}.toml: row {} is unreachable: an earlier row of {scope} \
                         for {e} has no guard (or `otherwise`)",
                        r.id
                    );
                }
                let guarded = r.guard.as_deref().filter(|g| *g != "otherwise");
                let indent = if guarded.is_some() {
                    "                "
                } else {
                    "            "
                };
                if let Some(g) = guarded {
                    let gargs = if guard_scopes.contains_key(g) {
                        "data, local, input"
                    } else {
                        "data, input"
                    };
                    writeln!(out, "            if guards::{g}({gargs}) {{").ok();
                }
                writeln!(out, "{indent}data.take({prefix}Row::{});", camel(&r.id)).ok();
                // The target's data: returned by the row's action, or its default.
                let target = (r.kind == RowKindDef::Transition)
                    .then(|| locals.get(r.to.as_str()))
                    .flatten();
                if r.kind != RowKindDef::Ignored {
                    let bind = if matches!(target, Some((_, false))) {
                        "let next = "
                    } else {
                        ""
                    };
                    writeln!(out, "{indent}{bind}actions::{}({args});", r.id).ok();
                }
                let outcome = match (r.kind, target) {
                    (RowKindDef::Transition, None) => format!("Transition(State::{} {{}})", r.to),
                    (RowKindDef::Transition, Some((_, false))) => {
                        format!("Transition(State::{} {{ local: next }})", r.to)
                    }
                    (RowKindDef::Transition, Some((_, true))) => {
                        format!(
                            "Transition(State::{} {{ local: Default::default() }})",
                            r.to
                        )
                    }
                    (RowKindDef::Internal | RowKindDef::Ignored, _) => "Handled".to_string(),
                };
                if guarded.is_some() {
                    writeln!(out, "{indent}return {outcome};\n            }}").ok();
                } else {
                    writeln!(out, "{indent}{outcome}").ok();
                    open = false;
                }
            }
            if open {
                writeln!(out, "            Super").ok();
            }
            writeln!(out, "        }}").ok();
        }
        writeln!(out, "        _ => Super,\n    }}\n}}\n").ok();
    }
    out
}

/// The tool-call lifecycle's dispatch (`tool_call_dispatch.rs`). A call is a slot of the inner
/// machine's data, not a statig machine, so the dispatch is three functions: `select` tries the
/// rows of the slot's state and its superstates (innermost first) for the event, in chart
/// order, calling each row's guard in `call_guards` (`(data, slot, facts)`), and returns the
/// first whose guard holds; `act` runs the row's action in `call_actions`; `holds` and
/// `expected` are the oracle's. The build fails when the guards or the actions and the chart's
/// names differ.
fn call_dispatch(chart: &Chart) -> String {
    use std::collections::BTreeSet;
    let guards_rs = "src/process/call_guards.rs";
    let actions_rs = "src/process/call_actions.rs";
    let used: BTreeSet<String> = chart
        .row
        .iter()
        .filter_map(|r| r.guard.clone())
        .filter(|g| g != "otherwise")
        .collect();
    same_names(
        "tool_call",
        "guards",
        guards_rs,
        &used,
        &declared_fns(guards_rs),
    );
    let acting: BTreeSet<String> = chart
        .row
        .iter()
        .filter(|r| r.kind != RowKindDef::Ignored)
        .map(|r| r.id.clone())
        .collect();
    same_names(
        "tool_call",
        "row actions (every row but an ignored one)",
        actions_rs,
        &acting,
        &declared_fns(actions_rs),
    );
    let args = "data: &ProcessData, i: usize, facts: &Facts<'_>";
    let mut out =
        String::from("// @generated by build.rs from statecharts/tool_call.toml. Do not edit.\n\n");
    out.push_str(&oracle_fns(
        chart,
        "ToolCall",
        "ProcessData",
        "call_guards",
        &OracleArgs {
            params: "i: usize, facts: &Facts<'_>",
            pass: "i, facts",
            guard_pass: "i, facts",
            local_guards: &Default::default(),
        },
    ));
    let scopes: Vec<&str> = chart
        .superstate
        .iter()
        .map(|s| s.name.as_str())
        .chain(chart.state.iter().map(|s| s.name.as_str()))
        .collect();
    for scope in &scopes {
        let rows: Vec<_> = chart.row.iter().filter(|r| r.from == *scope).collect();
        writeln!(
            out,
            "/// The rows of `{scope}` for `event`, in chart order: the first whose guard holds \
             (generated).\n\
             fn scope_{}(event: ToolCallEventKind, {args}) -> Option<ToolCallRow> {{",
            snake(scope)
        )
        .ok();
        if rows.is_empty() {
            writeln!(out, "    let _ = (event, data, i, facts);\n    None\n}}\n").ok();
            continue;
        }
        writeln!(out, "    let _ = (data, i, facts);\n    match event {{").ok();
        let mut events: Vec<&str> = Vec::new();
        for r in &rows {
            if !events.contains(&r.event.as_str()) {
                events.push(&r.event);
            }
        }
        for e in events {
            writeln!(out, "        ToolCallEventKind::{e} => {{").ok();
            let mut open = true;
            for r in rows.iter().filter(|r| r.event == e) {
                if !open {
                    panic!(
                        "statecharts/tool_call.toml: row {} is unreachable: an earlier row of \
                         {scope} for {e} has no guard (or `otherwise`)",
                        r.id
                    );
                }
                match r.guard.as_deref().filter(|g| *g != "otherwise") {
                    Some(g) => {
                        writeln!(
                            out,
                            "            if call_guards::{g}(data, i, facts) {{ return Some(ToolCallRow::{}); }}",
                            camel(&r.id)
                        )
                        .ok();
                    }
                    None => {
                        writeln!(out, "            Some(ToolCallRow::{})", camel(&r.id)).ok();
                        open = false;
                    }
                }
            }
            if open {
                writeln!(out, "            None").ok();
            }
            writeln!(out, "        }}").ok();
        }
        writeln!(out, "        _ => None,\n    }}\n}}\n").ok();
    }
    writeln!(
        out,
        "/// The row slot `i` takes for `event` (generated): its state's rows, then each enclosing\n\
         /// superstate's, innermost first; `None` when no row holds.\n\
         pub(crate) fn select(event: ToolCallEventKind, {args}) -> Option<ToolCallRow> {{\n    \
         match data.tools.slots.get(i).state() {{"
    )
    .ok();
    for s in &chart.state {
        let mut chain = vec![format!("scope_{}(event, data, i, facts)", snake(&s.name))];
        for a in chart.ancestors(&s.name) {
            chain.push(format!(
                ".or_else(|| scope_{}(event, data, i, facts))",
                snake(&a)
            ));
        }
        writeln!(
            out,
            "        ToolCallState::{} => {},",
            s.name,
            chain.join("")
        )
        .ok();
    }
    writeln!(out, "    }}\n}}\n").ok();
    writeln!(
        out,
        "/// Runs row `row`'s action for slot `i`, which was in `from` (generated).\n\
         pub(crate) fn act(row: ToolCallRow, data: &mut ProcessData, i: usize, from: ToolCallState, facts: &Facts<'_>) {{\n    \
         match row {{"
    )
    .ok();
    for r in &chart.row {
        if r.kind == RowKindDef::Ignored {
            writeln!(
                out,
                "        ToolCallRow::{} => {{ let _ = (data, i, from, facts); }}",
                camel(&r.id)
            )
            .ok();
        } else {
            writeln!(
                out,
                "        ToolCallRow::{} => call_actions::{}(data, i, from, facts),",
                camel(&r.id),
                r.id
            )
            .ok();
        }
    }
    writeln!(out, "    }}\n}}").ok();
    out
}

/// The arguments the oracle's functions take after the data: `params` (the signature of
/// `holds` and `expected`), `pass` (what `expected` hands `holds`), `guard_pass` (what
/// `holds` hands a guard), and the guards that read a state's own data with the states
/// that hold it (`holds` takes those from the statig state).
struct OracleArgs<'a> {
    params: &'a str,
    pass: &'a str,
    guard_pass: &'a str,
    local_guards: &'a std::collections::BTreeMap<String, Vec<String>>,
}

/// The oracle's functions for a chart: `holds` (evaluates a guard by calling its predicate in
/// module `guards`, with the data and `params` after it) and `expected` (see [`expected_fn`]).
fn oracle_fns(chart: &Chart, prefix: &str, data: &str, guards: &str, args: &OracleArgs) -> String {
    let OracleArgs {
        params,
        pass,
        guard_pass,
        local_guards,
    } = args;
    let mut out = format!(
        "/// Evaluates guard `g` by calling its predicate in `{guards}` (generated): the same \
         predicates the dispatch calls.\n\
         pub(crate) fn holds(g: {prefix}Guard, data: &{data}, {params}) -> bool {{\n    match g {{\n"
    );
    for g in &chart.guard {
        if g.name == "otherwise" {
            writeln!(out, "        {prefix}Guard::Otherwise => true,").ok();
        } else if let Some(scopes) = local_guards.get(&g.name) {
            // A guard reading a state's data holds only in the states that have it.
            let arms: String = scopes
                .iter()
                .map(|s| {
                    format!(
                        "State::{s} {{ local }} => {guards}::{}(data, local, input), ",
                        g.name
                    )
                })
                .collect();
            writeln!(
                out,
                "        {prefix}Guard::{} => match sm {{ {arms}_ => false }},",
                camel(&g.name)
            )
            .ok();
        } else {
            writeln!(
                out,
                "        {prefix}Guard::{} => {guards}::{}(data, {guard_pass}),",
                camel(&g.name),
                g.name
            )
            .ok();
        }
    }
    writeln!(out, "    }}\n}}\n").ok();
    out.push_str(&expected_fn(prefix, data, params, pass));
    out
}

/// The oracle's `expected` (generated for every chart): the row the chart prescribes in a
/// state for an event (the first candidate whose guard holds, by the generated `holds`,
/// evaluated before the machine moves) and two rows whose guards both held without the chart
/// saying which wins. `args`/`pass` are the guards' arguments after the data.
fn expected_fn(prefix: &str, data: &str, args: &str, pass: &str) -> String {
    format!(
        "/// The oracle (generated): the row the chart prescribes for the event `kind` in `state`, \
         the first\n/// candidate (leaf state first, then its superstates) whose guard holds, \
         evaluated before the\n/// machine moves, and two rows whose guards both held without \
         the chart saying which wins\n/// (see [`crate::chart::oracle`]).\n\
         pub(crate) fn expected(\n    state: {prefix}State,\n    kind: {prefix}EventKind,\n    \
         data: &{data},\n    {args},\n) -> (Option<{prefix}Row>, Option<(&'static str, &'static str)>) {{\n    \
         crate::chart::oracle(\n        crate::chart::MachineKind::{prefix},\n        \
         state.candidates(kind),\n        {prefix}Row::spec,\n        {prefix}Row::guard,\n        \
         |g| holds(g, data, {pass}),\n    )\n}}\n\n"
    )
}

fn main() {
    let mut out =
        String::from("// @generated by build.rs from statecharts/*.toml. Do not edit.\n\n");
    let mut effect_names = std::collections::BTreeSet::new();
    for (file, prefix) in [
        ("react", "React"),
        ("process", "Process"),
        ("tool_call", "ToolCall"),
        ("session", "Session"),
    ] {
        let path = Path::new("statecharts").join(format!("{file}.toml"));
        println!("cargo:rerun-if-changed={}", path.display());
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let chart =
            Chart::parse(&text).unwrap_or_else(|e| panic!("invalid chart {}: {e}", path.display()));
        generate(&chart, prefix, &mut out);
        for effects in typed_effects(&chart).into_iter().flatten() {
            effect_names.extend(effects.into_iter().map(|(name, _)| name));
        }
        if file == "tool_call" {
            let dest = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR"))
                .join("tool_call_dispatch.rs");
            std::fs::write(&dest, call_dispatch(&chart))
                .unwrap_or_else(|e| panic!("writing the tool_call dispatch: {e}"));
        }
        if let Some(m) = DISPATCHED.iter().find(|m| m.file == file) {
            let dest = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR"))
                .join(format!("{file}_dispatch.rs"));
            std::fs::write(&dest, dispatch(&chart, m))
                .unwrap_or_else(|e| panic!("writing the {file} dispatch: {e}"));
        }
    }
    out.push_str(&effect_enum(&effect_names));
    println!("cargo:rerun-if-changed=src/chart/model.rs");
    let dest = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("charts.rs");
    std::fs::write(&dest, out).expect("writing generated charts");
}
