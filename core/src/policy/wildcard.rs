//! Wildcard patterns for tool rules (R-TOOL-3), with OpenCode's permission semantics:
//! `*` matches any run of characters (none included, `/` and newlines included), `?` exactly
//! one character, every other character itself (there is no escape), and a pattern that ends
//! in `" *"` also matches the text without that tail (`git *` matches `git` as well as
//! `git push`). Matching is case-sensitive and anchored at both ends.
//!
//! The matcher never backtracks, and looks at as little of the text as it can. A compiled
//! [`Pattern`] splits into the tokens before its first `*` (checked against the start of the
//! text), the tokens after its last `*` (checked against the end) and the middle between them.
//! A pattern without a middle (`git *`, `*.rs`, `*`, `ls`) costs time in its own length only,
//! whatever the text's length. A middle of plain characters and `*`s (`*password*`,
//! `*a*b*`) is found greedily, each run of characters at its leftmost place after the last
//! (a substring search; one pass over the text). Any other middle runs as a nondeterministic
//! automaton whose states (one per token) are the bits of a bitset, advanced once per text
//! character (the shift-and technique of Baeza-Yates and Gonnet, with `*` as a self-loop),
//! stopping as soon as the middle has matched: each character costs a binary search among the
//! middle's distinct characters and ⌈(m+1)/64⌉ word operations for a middle of m tokens.
//! So a pattern costs time linear in the text it looks at, whatever the pattern
//! (`*a*a*a*a*b` against a megabyte of `a`s is one pass), and memory for the pattern alone.
//!
//! ```
//! use agentloop_core::wildcard::matches;
//! assert!(matches("git *", "git push -f"));
//! assert!(matches("git *", "git"));
//! assert!(!matches("git *", "gitk"));
//! assert!(matches("*.rs", "src/lib.rs"));
//! assert!(matches("ca?", "cat") && !matches("ca?", "ca"));
//! ```

/// Longest pattern (in characters) a [`ToolRule`](crate::tool_rules::ToolRule) may carry, so
/// the masks of one stay small (at most 1,024 × 17 words); [`Pattern`] itself takes any length.
pub const MAX_PATTERN_CHARS: usize = 1024;

/// Whether `text` matches `pattern` as a whole (see the module doc for the syntax). Compiles
/// the pattern; to match one pattern against many texts, compile it once with [`Glob::new`].
pub fn matches(pattern: &str, text: &str) -> bool {
    Glob::new(pattern).matches(text)
}

/// A compiled pattern with OpenCode's `" *"` tail rule: what [`matches()`] does, compiled once.
#[derive(Clone, Debug)]
pub struct Glob {
    /// The whole pattern.
    full: Pattern,
    /// For a pattern ending in `" *"`: the pattern without that tail.
    head: Option<Pattern>,
}

impl Glob {
    /// Compiles `pattern` (time and memory linear in its length, but for a sort of its
    /// characters).
    pub fn new(pattern: &str) -> Self {
        Glob {
            full: Pattern::new(pattern),
            head: pattern.strip_suffix(" *").map(Pattern::new),
        }
    }

    /// Whether `text` matches (see [`matches()`]).
    pub fn matches(&self, text: &str) -> bool {
        self.head.as_ref().is_some_and(|h| h.matches(text)) || self.full.matches(text)
    }
}

/// One pattern token (runs of `*` are collapsed into one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    /// `*`.
    Star,
    /// `?`.
    Any,
    /// Any other character.
    Literal(char),
}

impl Token {
    fn accepts(self, c: char) -> bool {
        match self {
            Token::Star | Token::Any => true,
            Token::Literal(l) => l == c,
        }
    }

    /// The character of a literal.
    fn literal(self) -> Option<char> {
        match self {
            Token::Literal(c) => Some(c),
            _ => None,
        }
    }
}

/// A compiled pattern (without the `" *"` tail rule of [`matches()`]; see [`Glob`]).
#[derive(Clone, Debug)]
pub struct Pattern {
    /// The pattern has no wildcard: plain equality with this text.
    exact: Option<String>,
    /// The tokens before the first `*` (all of them when there is none).
    prefix: Vec<Token>,
    /// The tokens after the last `*`, last first (`None`: the pattern has no `*`).
    suffix: Option<Vec<Token>>,
    /// What must match between the prefix and the suffix, when more than `*`.
    middle: Option<Middle>,
}

