//! Tool rules (R-TOOL-3): per call, by tool name and an argument pattern, whether
//! the call runs (`allow`), waits for a human (`ask`) or gets a denied result without running
//! (`deny`), and how long it may run — OpenCode's permission rules
//! (`"bash": {"git *": "allow", "rm *": "deny", "*": "ask"}`) as an ordered list.
//!
//! Rules are evaluated in order and **the last rule that matches decides** (OpenCode's
//! `findLast`), so a general rule comes first and its exceptions after it. A call no rule
//! matches falls back to the step's per-tool [`approval`](crate::process::StepConfig::approval)
//! map and [`tool_timeout_ms`](crate::process::StepConfig::tool_timeout_ms), which is what
//! every configuration without rules (and every trace recorded before rules existed) does.
//!
//! The rules live in the step configuration, which a trace's header records, so a replay
//! takes the same decisions; the tool-call chart takes them as rows (`commit_denied_by_rule`,
//! `commit_approval`, `commit_queued`, and their `restore_*` twins) and the inner machine
//! emits `tool_rule_matched {rule, action, timeout_ms}` for each call a rule decided.
//!
//! Matching is pure and linear: at most one pass over the rules (from the last), each looking
//! at the tool name and at most one argument value with the [`wildcard`](mod@crate::wildcard)
//! matcher, which never backtracks. Each rule compiles its patterns once, on its first match
//! (a clone shares them), and each argument a rule names is read from the call once per call,
//! however many rules name it. A rule set is bounded ([`validate_rules`]: at most
//! [`MAX_TOOL_RULES`] rules of at most [`MAX_PATTERN_CHARS`] characters per pattern and
//! [`MAX_RULES_PATTERN_CHARS`] in all), and a trace header's rules are checked when the trace
//! is read, so deciding a call costs at most [`MAX_TOOL_RULES`] passes over the argument values
//! and memory linear in the patterns; a pattern without a middle (`git *`, `*.rs`) does not
//! even read the argument past its own length (see [`wildcard`](mod@crate::wildcard)).
//!
//! A pattern matches the whole value: `git *` allows `git status; rm -rf ~` too. A shell tool
//! is only as safe as its deny rules, which should follow the allow rules they restrict.
//!
//! ```
//! use agentloop_core::tool_rules::{RuleAction, ToolRule};
//! use agentloop_core::ToolCall;
//! let rules = [
//!     ToolRule::ask("bash"),
//!     ToolRule::allow("bash").argument("command", "git *"),
//!     ToolRule::deny("bash").argument("command", "git push *"),
//! ];
//! let call = |cmd: &str| ToolCall {
//!     id: "c1".into(),
//!     name: "bash".into(),
//!     arguments: serde_json::json!({ "command": cmd }),
//!     invalid_arguments: None,
//! };
//! let decide = |cmd: &str| agentloop_core::tool_rules::last_match(&rules, &call(cmd));
//! assert_eq!(decide("ls"), Some(0));
//! assert_eq!(decide("git status"), Some(1));
//! assert_eq!(decide("git push -f"), Some(2));
//! // The command-line form of a rule.
//! let rule: ToolRule = "deny@30s:bash:command=rm *".parse().unwrap();
//! assert_eq!(rule, ToolRule::deny("bash").argument("command", "rm *").timeout_ms(30_000));
//! assert_eq!(rule.action(), RuleAction::Deny);
//! assert_eq!(rule.to_string(), "deny@30s:bash:command=rm *");
//! ```

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::ToolCall;
/// Re-exported from [`tool_check`](crate::tool_check), where the verdicts on a call before it
/// runs live (the `tool_rule_matched` event names it): `tool_rules::RuleAction` keeps naming it.
pub use crate::tool_check::RuleAction;
use crate::wildcard::{self, Glob, MAX_PATTERN_CHARS};

/// Most rules a configuration may carry ([`validate_rules`]).
pub const MAX_TOOL_RULES: usize = 1024;

/// Most pattern characters (tool and argument patterns) all the rules of a configuration may
/// carry together ([`validate_rules`]), so their compiled form stays small.
pub const MAX_RULES_PATTERN_CHARS: usize = 64 * 1024;

