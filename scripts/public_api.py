#!/usr/bin/env python3
"""Print the public surface of the `agentloop` crate, one line per item.

Reads the rustdoc output of `cargo doc -p agentloop --no-deps --features
sqlite-store,postgres-store` (target/doc/agentloop): every feature a program enables, none of
the test-only ones (`wire`, `fuzzing`, `fault-injection`, `testing`), so the list is exactly
what a user can reach from the docs. CI regenerates it and diffs it against
docs/public-api.txt: a changed surface must be a deliberate commit.

The listing has a `kind path` line per item agentloop documents (its own items and the ones it
re-exports inline: their pages are agentloop's); a `use agentloop::path::X = kind
crate::path::X` line per item of a workspace crate (`agentloop_core`, `agentloop_store`) it
re-exports by name without inlining it (`#[doc(no_inline)]`: the module page lists the `pub use`,
and X's page, with what X names, is that crate's); and for a workspace crate it re-exports
whole (`pub use agentloop_store as store;`) a `use agentloop::store = crate agentloop_store` line
and a `kind agentloop::store::path` line per item of that crate's docs, so a change there is a
deliberate commit too.

The type count is what a reader of agentloop's docs meets: the types agentloop documents, plus
every type of a workspace crate its pages name, in a `pub use` line or in a signature (an
item's declaration, a struct field, an enum variant, a method or impl header). Among the
latter, a type is nameable from agentloop when agentloop re-exports it by name or through a
crate it re-exports whole (`pub use agentloop_store as store;`: the store's own types and the
core types the store re-exports inline, as `agentloop::store::Entry`); a type that is not is a
leak: a user sees it but must depend on its crate to name it.

Usage: scripts/public_api.py [DOC_DIR] [--count] [--max-types=N] [--leaks] [--max-leaks=N]

--count: print the type count with its parts, and the number of items.
--max-types=N: print the type count, and fail when it is more than N.
--leaks: print each leaked type (its kind and defining path) with the pages that name it, then
  their number.
--max-leaks=N: print the leak count, and fail when there are more than N.

Rustdoc links another crate's types only if it found their docs when it documented agentloop.
So document the core and the store first, each in a command of its own (one command documents
crates in parallel), then agentloop, as .ci/run does:

    cargo doc -p agentloop-core --no-deps
    cargo doc -p agentloop-store --no-deps --features file,sqlite,postgres
    cargo doc -p agentloop --no-deps --features sqlite-store,postgres-store

The script fails when agentloop's pages do not link them, rather than see nothing.
"""
import html
import re
import sys
from pathlib import Path

TYPES = {"struct", "enum", "trait", "type", "union"}
CRATES = ("agentloop_core", "agentloop_store")

# The parts of a page that are signatures: an item's declaration, method and associated item
# headers (h4), impl headers and variants (h3), variant sections and struct fields.
SIGNATURES = [
    re.compile(r'<pre class="rust item-decl">.*?</pre>', re.S),
    re.compile(r'<h4 class="code-header">.*?</h4>', re.S),
    re.compile(r'<h3 class="code-header">.*?</h3>', re.S),
    re.compile(r'<section id="variant\.[^"]*".*?</section>', re.S),
    re.compile(r'<span id="structfield\.[^"]*".*?</span>', re.S),
]
# A link to a type page of a workspace crate; the title is `kind crate::defining::path::Name`.
CRATE_LINK = re.compile(
    r'href="[./]*(' + "|".join(CRATES) + r')/[a-z_/]*(struct|enum|trait|type|union)\.'
    r'([A-Za-z_0-9]*)\.html"(?: title="([^"]*)")?'
)
# A link to any item page of a workspace crate (a type, a function, a constant, a module).
ITEM_LINK = re.compile(
    r'href="[./]*(' + "|".join(CRATES) + r')/[a-z_/]*(?:[a-z]+\.[A-Za-z_0-9]+|index)\.html"'
    r' title="([a-z]+) ([^"]*)"'
)
REEXPORT = re.compile(r'<dt id="reexport\.([A-Za-z_0-9]+)"><code>pub use (.*?)</code>', re.S)
SRC_LINK = re.compile(r'class="src" href="[./]*src/(agentloop_[a-z_]+)/')