/// The part of a pattern between its first and last `*`, which has something else in it.
#[derive(Clone, Debug)]
enum Middle {
    /// Runs of plain characters separated by `*`: found greedily, leftmost first.
    Literals(Vec<String>),
    /// Anything else (a `?` in it): the automaton of `*middle*`, and the longest run of plain
    /// characters in it, which the text must contain (a substring search before the automaton).
    Automaton(Automaton, String),
}

impl Pattern {
    /// Compiles `pattern`: time and memory linear in its length, but for a sort of its
    /// characters, plus a mask per distinct character of the middle (see the module doc).
    pub fn new(pattern: &str) -> Self {
        let mut tokens = Vec::with_capacity(pattern.len());
        for c in pattern.chars() {
            let t = match c {
                '*' => Token::Star,
                '?' => Token::Any,
                c => Token::Literal(c),
            };
            if !(t == Token::Star && tokens.last() == Some(&Token::Star)) {
                tokens.push(t);
            }
        }
        let exact = tokens
            .iter()
            .all(|t| matches!(t, Token::Literal(_)))
            .then(|| pattern.to_string());
        let Some(first) = tokens.iter().position(|t| *t == Token::Star) else {
            return Pattern {
                prefix: if exact.is_some() { Vec::new() } else { tokens },
                exact,
                suffix: None,
                middle: None,
            };
        };
        let last = tokens
            .iter()
            .rposition(|t| *t == Token::Star)
            .unwrap_or(first);
        let inner = &tokens[first..=last];
        let middle = if inner.len() <= 1 {
            None
        } else if inner.iter().all(|t| *t != Token::Any) {
            let runs = inner
                .split(|t| *t == Token::Star)
                .filter(|run| !run.is_empty())
                .map(|run| run.iter().filter_map(|t| t.literal()).collect())
                .collect();
            Some(Middle::Literals(runs))
        } else {
            let longest = inner
                .split(|t| matches!(t, Token::Star | Token::Any))
                .max_by_key(|run| run.len())
                .unwrap_or_default()
                .iter()
                .filter_map(|t| t.literal())
                .collect();
            Some(Middle::Automaton(Automaton::new(inner), longest))
        };
        Pattern {
            exact: None,
            prefix: tokens[..first].to_vec(),
            suffix: Some(tokens[last + 1..].iter().rev().copied().collect()),
            middle,
        }
    }

    /// Whether `text` matches the whole pattern (without the `" *"` tail rule of
    /// [`matches()`]). At most one pass over `text`, never backtracking.
    pub fn matches(&self, text: &str) -> bool {
        if let Some(exact) = &self.exact {
            return exact == text;
        }
        // The prefix against the start of the text.
        let mut chars = text.char_indices();
        for t in &self.prefix {
            match chars.next() {
                Some((_, c)) if t.accepts(c) => {}
                _ => return false,
            }
        }
        let start = chars.next().map_or(text.len(), |(i, _)| i);
        let Some(suffix) = &self.suffix else {
            return start == text.len();
        };
        // The suffix against the end of what is left.
        let rest = &text[start..];
        let mut back = rest.char_indices().rev();
        let mut end = rest.len();
        for t in suffix {
            match back.next() {
                Some((i, c)) if t.accepts(c) => end = i,
                _ => return false,
            }
        }
        let between = &rest[..end];
        match &self.middle {
            None => true,
            Some(Middle::Literals(runs)) => {
                let mut at = 0;
                runs.iter()
                    .all(|run| match between[at..].find(run.as_str()) {
                        Some(i) => {
                            at += i + run.len();
                            true
                        }
                        None => false,
                    })
            }
            Some(Middle::Automaton(a, longest)) => {
                between.contains(longest.as_str()) && a.matches(between)
            }
        }
    }
}