/// Which argument a rule looks at, and the pattern its value must match.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArgumentPattern {
    /// The argument: a top-level name (`command`), a JSON Pointer (`/options/0`, RFC 6901),
    /// or `""` for all the arguments as compact JSON. A call without it does not match.
    pub field: String,
    /// The [`wildcard`] pattern the value must match: a string value as it is, any other
    /// value as compact JSON (`2`, `true`, `{"a":1}`).
    pub pattern: String,
}

impl ArgumentPattern {
    /// The value of this argument in `arguments`, as text (see [`ArgumentPattern::field`]).
    pub fn value<'a>(&self, arguments: &'a Value) -> Option<Cow<'a, str>> {
        let value = if self.field.is_empty() {
            arguments
        } else if self.field.starts_with('/') {
            arguments.pointer(&self.field)?
        } else {
            arguments.get(&self.field)?
        };
        Some(match value {
            Value::String(s) => Cow::Borrowed(s.as_str()),
            other => Cow::Owned(other.to_string()),
        })
    }

    /// Whether `arguments` has the argument and its value matches the pattern.
    pub fn matches(&self, arguments: &Value) -> bool {
        self.value(arguments)
            .is_some_and(|v| wildcard::matches(&self.pattern, &v))
    }
}

/// One rule: which calls it matches (tool name pattern, optional argument pattern) and what
/// it decides for them (action, optional deadline). See the [module](self) doc.
///
/// Build one with [`ToolRule::allow`] / [`ask`](ToolRule::ask) / [`deny`](ToolRule::deny)
/// and the builder methods ([`argument`](ToolRule::argument),
/// [`timeout_ms`](ToolRule::timeout_ms), [`reason`](ToolRule::reason)), from its command-line
/// form ([`FromStr`]) or from JSON (`{"tool", "action", "argument": {"field", "pattern"},
/// "timeout_ms", "reason"}`). Its fields are private, so its compiled patterns (kept with it,
/// not serialized, not compared) are always those of its text.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolRule {
    /// The [`wildcard`] pattern the tool's name must match (`*` for every tool).
    tool: String,
    /// The argument pattern the call must also match (`None`: every call of the tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) argument: Option<ArgumentPattern>,
    /// What happens to a call this rule decides.
    pub(crate) action: RuleAction,
    /// The deadline of a call this rule decides, once it runs (the tool-call chart's
    /// `deadline` row); `None`: the step's `tool_timeout_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) timeout_ms: Option<u64>,
    /// For `deny`: why, in the denied result the model reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// The patterns, compiled on the first match.
    #[serde(skip)]
    #[schemars(skip)]
    compiled: Compiled,
}

impl fmt::Debug for ToolRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRule")
            .field("tool", &self.tool)
            .field("argument", &self.argument)
            .field("action", &self.action)
            .field("timeout_ms", &self.timeout_ms)
            .field("reason", &self.reason)
            .finish()
    }
}

/// A rule's compiled patterns, made once and shared by its clones. Equal to any other (a
/// cache, not part of the rule).
#[derive(Clone, Default)]
struct Compiled(Arc<OnceLock<CompiledRule>>);

impl PartialEq for Compiled {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Compiled {}

/// The compiled patterns. A rule's patterns cannot change once it is built (its fields are
/// private; [`ToolRule::argument`] drops the compiled ones), so they are compiled once.
struct CompiledRule {
    tool: Glob,
    argument: Option<Glob>,
}

impl CompiledRule {
    fn new(rule: &ToolRule) -> Self {
        CompiledRule {
            tool: Glob::new(&rule.tool),
            argument: rule.argument.as_ref().map(|a| Glob::new(&a.pattern)),
        }
    }
}

impl ToolRule {
    fn new(tool: impl Into<String>, action: RuleAction) -> Self {
        ToolRule {
            tool: tool.into(),
            argument: None,
            action,
            timeout_ms: None,
            reason: None,
            compiled: Compiled::default(),
        }
    }

    /// Allows the calls of the tools `tool` matches.
    pub fn allow(tool: impl Into<String>) -> Self {
        Self::new(tool, RuleAction::Allow)
    }

    /// Asks a human about the calls of the tools `tool` matches.
    pub fn ask(tool: impl Into<String>) -> Self {
        Self::new(tool, RuleAction::Ask)
    }

    /// Denies the calls of the tools `tool` matches.
    pub fn deny(tool: impl Into<String>) -> Self {
        Self::new(tool, RuleAction::Deny)
    }

