//! Inline tags in the model's streamed text: `<status>…</status>`,
//! `<title>…</title>` and `<plan>…</plan>` become `status_update`, `title_generated` and
//! `plan_generated` events and, by default,
//! leave the answer text. [`InlineTagFilter`] is the pure streaming filter; [`InlineTags`]
//! is the step option that says what to do with the tags.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a step does with inline tags in the model's text (`StepConfig::inline_tags`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InlineTags {
    /// Report each closed tag as an event and remove it from the text: `text_delta` events
    /// and the committed message carry the visible text only. Text after a `<` that may
    /// still open a tag is held back until decided (released at the latest when the text
    /// ends).
    #[default]
    Strip,
    /// Report each closed tag as an event and leave the text as the model wrote it.
    Keep,
    /// No tag handling: the text is the model's, no tag events (what traces recorded
    /// before this option existed; a configuration without the field reads as `off`).
    Off,
}

impl InlineTags {
    /// The value of a serialized configuration without the field: `off`, the behaviour of
    /// the versions that wrote such configurations (old traces replay as recorded).
    pub fn absent() -> Self {
        InlineTags::Off
    }

    /// Whether this is [`InlineTags::Off`] (then the field is not serialized).
    pub fn is_off(&self) -> bool {
        *self == InlineTags::Off
    }
}

/// Which inline tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagKind {
    /// `<status>…</status>`: what the model is doing now.
    Status,
    /// `<title>…</title>`: a title for the conversation.
    Title,
    /// `<plan>…</plan>`: the model's plan, one step per line (see [`plan_steps`]).
    Plan,
}

impl TagKind {
    const ALL: [TagKind; 3] = [TagKind::Status, TagKind::Title, TagKind::Plan];

    /// The longest body kept for this tag, in characters.
    pub fn max_body_chars(self) -> usize {
        match self {
            TagKind::Status | TagKind::Title => MAX_TAG_BODY_CHARS,
            TagKind::Plan => MAX_PLAN_BODY_CHARS,
        }
    }

    /// The opening tag, e.g. `<status>`.
    pub fn open(self) -> &'static str {
        match self {
            TagKind::Status => "<status>",
            TagKind::Title => "<title>",
            TagKind::Plan => "<plan>",
        }
    }

    /// The closing tag, e.g. `</status>`.
    pub fn close(self) -> &'static str {
        match self {
            TagKind::Status => "</status>",
            TagKind::Title => "</title>",
            TagKind::Plan => "</plan>",
        }
    }
}

/// What the filter makes of the text: visible text, or a closed tag (in stream order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InlinePiece {
    /// Text to show (and keep in the message).
    Text(String),
    /// A closed tag with its body, trimmed of surrounding whitespace.
    Tag(TagKind, String),
}

/// The longest `<status>` or `<title>` body kept, in characters: a longer one is given up and
/// released as text, so what the filter holds back stays bounded whatever the model sends.
pub const MAX_TAG_BODY_CHARS: usize = 512;

/// The longest `<plan>` body kept, in characters (a plan has several lines).
pub const MAX_PLAN_BODY_CHARS: usize = 4_096;

/// The steps of a `<plan>` body: its non-empty lines, each without a leading list marker
/// (`-`, `*`, `•`, `1.`, `1)`) and surrounding whitespace.
pub fn plan_steps(body: &str) -> Vec<String> {
    body.lines()
        .map(|line| {
            let line = line.trim();
            let unbulleted = line
                .strip_prefix(['-', '*', '•'])
                .map(str::trim_start)
                .unwrap_or(line);
            let digits = unbulleted.len()
                - unbulleted
                    .trim_start_matches(|c: char| c.is_ascii_digit())
                    .len();
            match unbulleted[digits..].strip_prefix(['.', ')']) {
                Some(rest) if digits > 0 => rest.trim_start(),
                _ => unbulleted,
            }
        })
        .filter(|step| !step.is_empty())
        .map(str::to_string)
        .collect()
}