/// The automaton of a pattern that starts and ends with `*`: its masks. State `i` (bit `i`)
/// means "the first `i` tokens matched the text read so far"; the pattern matches when state
/// `m` is active, and then stays matched (the last token is `*`). Memory is linear in `m`: a
/// character at fewer positions than a state set has words keeps a list of its positions,
/// and at most 64 characters can fill a whole mask.
#[derive(Clone, Debug)]
struct Automaton {
    /// Number of tokens (`m`); states are `0..=m`.
    tokens: usize,
    /// Words per state set.
    words: usize,
    /// Positions whose token is `*` (the state stays on any character).
    star: Vec<u64>,
    /// Positions whose token is `?`.
    any: Vec<u64>,
    /// Per distinct literal character, sorted by character: the positions holding it.
    literals: Vec<(char, Positions)>,
    /// For an automaton of one word: the mask of each ASCII character (else empty).
    ascii: Vec<u64>,
}

/// Where one character stands in a pattern.
#[derive(Clone, Debug)]
enum Positions {
    /// As a mask (a character at many positions).
    Dense(Vec<u64>),
    /// As a list (a character at fewer positions than the mask has words).
    Sparse(Vec<usize>),
}

impl Automaton {
    fn new(tokens: &[Token]) -> Self {
        let words = (tokens.len() + 1).div_ceil(64);
        let mut star = vec![0; words];
        let mut any = vec![0; words];
        let mut positions: Vec<(char, usize)> = Vec::new();
        for (i, t) in tokens.iter().enumerate() {
            let (w, bit) = (i / 64, 1u64 << (i % 64));
            match *t {
                Token::Star => star[w] |= bit,
                Token::Any => any[w] |= bit,
                Token::Literal(c) => positions.push((c, i)),
            }
        }
        // Sorted once, then grouped: no insertion into the middle of a growing list.
        positions.sort_unstable();
        let mut literals: Vec<(char, Positions)> = Vec::new();
        for run in positions.chunk_by(|a, b| a.0 == b.0) {
            let at = run.iter().map(|(_, i)| *i);
            let p = if run.len() >= words {
                let mut mask = vec![0; words];
                for i in at {
                    mask[i / 64] |= 1u64 << (i % 64);
                }
                Positions::Dense(mask)
            } else {
                Positions::Sparse(at.collect())
            };
            literals.push((run[0].0, p));
        }
        let mut ascii = Vec::new();
        if words == 1 {
            ascii = vec![0; 128];
            for (c, p) in &literals {
                if let (Some(slot), Positions::Dense(mask)) = (ascii.get_mut(*c as usize), p) {
                    *slot = mask[0];
                }
            }
        }
        Automaton {
            tokens: tokens.len(),
            words,
            star,
            any,
            literals,
            ascii,
        }
    }

    /// [`Automaton::matches`] for an automaton of one word (a middle under 64 tokens): the
    /// state set is one integer.
    fn matches_one_word(&self, text: &str) -> bool {
        let (star, any) = (self.star[0], self.any[0]);
        let accept = 1u64 << self.tokens;
        let close = |s: u64| s | ((s & star) << 1);
        let mut state = close(1);
        for c in text.chars() {
            if state & accept != 0 {
                return true;
            }
            let literal = match self.ascii.get(c as usize) {
                Some(mask) => *mask,
                None => match self.literals.binary_search_by(|(l, _)| l.cmp(&c)) {
                    Ok(k) => match &self.literals[k].1 {
                        Positions::Dense(mask) => mask[0],
                        Positions::Sparse(at) => at.iter().fold(0, |m, i| m | 1u64 << i),
                    },
                    Err(_) => 0,
                },
            };
            let advance = state & (any | literal);
            state = close((state & star) | (advance << 1));
        }
        state & accept != 0
    }

    /// Whether the accepting state is active.
    fn accepted(&self, state: &[u64]) -> bool {
        state[self.tokens / 64] & (1u64 << (self.tokens % 64)) != 0
    }