def items_of(crate_dir: Path):
    """[(kind, path within the crate)] of the items a crate's all.html lists."""
    if not (crate_dir / "all.html").is_file():
        sys.exit(f"{crate_dir} is missing: document it (see the docstring)")
    text = (crate_dir / "all.html").read_text(encoding="utf-8")
    out = set()
    for href, label in re.findall(r'<a href="([^"]+\.html)">([^<]+)</a>', text):
        kind = Path(href).name.split(".", 1)[0]
        if kind in {"index", "all"}:
            continue
        out.add((kind, html.unescape(label)))
    return sorted(out, key=lambda kp: (kp[1], kp[0]))


def items(doc_dir: Path):
    return [(kind, "agentloop::" + path) for kind, path in items_of(doc_dir)]


def key(m):
    """(crate, kind, name) of a CRATE_LINK match, and its title (`kind crate::path::Name`)."""
    crate, kind, name, title = m.groups()
    return (crate, kind, name), html.unescape(title or f"{kind} {crate}::{name}")


def pages(doc_dir: Path, name: str = "*.html"):
    """(path relative to doc_dir, text) of agentloop's pages called `name` (not the sources')."""
    for page in sorted(doc_dir.rglob(name)):
        rel = page.relative_to(doc_dir)
        if rel.parts[0] != "src":
            yield rel, page.read_text(encoding="utf-8", errors="replace")


def by_name(doc_dir: Path):
    """{"agentloop::path::X": ((crate, kind, name), "kind crate::path::X")} for each item of a
    workspace crate a module page of agentloop re-exports by name without inlining it, and
    {"agentloop::path::m": crate} for each workspace crate it re-exports whole."""
    out, crates = {}, {}
    for rel, text in pages(doc_dir, "index.html"):
        module = "::".join(("agentloop",) + rel.parts[:-1])
        for name, code in REEXPORT.findall(text):
            m = ITEM_LINK.search(code)
            if not m:
                continue
            crate, kind, path = m.group(1), m.group(2), html.unescape(m.group(3))
            if kind == "mod" and path == crate:
                crates[f"{module}::{name}"] = crate
            else:
                out[f"{module}::{name}"] = ((crate, kind, path.rsplit("::", 1)[-1]),
                                            f"{kind} {path}")
    return out, crates


def through_crates(doc_dir: Path, crates):
    """{(crate, kind, name)} of the types nameable through a crate agentloop re-exports whole:
    that crate's own types, and the core types it re-exports inline (a page whose source link
    is another crate's file). `crates` is by_name's second result."""
    out = set()
    for crate in crates.values():
        crate_dir = doc_dir.parent / crate
        for page in crate_dir.rglob("*.html"):
            kind, _, name = page.name.removesuffix(".html").partition(".")
            if kind not in TYPES or not name:
                continue
            m = SRC_LINK.search(page.read_text(encoding="utf-8", errors="replace"))
            out.add((m.group(1) if m else crate, kind, name))
    return out