/// Where the filter is in the text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Scan {
    /// Plain text; nothing held.
    #[default]
    Text,
    /// `held` is a proper prefix of an opening tag (starting with `<`).
    Open,
    /// `held` is the opening tag of `kind` and its body so far; the body's last `matched`
    /// bytes are a prefix of the closing tag; `body_chars` counts the body's other characters.
    Body {
        kind: TagKind,
        matched: usize,
        body_chars: usize,
    },
}

/// A streaming filter that takes `<status>…</status>`, `<title>…</title>` and `<plan>…</plan>` out of text
/// arriving in chunks. A tag may be split across chunks anywhere: text
/// after a `<` that may still start a known tag is held back until it is decided. Unknown tags
/// (`<b>`, `</status>` alone, `<status x>`) pass through unchanged; a body longer than
/// [`TagKind::max_body_chars`] is given up and released as text; [`finish`](Self::finish)
/// releases whatever is still held (an unclosed tag is text: nothing is lost). Each input
/// character is looked at once, so the cost is linear in the input.
#[derive(Clone, Debug, Default)]
pub struct InlineTagFilter {
    held: String,
    scan: Scan,
}

impl InlineTagFilter {
    /// A filter at the start of a text.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one chunk; returns the visible text and the tags it completes, in order
    /// (adjacent text merged; empty when everything was held back).
    pub fn push(&mut self, chunk: &str) -> Vec<InlinePiece> {
        let mut out = Vec::new();
        let mut rest = chunk;
        while !rest.is_empty() {
            if self.scan == Scan::Text {
                let plain = rest.find('<').unwrap_or(rest.len());
                text(&mut out, &rest[..plain]);
                rest = &rest[plain..];
            }
            let mut chars = rest.chars();
            if let Some(c) = chars.next() {
                self.step(c, &mut out);
            }
            rest = chars.as_str();
        }
        out
    }

    /// The end of the text: releases what is held back (a partial or unclosed tag) as text.
    pub fn finish(&mut self) -> String {
        self.scan = Scan::Text;
        std::mem::take(&mut self.held)
    }

    /// The text held back so far (undecided).
    pub fn held(&self) -> &str {
        &self.held
    }

    fn step(&mut self, c: char, out: &mut Vec<InlinePiece>) {
        match self.scan {
            Scan::Text => {
                if c == '<' {
                    self.held.push(c);
                    self.scan = Scan::Open;
                } else {
                    let mut buf = [0u8; 4];
                    text(out, c.encode_utf8(&mut buf));
                }
            }
            Scan::Open => {
                self.held.push(c);
                if let Some(kind) = TagKind::ALL.into_iter().find(|k| k.open() == self.held) {
                    self.scan = Scan::Body {
                        kind,
                        matched: 0,
                        body_chars: 0,
                    };
                } else if !TagKind::ALL
                    .iter()
                    .any(|k| k.open().starts_with(self.held.as_str()))
                {
                    // Not a known tag: release what was held; `c` may open another one.
                    self.held.pop();
                    let held = self.finish();
                    text(out, &held);
                    self.step(c, out);
                }
            }
            Scan::Body {
                kind,
                matched,
                body_chars,
            } => {
                self.held.push(c);
                let close = kind.close();
                if close[matched..].starts_with(c) {
                    let matched = matched + c.len_utf8();
                    if matched == close.len() {
                        let body = &self.held[kind.open().len()..self.held.len() - close.len()];
                        out.push(InlinePiece::Tag(kind, body.trim().to_string()));
                        self.held.clear();
                        self.scan = Scan::Text;
                    } else {
                        self.scan = Scan::Body {
                            kind,
                            matched,
                            body_chars,
                        };
                    }
                    return;
                }
                // The closing tag is ASCII, so its matched bytes are characters; they are
                // body now, and `c` too unless it starts another try at the closing tag.
                let restart = c == '<';
                let body_chars = body_chars + matched + usize::from(!restart);
                if body_chars > kind.max_body_chars() {
                    let held = self.finish();
                    text(out, &held);
                } else {
                    self.scan = Scan::Body {
                        kind,
                        matched: usize::from(restart),
                        body_chars,
                    };
                }
            }
        }
    }
}