    fn matches(&self, text: &str) -> bool {
        if self.words == 1 {
            return self.matches_one_word(text);
        }
        let mut state = vec![0u64; self.words];
        state[0] = 1;
        self.close(&mut state);
        let mut moved = vec![0u64; self.words];
        let mut accepts = vec![0u64; self.words];
        for c in text.chars() {
            if self.accepted(&state) {
                return true;
            }
            // The positions whose token accepts `c`.
            accepts.copy_from_slice(&self.any);
            if let Ok(k) = self.literals.binary_search_by(|(l, _)| l.cmp(&c)) {
                match &self.literals[k].1 {
                    Positions::Dense(mask) => {
                        for (a, m) in accepts.iter_mut().zip(mask) {
                            *a |= m;
                        }
                    }
                    Positions::Sparse(at) => {
                        for &i in at {
                            accepts[i / 64] |= 1u64 << (i % 64);
                        }
                    }
                }
            }
            // A state advances past a token that accepts `c`; a `*` state also stays.
            let mut carry = 0;
            for w in 0..self.words {
                let advance = state[w] & accepts[w];
                moved[w] = (state[w] & self.star[w]) | (advance << 1) | carry;
                carry = advance >> 63;
            }
            std::mem::swap(&mut state, &mut moved);
            self.close(&mut state);
        }
        self.accepted(&state)
    }

    /// Adds the states reachable without reading: a `*` may match nothing, so a state before
    /// one implies the state after it (runs of `*` are collapsed, so one step suffices).
    fn close(&self, state: &mut [u64]) {
        let mut carry = 0;
        for (w, s) in state.iter_mut().enumerate() {
            let skip = *s & self.star[w];
            let next = skip >> 63;
            *s |= (skip << 1) | carry;
            carry = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opencode_examples() {
        assert!(matches("*", ""));
        assert!(matches("*", "anything at all\nwith a newline"));
        assert!(matches("git *", "git status"));
        assert!(matches("git *", "git"));
        assert!(!matches("git *", "gitk"));
        assert!(!matches("git *", "legit x"));
        assert!(matches("rm *", "rm -rf /"));
        assert!(matches("*ok*", "this is ok"));
        assert!(!matches("*ok*", "this is fine"));
        assert!(matches("a?c", "abc"));
        assert!(matches("a?c", "aéc"));
        assert!(!matches("a?c", "ac"));
        assert!(matches("", ""));
        assert!(!matches("", "x"));
        assert!(matches("**", "x"));
        assert!(matches("a**b", "ab"));
    }

    #[test]
    fn long_patterns_span_several_words() {
        let p = format!("*{}*{}", "a?".repeat(40), "b".repeat(50));
        let t = format!("zz{}{}{}", "ax".repeat(40), "zzz", "b".repeat(50));
        assert!(matches(&p, &t));
        assert!(!matches(&p, &t.replacen("ax", "xx", 1)));
        match Pattern::new(&p).middle {
            Some(Middle::Automaton(a, _)) => assert!(a.words > 1),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn adversarial_input_is_one_pass() {
        // A backtracking matcher takes quadratic time (or worse) on this.
        let text = "a".repeat(1 << 20);
        assert!(!matches("*a*a*a*a*a*a*a*a*a*a*a*a*b", &text));
        assert!(matches("*a*a*a*a*a*a*a*a*a*a*a*a*", &text));
    }

    #[test]
    fn a_pattern_without_a_middle_looks_at_its_own_length_of_text() {
        for p in ["git *", "*.rs", "*", "ls", "a?c", "src/*.rs", "?*?"] {
            assert!(Pattern::new(p).middle.is_none(), "{p}");
        }
        assert!(matches!(
            Pattern::new("*password*").middle,
            Some(Middle::Literals(_))
        ));
        assert!(matches!(
            Pattern::new("x*a?b*y").middle,
            Some(Middle::Automaton(..))
        ));
    }

    #[test]
    fn prefix_and_suffix_do_not_overlap() {
        assert!(!matches("ab*ba", "aba"));
        assert!(matches("ab*ba", "abba"));
        assert!(!matches("a*?a*a", "aa"));
        assert!(matches("a*?a*a", "axaa"));
        assert!(matches("é*é", "éé") && !matches("é*é", "é"));
    }

    #[test]
    fn literal_middles_are_found_leftmost_in_order() {
        assert!(matches("*a*b*", "xxaxxbxx"));
        assert!(!matches("*b*a*", "xxaxxbxx"));
        assert!(matches("x*ab*ab*y", "xababy"));
        assert!(!matches("x*ab*ab*y", "xaby"));
    }
}