def in_signatures(doc_dir: Path):
    """{(crate, kind, name): (title, {page, ...})} for each type of a workspace crate the
    signatures of agentloop's pages link to."""
    for crate in CRATES:
        if not ((doc_dir.parent / crate) / "index.html").is_file():
            sys.exit(f"{doc_dir.parent / crate} is missing: document it before agentloop (see "
                     "the docstring), or the types of it agentloop's signatures name are not seen")
    # The crate docs link the core and the store (its re-exports, `pub use agentloop_store as
    # store;`): if not, rustdoc did not see their docs when it documented agentloop (documented
    # before them, or alongside them: `cargo doc --no-deps` does not order crates, and removes a
    # crate's old docs before documenting it again).
    index = (doc_dir / "index.html").read_text(encoding="utf-8", errors="replace")
    for crate in CRATES:
        if not re.search(r'href="[./]*' + crate + '/', index):
            sys.exit(f"{doc_dir} does not link {crate}'s docs: document agentloop again after "
                     f"{crate} (touch src/lib.rs; see the docstring)")
    found = {}
    blocks = 0
    for rel, text in pages(doc_dir):
        for pattern in SIGNATURES:
            for block in pattern.findall(text):
                blocks += 1
                for m in CRATE_LINK.finditer(block):
                    k, title = key(m)
                    found.setdefault(k, (title, set()))[1].add(str(rel))
    # A rustdoc whose markup the patterns no longer match would find no signature, and so no
    # type: that is a failure of the check, not a clean surface.
    if blocks < 100:
        sys.exit(f"only {blocks} signatures found in {doc_dir}: has rustdoc's markup changed? "
                 "(see SIGNATURES)")
    return found


def main():
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    for f in flags:
        if f not in {"--count", "--leaks"} and not f.startswith(("--max-types=", "--max-leaks=")):
            sys.exit(f"unknown flag {f} (see the docstring)")
    doc_dir = Path(args[0]) if args else Path("target/doc/agentloop")
    found = items(doc_dir)
    named, crates = by_name(doc_dir)
    whole = []
    for alias, crate in sorted(crates.items()):
        whole.append(f"use {alias} = crate {crate}")
        whole += [f"{kind} {alias}::{path}" for kind, path in
                  items_of(doc_dir.parent / crate)]
    if not flags:
        for kind, path in found:
            print(f"{kind} {path}")
        for path in sorted(named):
            print(f"use {path} = {named[path][1]}")
        for line in whole:
            print(line)
        return
    documented = sum(1 for k, _ in found if k in TYPES)
    reexported = {k for k, _ in named.values() if k[1] in TYPES}
    signed = in_signatures(doc_dir)
    nameable = reexported | through_crates(doc_dir, crates)
    others = reexported | set(signed)
    leaked = {k: signed[k] for k in signed if k not in nameable}
    types = documented + len(others)
    summary = (f"{types} types a reader of agentloop's docs meets: {documented} it documents, "
               f"{len(others)} of the core and store crates it names ({len(reexported)} "
               f"re-exported by name, {len(others) - len(reexported) - len(leaked)} nameable "
               f"through agentloop::store, {len(leaked)} not nameable from agentloop)")
    failed = False
    max_types = [f.split("=", 1)[1] for f in flags if f.startswith("--max-types=")]
    max_leaks = [f.split("=", 1)[1] for f in flags if f.startswith("--max-leaks=")]
    if "--count" in flags:
        print(f"{summary}; {len(found) + len(named)} items (and {len(whole)} lines of the "
              "crates it re-exports whole)")
    if max_types:
        print(f"{summary}; at most {max_types[0]}")
        if types > int(max_types[0]):
            print("the public surface of agentloop has more types than allowed: make the new "
                  "ones pub(crate), or keep them out of agentloop's signatures", file=sys.stderr)
            failed = True
    if "--leaks" in flags:
        for title, where in sorted(leaked.values(), key=lambda tw: tw[0].split(" ")[-1]):
            print(f"{title}: {', '.join(sorted(where))}")
    if "--leaks" in flags or max_leaks:
        limit = f", at most {max_leaks[0]}" if max_leaks else ""
        print(f"{len(leaked)} types of the core and store crates in agentloop's signatures, "
              f"not nameable from agentloop{limit}")
        if max_leaks and len(leaked) > int(max_leaks[0]):
            print("a signature of agentloop names a type a user cannot name from agentloop "
                  "(--leaks lists them): keep it out of the signature (a builder method, a private "
                  "field, pub(crate)), or re-export it where a user looks for it", file=sys.stderr)
            failed = True
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