/// Appends visible text to `out`, merged with the text before it.
fn text(out: &mut Vec<InlinePiece>, s: &str) {
    if s.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(InlinePiece::Text(t)) => t.push_str(s),
        _ => out.push(InlinePiece::Text(s.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs `chunks` through a fresh filter and its end: the pieces, adjacent text merged.
    fn run<'a>(chunks: impl IntoIterator<Item = &'a str>) -> Vec<InlinePiece> {
        let mut f = InlineTagFilter::new();
        let mut out = Vec::new();
        for c in chunks {
            for p in f.push(c) {
                match p {
                    InlinePiece::Text(t) => text(&mut out, &t),
                    tag => out.push(tag),
                }
            }
        }
        text(&mut out, &f.finish());
        out
    }

    fn visible(pieces: &[InlinePiece]) -> String {
        pieces
            .iter()
            .filter_map(|p| match p {
                InlinePiece::Text(t) => Some(t.as_str()),
                InlinePiece::Tag(..) => None,
            })
            .collect()
    }

    fn t(s: &str) -> InlinePiece {
        InlinePiece::Text(s.into())
    }

    fn status(s: &str) -> InlinePiece {
        InlinePiece::Tag(TagKind::Status, s.into())
    }

    fn title(s: &str) -> InlinePiece {
        InlinePiece::Tag(TagKind::Title, s.into())
    }

    /// Both tags leave the text and come out as tags, in order.
    #[test]
    fn plan_steps_drop_list_markers_and_blank_lines() {
        assert_eq!(
            plan_steps("\n 1. one\n2) two\n- three\n* four\n• five\n\n12.twelve\n3 items\n-"),
            ["one", "two", "three", "four", "five", "twelve", "3 items"]
        );
        assert!(plan_steps("  \n\n").is_empty());
    }

    #[test]
    fn status_and_title_are_taken_out_of_the_text() {
        assert_eq!(
            run(["<status>Reading</status>The sum is 5.<title> Sum </title>"]),
            vec![status("Reading"), t("The sum is 5."), title("Sum")]
        );
    }

    /// A tag split across deltas (`<sta` + `tus>Rea` + `ding</status>`)
    /// is held back and found; nothing of it is shown.
    #[test]
    fn a_tag_split_across_deltas_is_held_back_then_found() {
        let mut f = InlineTagFilter::new();
        assert_eq!(f.push("Hi <sta"), vec![t("Hi ")]);
        assert_eq!(f.held(), "<sta");
        assert_eq!(f.push("tus>Rea"), vec![]);
        assert_eq!(
            f.push("ding</status> ok"),
            vec![status("Reading"), t(" ok")]
        );
        assert_eq!(f.finish(), "");
    }

    /// Unknown tags, lone closing tags, attributes and comparisons pass
    /// through unchanged.
    #[test]
    fn unknown_tags_pass_through() {
        for s in [
            "<b>bold</b>",
            "a < b and c<d",
            "</status> <status x>y</status>",
            "<stat>us</status>",
            "<<title",
            "<",
            "<title",
            "x <ti<status",
        ] {
            assert_eq!(run([s]), vec![t(s)], "{s:?}");
        }
        assert_eq!(run(["<<status>x</status>"]), vec![t("<"), status("x")]);
    }

    /// An unclosed tag at the end of the text is released as text.
    #[test]
    fn an_unclosed_tag_is_released_at_the_end() {
        assert_eq!(
            run(["ok <status>Reading</stat"]),
            vec![t("ok <status>Reading</stat")]
        );
        assert_eq!(run(["<title>a</status>"]), vec![t("<title>a</status>")]);
    }

    /// A body over [`MAX_TAG_BODY_CHARS`] is given up and released as
    /// text at once; what is held stays bounded; one of exactly the limit is a tag.
    #[test]
    fn an_oversized_tag_body_is_released_as_text() {
        let limit = "é".repeat(MAX_TAG_BODY_CHARS);
        assert_eq!(
            run([format!("<status>{limit}</status>").as_str()]),
            vec![status(&limit)]
        );
        let mut f = InlineTagFilter::new();
        let long = format!("<status>{limit}x");
        assert_eq!(f.push(&long), vec![t(&long)]);
        assert_eq!(f.held(), "");
        assert_eq!(f.push("</status>"), vec![t("</status>")]);
        // Many partial closing tags count as body too.
        let mut f = InlineTagFilter::new();
        let mut shown = visible(&f.push("<title>"));
        for _ in 0..10_000 {
            shown.push_str(&visible(&f.push("</titl")));
            assert!(f.held().len() <= 16 + 4 * MAX_TAG_BODY_CHARS);
        }
        shown.push_str(&f.finish());
        assert_eq!(shown, format!("<title>{}", "</titl".repeat(10_000)));
    }

    /// Multi-byte text around and inside tags, split at every character
    /// boundary, gives what the whole text gives.
    #[test]
    fn multibyte_text_splits_safely() {
        let s = "日本<status>読んでいる…</status>語😀<title>Σ</title>é<b>";
        let whole = run([s]);
        assert_eq!(
            whole,
            vec![
                t("日本"),
                status("読んでいる…"),
                t("語😀"),
                title("Σ"),
                t("é<b>"),
            ]
        );
        for (i, _) in s.char_indices() {
            assert_eq!(run([&s[..i], &s[i..]]), whole, "split at {i}");
        }
    }

    fn char_splits(s: &str, cuts: &[usize]) -> Vec<String> {
        let bounds: Vec<usize> = s.char_indices().map(|(i, _)| i).chain([s.len()]).collect();
        let mut at: Vec<usize> = cuts.iter().map(|c| bounds[c % bounds.len()]).collect();
        at.extend([0, s.len()]);
        at.sort_unstable();
        at.dedup();
        at.windows(2).map(|w| s[w[0]..w[1]].to_string()).collect()
    }

    fn texty() -> impl Strategy<Value = String> {
        let parts = prop_oneof![
            Just("<status>".to_string()),
            Just("</status>".to_string()),
            Just("<title>".to_string()),
            Just("</title>".to_string()),
            Just("<".to_string()),
            Just("</".to_string()),
            Just("<b>".to_string()),
            "[a-z é日😀<>/]{0,6}",
        ];
        prop::collection::vec(parts, 0..12).prop_map(|v| v.concat())
    }

    proptest! {
        /// Splitting the text into chunks anywhere (at character
        /// boundaries) gives the same visible text and tags as one chunk.
        #[test]
        fn any_split_gives_what_the_whole_gives(
            s in texty(),
            cuts in prop::collection::vec(0usize..64, 0..6),
        ) {
            let whole = run([s.as_str()]);
            let chunks = char_splits(&s, &cuts);
            prop_assert_eq!(run(chunks.iter().map(String::as_str)), whole.clone());
        }

        /// The visible text and the tags account for the whole input:
        /// nothing is lost or invented (up to the whitespace a tag body is trimmed of).
        #[test]
        fn nothing_is_lost(s in texty()) {
            let rebuilt: String = run([s.as_str()])
                .iter()
                .map(|p| match p {
                    InlinePiece::Text(t) => t.clone(),
                    InlinePiece::Tag(k, body) => format!("{}{body}{}", k.open(), k.close()),
                })
                .collect();
            let squeeze = |s: &str| s.split_whitespace().collect::<String>();
            prop_assert_eq!(squeeze(&rebuilt), squeeze(&s));
        }
    }

    /// Every split of a text with both tags, at every byte position
    /// that is a character boundary, gives the same pieces (exhaustive for one text).
    #[test]
    fn every_two_way_and_three_way_split_agrees() {
        let s = "a<status>Reading</status>b <title>Sum</title><st";
        let whole = run([s]);
        let bounds: Vec<usize> = s.char_indices().map(|(i, _)| i).collect();
        for &i in &bounds {
            assert_eq!(run([&s[..i], &s[i..]]), whole, "split at {i}");
            for &j in bounds.iter().filter(|&&j| j > i) {
                assert_eq!(run([&s[..i], &s[i..j], &s[j..]]), whole, "{i},{j}");
            }
        }
        assert_eq!(visible(&whole), "ab <st");
        // One character a chunk.
        let mut buf = [0u8; 4];
        let chars: Vec<String> = s
            .chars()
            .map(|c| c.encode_utf8(&mut buf).to_string())
            .collect();
        assert_eq!(run(chars.iter().map(String::as_str)), whole);
    }
}
