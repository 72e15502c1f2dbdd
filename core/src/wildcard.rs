//! Wildcard patterns for tool rules (issue 13, R-TOOL-3), with OpenCode's permission semantics:
//! `*` matches any run of characters (none included, `/` and newlines included), `?` exactly
//! one character, every other character itself (there is no escape), and a pattern that ends
//! in `" *"` also matches the text without that tail (`git *` matches `git` as well as
//! `git push`). Matching is case-sensitive and anchored at both ends.
//!
//! The matcher never backtracks. It runs the pattern as a nondeterministic automaton whose
//! states (one per pattern position) are the bits of a small bitset, advanced once per text
//! character (the shift-and technique of Baeza-Yates and Gonnet, with `*` as a self-loop): one
//! pass over the text, each character costing a binary search among the pattern's distinct
//! literal characters and ⌈(m+1)/64⌉ word operations for a pattern of m tokens — one machine
//! word for every pattern under 64 tokens. So a rule costs time linear in the argument it
//! looks at, whatever the pattern (`*a*a*a*a*b` against a megabyte of `a`s is one pass), and
//! memory for the pattern alone: a mask per distinct literal character.
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

/// Whether `text` matches `pattern` as a whole (see the module doc for the syntax).
pub fn matches(pattern: &str, text: &str) -> bool {
    if let Some(head) = pattern.strip_suffix(" *") {
        if Pattern::new(head).matches(text) {
            return true;
        }
    }
    Pattern::new(pattern).matches(text)
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

/// A compiled pattern: the automaton's masks. State `i` (bit `i`) means "the first `i` tokens
/// matched the text read so far"; the pattern matches when state `m` is active at the end.
#[derive(Clone, Debug)]
pub struct Pattern {
    /// Number of tokens (`m`); states are `0..=m`.
    tokens: usize,
    /// Words per state set.
    words: usize,
    /// Positions whose token is `*` (the state stays on any character).
    star: Vec<u64>,
    /// Positions whose token is `?`.
    any: Vec<u64>,
    /// Per distinct literal character, sorted by character: the positions holding it.
    literals: Vec<(char, Vec<u64>)>,
    /// The pattern has no wildcard: plain equality with this text.
    exact: Option<String>,
}

impl Pattern {
    /// Compiles `pattern` (linear in its length, plus a mask per distinct literal character).
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
        let words = (tokens.len() + 1).div_ceil(64);
        let mut star = vec![0; words];
        let mut any = vec![0; words];
        let mut literals: Vec<(char, Vec<u64>)> = Vec::new();
        if exact.is_none() {
            for (i, t) in tokens.iter().enumerate() {
                let (w, bit) = (i / 64, 1u64 << (i % 64));
                match *t {
                    Token::Star => star[w] |= bit,
                    Token::Any => any[w] |= bit,
                    Token::Literal(c) => match literals.binary_search_by(|(l, _)| l.cmp(&c)) {
                        Ok(k) => literals[k].1[w] |= bit,
                        Err(k) => {
                            let mut mask = vec![0; words];
                            mask[w] |= bit;
                            literals.insert(k, (c, mask));
                        }
                    },
                }
            }
        }
        Pattern {
            tokens: tokens.len(),
            words,
            star,
            any,
            literals,
            exact,
        }
    }

    /// Whether `text` matches the whole pattern (without the `" *"` tail rule of
    /// [`matches()`]). One pass over `text`, never backtracking.
    pub fn matches(&self, text: &str) -> bool {
        if let Some(exact) = &self.exact {
            return exact == text;
        }
        let mut state = vec![0u64; self.words];
        state[0] = 1;
        self.close(&mut state);
        let mut moved = vec![0u64; self.words];
        for c in text.chars() {
            let lit = self
                .literals
                .binary_search_by(|(l, _)| l.cmp(&c))
                .ok()
                .map(|k| &self.literals[k].1);
            // A state advances past a token that accepts `c`; a `*` state also stays.
            let mut carry = 0;
            let mut alive = 0;
            for w in 0..self.words {
                let accepts = self.any[w] | lit.map_or(0, |m| m[w]);
                let advance = state[w] & accepts;
                moved[w] = (state[w] & self.star[w]) | (advance << 1) | carry;
                carry = advance >> 63;
                alive |= moved[w];
            }
            if alive == 0 {
                return false;
            }
            std::mem::swap(&mut state, &mut moved);
            self.close(&mut state);
        }
        let (w, bit) = (self.tokens / 64, 1u64 << (self.tokens % 64));
        state[w] & bit != 0
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
        let p = format!("{}*{}", "a?".repeat(40), "b".repeat(50));
        let t = format!("{}{}{}", "ax".repeat(40), "zzz", "b".repeat(50));
        assert!(matches(&p, &t));
        assert!(!matches(&p, &t[1..]));
        assert!(Pattern::new(&p).words > 1);
    }

    #[test]
    fn adversarial_input_is_one_pass() {
        // A backtracking matcher takes quadratic time (or worse) on this.
        let text = "a".repeat(1 << 20);
        assert!(!matches("*a*a*a*a*a*a*a*a*a*a*a*a*b", &text));
        assert!(matches("*a*a*a*a*a*a*a*a*a*a*a*a*", &text));
    }
}