    /// Only calls whose argument `field` matches `pattern` (see [`ArgumentPattern`]): `field`
    /// is a top-level name (`command`), a JSON Pointer (`/options/0`) or `""` for all the
    /// arguments; `pattern` is a [`wildcard`] pattern, matched against a string value as it is
    /// and any other value as compact JSON. A call without the argument does not match.
    pub fn argument(mut self, field: impl Into<String>, pattern: impl Into<String>) -> Self {
        self.argument = Some(ArgumentPattern {
            field: field.into(),
            pattern: pattern.into(),
        });
        self.compiled = Compiled::default();
        self
    }

    /// The deadline of the calls this rule decides.
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = Some(ms);
        self
    }

    /// Why calls are denied (shown to the model).
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// The [`wildcard`] pattern the tool's name must match.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// What happens to a call this rule decides.
    pub fn action(&self) -> RuleAction {
        self.action
    }

    /// The argument the call must also match, as `(field, pattern)` (`None`: every call of the
    /// tool).
    pub fn argument_pattern(&self) -> Option<(&str, &str)> {
        self.argument
            .as_ref()
            .map(|a| (a.field.as_str(), a.pattern.as_str()))
    }

    /// The deadline of a call this rule decides, in milliseconds (`None`: the step's tool
    /// timeout).
    pub fn deadline_ms(&self) -> Option<u64> {
        self.timeout_ms
    }

    /// For a `deny` rule: why, as the denied result tells the model.
    pub fn denial_reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// Whether the rule matches `call`: its name, and its argument if the rule names one.
    pub fn matches(&self, call: &ToolCall) -> bool {
        self.matches_with(call, &mut Values::default())
    }

    /// [`ToolRule::matches`], reading argument values through `values` (shared by the rules
    /// looking at one call).
    fn matches_with<'r, 'a>(&'r self, call: &'a ToolCall, values: &mut Values<'r, 'a>) -> bool {
        let compiled = self.compiled.0.get_or_init(|| CompiledRule::new(self));
        if !compiled.tool.matches(&call.name) {
            return false;
        }
        match (&self.argument, &compiled.argument) {
            (Some(a), Some(glob)) => {
                let value = values
                    .0
                    .entry(a.field.as_str())
                    .or_insert_with(|| a.value(&call.arguments));
                value.as_deref().is_some_and(|v| glob.matches(v))
            }
            _ => true,
        }
    }

    /// Checks what a rule must satisfy: a tool pattern, patterns of at most
    /// [`MAX_PATTERN_CHARS`] characters.
    pub fn validate(&self) -> Result<(), RuleError> {
        if self.tool.is_empty() {
            return Err(RuleError::EmptyTool);
        }
        let long = |p: &str| p.chars().count() > MAX_PATTERN_CHARS;
        if long(&self.tool) || self.argument.as_ref().is_some_and(|a| long(&a.pattern)) {
            return Err(RuleError::PatternTooLong);
        }
        Ok(())
    }

    /// The denied result's text for a call rule `index` denied.
    pub fn denial(&self, index: usize) -> String {
        let why = self
            .reason
            .as_deref()
            .unwrap_or("the agent's tool rules do not allow this call");
        format!("denied by rule {index} ({self}): {why}")
    }
}

/// The argument values of one call the rules looked at, by field: each read (and, for a
/// non-string or `""`, serialized) once per call.
#[derive(Default)]
struct Values<'r, 'a>(BTreeMap<&'r str, Option<Cow<'a, str>>>);

/// The index of the rule that decides `call`: the last one that matches (`None`: none does).
/// Looks at the rules from the last one and stops at the first match; each argument a rule
/// names is read once.
pub fn last_match(rules: &[ToolRule], call: &ToolCall) -> Option<usize> {
    let mut values = Values::default();
    rules
        .iter()
        .rposition(|r| r.matches_with(call, &mut values))
}

