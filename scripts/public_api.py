#!/usr/bin/env python3
"""Print the public surface of the `agentloop` crate, one `kind path` line per item.

Reads the rustdoc output of `cargo doc -p agentloop --no-deps --features
sqlite-store,postgres-store` (target/doc/agentloop/all.html): every feature a program enables,
none of the test-only ones (`wire`, `fuzzing`, `fault-injection`, `testing`), so the list is exactly what
a user can reach from the docs. CI regenerates it and diffs it against docs/public-api.txt: a
changed surface must be a deliberate commit.

Usage: scripts/public_api.py [DOC_DIR] [--count] [--max-types=N] [--leaks] [--max-leaks=N]

--count: print the number of types (struct/enum/trait/type alias/union) and of items.
--max-types=N: print the type count, and fail when there are more than N types.
--leaks: print each type of `agentloop_core` that a signature documented by `agentloop` names
  (an item's declaration, a struct field, an enum variant, a method or impl header) though
  `agentloop` does not re-export it, so a user sees it but cannot name it from `agentloop`: one
  line per type (its kind and its defining path in the core) with the pages it appears on, then
  the count.
--max-leaks=N: print the leak count, and fail when there are more than N.

A core type a crate re-exported whole by agentloop documents as its own (`pub use agentloop_store
as store;`, whose docs inline the core's `Entry`) is nameable from agentloop (`agentloop::store::
Entry`), so it is no leak; that crate's docs must be there too (DOC_DIR/../agentloop_store, from
`cargo doc --workspace --no-deps` or `cargo doc -p agentloop-store --no-deps`).

The leak check reads the links of agentloop's pages: a type agentloop re-exports links to
agentloop's own page, any other core type to the core's docs, but only if rustdoc found them
(DOC_DIR/../agentloop_core) when it documented agentloop. So document the core first, in a
command of its own (`cargo doc -p agentloop-core --no-deps`, then the one above); the script
fails when agentloop's pages do not link the core, rather than see no leak.
"""
import html
import re
import sys
from collections import defaultdict
from pathlib import Path

TYPES = {"struct", "enum", "trait", "type", "union"}

# The parts of a page that are signatures: an item's declaration, method and associated item
# headers (h4), impl headers and variants (h3), variant sections and struct fields.
SIGNATURES = [
    re.compile(r'<pre class="rust item-decl">.*?</pre>', re.S),
    re.compile(r'<h4 class="code-header">.*?</h4>', re.S),
    re.compile(r'<h3 class="code-header">.*?</h3>', re.S),
    re.compile(r'<section id="variant\.[^"]*".*?</section>', re.S),
    re.compile(r'<span id="structfield\.[^"]*".*?</span>', re.S),
]
CORE_LINK = re.compile(
    r'href="[./]*agentloop_core/[a-z_/]*(?:struct|enum|trait|type|union)\.[A-Za-z_0-9]*\.html"'
    r'(?: title="([^"]*)")?'
)


def items(doc_dir: Path):
    text = (doc_dir / "all.html").read_text(encoding="utf-8")
    out = set()
    for href, label in re.findall(r'<a href="([^"]+\.html)">([^<]+)</a>', text):
        kind = Path(href).name.split(".", 1)[0]
        if kind in {"index", "all"}:
            continue
        out.add((kind, "agentloop::" + html.unescape(label)))
    return sorted(out, key=lambda kp: (kp[1], kp[0]))


# A crate agentloop re-exports whole, as its index page shows it: `pub use agentloop_store as store;`.
CRATE_REEXPORT = re.compile(
    r'<code>pub use <a class="mod" href="[./]*(agentloop_[a-z_]+)/index\.html"[^>]*>[^<]*</a>'
    r' as ([a-z_]+);</code>'
)
SRC_LINK = re.compile(r'class="src" href="[./]*src/agentloop_core/([^"#]*)\.rs\.html')


