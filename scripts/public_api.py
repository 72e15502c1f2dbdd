#!/usr/bin/env python3
"""Print the public surface of the `agentloop` crate, one `kind path` line per item.

Reads the rustdoc output of `cargo doc -p agentloop --no-deps --features
sqlite-store,postgres-store` (target/doc/agentloop/all.html): every feature a program enables,
none of the test-only ones (`wire`, `fuzzing`, `fault-injection`, `testing`), so the list is exactly what
a user can reach from the docs. CI regenerates it and diffs it against docs/public-api.txt: a
changed surface must be a deliberate commit.

Usage: scripts/public_api.py [DOC_DIR] [--count] [--max-types=N]

--max-types=N: print the count, and fail when there are more than N types.
"""
import html
import re
import sys
from pathlib import Path

TYPES = {"struct", "enum", "trait", "type", "union"}


def items(doc_dir: Path):
    text = (doc_dir / "all.html").read_text(encoding="utf-8")
    out = set()
    for href, label in re.findall(r'<a href="([^"]+\.html)">([^<]+)</a>', text):
        kind = Path(href).name.split(".", 1)[0]
        if kind in {"index", "all"}:
            continue
        out.add((kind, "agentloop::" + html.unescape(label)))
    return sorted(out, key=lambda kp: (kp[1], kp[0]))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    doc_dir = Path(args[0]) if args else Path("target/doc/agentloop")
    found = items(doc_dir)
    limit = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--max-types=")]
    if limit:
        types = sum(1 for k, _ in found if k in TYPES)
        print(f"{types} types (struct/enum/trait/type), at most {limit[0]}")
        if types > int(limit[0]):
            print("the public surface of agentloop has more types than allowed: make the new "
                  "ones pub(crate), or re-export them from one place", file=sys.stderr)
            sys.exit(1)
        return
    if "--count" in sys.argv:
        types = sum(1 for k, _ in found if k in TYPES)
        print(f"{types} types (struct/enum/trait/type), {len(found)} items")
        return
    for kind, path in found:
        print(f"{kind} {path}")


if __name__ == "__main__":
    main()