/// Checks a rule set: each rule ([`ToolRule::validate`]), at most [`MAX_TOOL_RULES`] of them
/// and at most [`MAX_RULES_PATTERN_CHARS`] pattern characters in all. A trace's header is
/// checked with it when the trace is read.
pub fn validate_rules(rules: &[ToolRule]) -> Result<(), RulesError> {
    let whole = |error| RulesError { rule: None, error };
    if rules.len() > MAX_TOOL_RULES {
        return Err(whole(RuleError::TooManyRules { count: rules.len() }));
    }
    let mut chars = 0usize;
    for (i, r) in rules.iter().enumerate() {
        r.validate().map_err(|error| RulesError {
            rule: Some(i),
            error,
        })?;
        chars +=
            r.tool.chars().count() + r.argument.as_ref().map_or(0, |a| a.pattern.chars().count());
    }
    if chars > MAX_RULES_PATTERN_CHARS {
        return Err(whole(RuleError::PatternsTooLong { chars }));
    }
    Ok(())
}

/// Why a rule set was refused ([`validate_rules`]): which rule, if one, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{error}", .rule.map(|i| format!("rule {i}: ")).unwrap_or_default())]
pub struct RulesError {
    /// The offending rule's index (`None`: the set as a whole).
    pub rule: Option<usize>,
    /// What is wrong.
    pub error: RuleError,
}

/// Why a rule was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuleError {
    /// The command-line form is wrong.
    #[error("{0} (expected ACTION[@TIMEOUT]:TOOL[:FIELD=PATTERN], e.g. `deny:bash:command=rm *` or `allow@600s:bash:command=cargo *`)")]
    Syntax(String),
    /// The tool pattern is empty.
    #[error("the tool pattern is empty (`*` matches every tool)")]
    EmptyTool,
    /// A pattern is longer than [`MAX_PATTERN_CHARS`].
    #[error("a pattern is longer than {MAX_PATTERN_CHARS} characters")]
    PatternTooLong,
    /// More rules than [`MAX_TOOL_RULES`].
    #[error("{count} tool rules, more than {MAX_TOOL_RULES}")]
    TooManyRules {
        /// How many there are.
        count: usize,
    },
    /// The patterns of all the rules are longer than [`MAX_RULES_PATTERN_CHARS`] together.
    #[error(
        "the tool rules' patterns have {chars} characters, more than {MAX_RULES_PATTERN_CHARS}"
    )]
    PatternsTooLong {
        /// How many they have.
        chars: usize,
    },
}

/// The command-line form: `ACTION[@TIMEOUT]:TOOL[:FIELD=PATTERN]`, where ACTION is `allow`,
/// `ask` or `deny`, TIMEOUT is a whole number of `ms` or `s`, TOOL a pattern without `:`, FIELD
/// an argument name or JSON Pointer (empty: all the arguments) and PATTERN anything up to the
/// end. A rule with a `reason` needs the JSON form.
impl FromStr for ToolRule {
    type Err = RuleError;

    fn from_str(spec: &str) -> Result<Self, RuleError> {
        let syntax = |m: &str| RuleError::Syntax(format!("{spec:?}: {m}"));
        let (head, rest) = spec
            .split_once(':')
            .ok_or_else(|| syntax("no `:` after the action"))?;
        let (action, timeout) = match head.split_once('@') {
            Some((a, t)) => (a, Some(t)),
            None => (head, None),
        };
        let action = [RuleAction::Allow, RuleAction::Ask, RuleAction::Deny]
            .into_iter()
            .find(|a| a.as_str() == action)
            .ok_or_else(|| syntax(&format!("unknown action {action:?} (allow, ask, deny)")))?;
        let timeout_ms = timeout
            .map(|t| {
                parse_duration_ms(t)
                    .ok_or_else(|| syntax(&format!("bad timeout {t:?} (e.g. 500ms, 30s)")))
            })
            .transpose()?;
        let (tool, argument) = rest
            .split_once(':')
            .map_or((rest, None), |(t, a)| (t, Some(a)));
        let mut rule = ToolRule::new(tool, action);
        if let Some(arg) = argument {
            let (field, pattern) = arg
                .split_once('=')
                .ok_or_else(|| syntax("no `=` between the argument and its pattern"))?;
            rule = rule.argument(field, pattern);
        }
        rule.timeout_ms = timeout_ms;
        rule.validate()?;
        Ok(rule)
    }
}

/// `500ms` or `30s` in milliseconds.
fn parse_duration_ms(t: &str) -> Option<u64> {
    if let Some(ms) = t.strip_suffix("ms") {
        return ms.parse().ok();
    }
    t.strip_suffix('s')?.parse::<u64>().ok()?.checked_mul(1000)
}