def through_crates(doc_dir: Path):
    """{"kind agentloop_core::path::Type"} of the core types a crate agentloop re-exports whole
    documents as its own (an inlined re-export: its page's source link is the core's file)."""
    index = (doc_dir / "index.html").read_text(encoding="utf-8", errors="replace")
    out = set()
    for crate, _alias in CRATE_REEXPORT.findall(index):
        crate_dir = doc_dir.parent / crate
        if not (crate_dir / "all.html").is_file():
            sys.exit(f"{crate_dir} is missing: agentloop re-exports {crate}; document it too "
                     "(see the docstring), or the core types it re-exports count as leaks")
        for page in crate_dir.rglob("*.html"):
            kind, _, name = page.name.removesuffix(".html").partition(".")
            if kind not in TYPES or not name:
                continue
            m = SRC_LINK.search(page.read_text(encoding="utf-8", errors="replace"))
            if m:
                module = m.group(1).removesuffix("/mod").replace("/", "::")
                out.add(f"{kind} agentloop_core::{module}::{name}")
    return out


def leaks(doc_dir: Path):
    """{"kind agentloop_core::path::Type": {page, ...}} for each core type the signatures of
    agentloop's pages link to (a re-exported one links to agentloop's own page instead)."""
    core = doc_dir.parent / "agentloop_core"
    if not (core / "index.html").is_file():
        sys.exit(f"{core} is missing: document agentloop-core before agentloop (see the "
                 "docstring), or the core types in agentloop's signatures are not linked and no "
                 "leak is seen")
    # The crate docs link `agentloop_core`: unlinked, rustdoc did not see the core's docs when it
    # documented agentloop (documented before them, or alongside them: `cargo doc --no-deps`
    # does not order the two, and removes a crate's old docs before documenting it again).
    if not re.search(r'href="[./]*agentloop_core/', (doc_dir / "index.html").read_text(
            encoding="utf-8", errors="replace")):
        sys.exit(f"{doc_dir} does not link {core}: document agentloop again after the core "
                 "(touch src/lib.rs; see the docstring)")
    found = defaultdict(set)
    blocks = 0
    for page in sorted(doc_dir.rglob("*.html")):
        rel = page.relative_to(doc_dir)
        if rel.parts[0] == "src":
            continue
        text = page.read_text(encoding="utf-8", errors="replace")
        for pattern in SIGNATURES:
            for block in pattern.findall(text):
                blocks += 1
                for m in CORE_LINK.finditer(block):
                    name = html.unescape(m.group(1) or m.group(0))
                    found[name].add(str(rel))
    # A rustdoc whose markup the patterns no longer match would find no signature, and so no
    # leak: that is a failure of the check, not a clean surface.
    if blocks < 100:
        sys.exit(f"only {blocks} signatures found in {doc_dir}: has rustdoc's markup changed? "
                 "(see SIGNATURES)")
    for name in through_crates(doc_dir):
        found.pop(name, None)
    return found


def main():
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    known = {"--count", "--leaks"}
    for f in flags:
        if f not in known and not f.startswith(("--max-types=", "--max-leaks=")):
            sys.exit(f"unknown flag {f} (see the docstring)")
    doc_dir = Path(args[0]) if args else Path("target/doc/agentloop")
    found = items(doc_dir)
    types = sum(1 for k, _ in found if k in TYPES)
    failed = False
    max_types = [f.split("=", 1)[1] for f in flags if f.startswith("--max-types=")]
    max_leaks = [f.split("=", 1)[1] for f in flags if f.startswith("--max-leaks=")]
    if max_types:
        print(f"{types} types (struct/enum/trait/type), at most {max_types[0]}")
        if types > int(max_types[0]):
            print("the public surface of agentloop has more types than allowed: make the new "
                  "ones pub(crate), or re-export them from one place", file=sys.stderr)
            failed = True
    if "--count" in flags:
        print(f"{types} types (struct/enum/trait/type), {len(found)} items")
    if "--leaks" in flags or max_leaks:
        leaked = leaks(doc_dir)
        if "--leaks" in flags:
            for name in sorted(leaked, key=lambda n: n.split(" ")[-1]):
                print(f"{name}: {', '.join(sorted(leaked[name]))}")
        limit = f", at most {max_leaks[0]}" if max_leaks else ""
        print(f"{len(leaked)} agentloop_core types in agentloop's signatures, not re-exported{limit}")
        if max_leaks and len(leaked) > int(max_leaks[0]):
            print("a signature of agentloop names a core type a user cannot name from agentloop "
                  "(--leaks lists them): keep it out of the signature (a builder method, a private "
                  "field, pub(crate)), or re-export it where a user looks for it", file=sys.stderr)
            failed = True
    if failed:
        sys.exit(1)
    if not flags:
        for kind, path in found:
            print(f"{kind} {path}")


if __name__ == "__main__":
    main()