/// The command-line form (without the reason).
impl fmt::Display for ToolRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.action.as_str())?;
        match self.timeout_ms {
            Some(ms) if ms % 1000 == 0 && ms > 0 => write!(f, "@{}s", ms / 1000)?,
            Some(ms) => write!(f, "@{ms}ms")?,
            None => {}
        }
        write!(f, ":{}", self.tool)?;
        if let Some(a) = &self.argument {
            write!(f, ":{}={}", a.field, a.pattern)?;
        }
        Ok(())
    }
}

/// What decides one call: the rule (if one matched), its action and the call's deadline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallPolicy {
    /// The index of the deciding rule (`None`: no rule matched; the per-tool approval map
    /// decided).
    pub rule: Option<usize>,
    /// Run, ask or deny.
    pub action: RuleAction,
    /// The call's deadline once it runs (`None`: none).
    pub timeout_ms: Option<u64>,
    /// The deciding rule looks at the arguments: approving another call of the tool "always"
    /// does not cover this one (the session's approver may still, by command family).
    pub by_argument: bool,
}

/// Programs that run another command given in their arguments (`sudo rm`, `sh -c "…"`,
/// `xargs rm`): their family is the whole command, since the program name says nothing about
/// what runs.
const LAUNCHERS: &[&str] = &[
    "bash", "busybox", "command", "dash", "doas", "env", "eval", "exec", "fish", "ksh", "nice",
    "nohup", "sh", "ssh", "su", "sudo", "time", "timeout", "watch", "xargs", "zsh",
];

/// The command family of a call (R-CTL-4): what "approve always" trusts for the rest of the
/// run or session. For a shell-like call (arguments with a string `command` or `cmd`) it is the
/// program the command runs, without its directory (`git` for `git push -f` and
/// `/usr/bin/git status`); for any other call, the tool name.
///
/// A command that is not one plain program invocation is its own family, so "always" covers
/// only that exact command: one that chains, pipes, substitutes or redirects (`;`, `&`, `|`,
/// `` ` ``, `$(`, `<`, `>`, a line break), starts with an environment assignment
/// (`FOO=1 rm …`), or runs a launcher (`sudo`, `sh -c`, `env`, `xargs`, …). So approving
/// `git status` always never approves `git status; rm -rf ~`.
///
/// ```
/// use agentloop_core::tool_rules::command_family;
/// use agentloop_core::ToolCall;
/// let shell = |command: &str| ToolCall {
///     id: "c1".into(),
///     name: "shell".into(),
///     arguments: serde_json::json!({ "command": command }),
///     invalid_arguments: None,
/// };
/// assert_eq!(command_family(&shell("git status -s")), "git");
/// assert_eq!(command_family(&shell("rm -rf x")), "rm");
/// assert_eq!(command_family(&shell("git status; rm -rf x")), "git status; rm -rf x");
/// assert_eq!(command_family(&shell("sudo rm -rf x")), "sudo rm -rf x");
/// ```
pub fn command_family(call: &ToolCall) -> String {
    shell_family(call).unwrap_or_else(|| call.name.clone())
}

/// The family of a shell-like call's command; `None` for a call without one.
fn shell_family(call: &ToolCall) -> Option<String> {
    let command = ["command", "cmd"]
        .iter()
        .find_map(|k| call.arguments.get(*k).and_then(Value::as_str))?
        .trim();
    let first = command.split_whitespace().next()?;
    let program = first.rsplit('/').next().unwrap_or(first);
    let compound = command.contains([';', '&', '|', '`', '<', '>', '\n', '\r'])
        || command.contains("$(")
        || first.contains('=')
        || LAUNCHERS.contains(&program);
    Some(if compound || program.is_empty() {
        command.to_string()
    } else {
        program.to_string()
    })
}

/// What "approve always" whitelists for `call` (R-CTL-4), as one key: the tool name for a
/// call without a command, `<tool> <family>` for a shell-like one (see [`command_family`]).
/// The run's machine and the session's approver both key their whitelists so: approving
/// `git status` always on tool `shell` covers `shell git`, never `shell rm`.
pub fn approval_scope(call: &ToolCall) -> String {
    match shell_family(call) {
        Some(family) => format!("{} {family}", call.name),
        None => call.name.clone(),
    }
}
