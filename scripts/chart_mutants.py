#!/usr/bin/env python3
"""Chart mutation testing: cargo-mutants for the statecharts.

Makes plausible mistakes in `statecharts/*.toml`, one at a time, in a copy of the project, and
runs the project's checks against each: does anything notice?

Operators (each a mistake a person editing a chart makes):
  retarget   a transition row goes to another state of its machine
  swap       two adjacent rows of one state and event, both guarded, trade places (priority)
  guard      a row's guard is replaced by a sibling's (another guard of the same event)
  drop-effect  a declared effect (one without `?`) is removed from a row
  add-effect   an effect another row declares is added to a row, as always produced
  drop-row   a row is removed

Each mutant is regenerated (`cargo run -p agentloop-codegen`) and built; one the generator
or the compiler refuses is "not built" (the chart's own validation
caught it). A built mutant is "caught" when the check command fails, else it "survives".
The report: caught / built / total, every survivor named (file, row, edit).

  python3 scripts/chart_mutants.py --list                  # every mutant, numbered
  python3 scripts/chart_mutants.py --sample 6              # a fixed, evenly spread sample
  python3 scripts/chart_mutants.py                         # all of them (hours)
  python3 scripts/chart_mutants.py --only 12,40 --check 'cargo test -q -p agentloop-core'
  python3 scripts/chart_mutants.py --match 'retarget calling_opened' --min-score 1

The default checks are the project's documented ones, in this order: the model checker
(`cargo run --profile verify -p agentloop-verify -- --quick`: properties written from the
specification, never from the chart), then the core suite (`cargo test -p agentloop-core`,
scenario tests, proptest invariants and the conformance oracle). Each result names the first
check that caught the mutant, so a mutant only the chart-derived oracle notices shows as such
(`--check` may be given more than once). Results go to target/chart-mutants.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHARTS = ["react", "process", "tool_call", "session"]
CHART_DIR = ROOT / "core" / "statecharts"


@dataclass
class Block:
    """One `[[kind]]` table of a chart, as its lines (the file's text, kept byte for byte)."""

    kind: str
    lines: list[str]
    fields: dict[str, str] = field(default_factory=dict)

    def get(self, key: str) -> str | None:
        raw = self.fields.get(key)
        if raw is None:
            return None
        m = re.fullmatch(r'"(.*)"', raw.strip())
        return m.group(1) if m else raw.strip()

    def effects(self) -> list[str]:
        raw = self.fields.get("effects")
        return json.loads(raw) if raw else []


def parse(text: str) -> tuple[list[str], list[Block]]:
    """The lines before the first table, and the tables in order."""
    head: list[str] = []
    blocks: list[Block] = []
    for line in text.splitlines(keepends=True):
        m = re.match(r"^\[\[(\w+)\]\]\s*$", line)
        if m:
            blocks.append(Block(m.group(1), [line]))
        elif blocks:
            blocks[-1].lines.append(line)
            kv = re.match(r"^(\w+)\s*=\s*(.*?)\s*$", line)
            if kv:
                blocks[-1].fields[kv.group(1)] = kv.group(2)
        else:
            head.append(line)
    return head, blocks


def render(head: list[str], blocks: list[Block]) -> str:
    return "".join(head) + "".join("".join(b.lines) for b in blocks)


def set_field(block: Block, key: str, value: str) -> Block:
    lines = []
    done = False
    for line in block.lines:
        if re.match(rf"^{key}\s*=", line):
            lines.append(f"{key} = {value}\n")
            done = True
        else:
            lines.append(line)
    if not done:
        # After the table's header line.
        lines.insert(1, f"{key} = {value}\n")
    return Block(block.kind, lines, {**block.fields, key: value})


@dataclass
class Mutant:
    chart: str
    op: str
    row: str
    edit: str
    text: str

    def name(self) -> str:
        return f"{self.chart}.toml {self.op} {self.row}: {self.edit}"


def mutants_of(chart: str) -> list[Mutant]:
    text = (CHART_DIR / f"{chart}.toml").read_text()
    head, blocks = parse(text)
    states = [b.get("name") for b in blocks if b.kind == "state"]
    rows = [(i, b) for i, b in enumerate(blocks) if b.kind == "row"]
    out: list[Mutant] = []

    def with_block(i: int, new: Block | None) -> str:
        copy = list(blocks)
        if new is None:
            del copy[i]
        else:
            copy[i] = new
        return render(head, copy)

    for i, b in rows:
        rid = b.get("id") or f"#{i}"
        kind = b.get("kind") or "transition"
        to, frm, event, guard = b.get("to"), b.get("from"), b.get("event"), b.get("guard")
        # retarget: the next state of the machine (declaration order) that is neither the
        # row's target nor its source.
        if kind == "transition" and to in states:
            k = states.index(to)
            for step in range(1, len(states)):
                cand = states[(k + step) % len(states)]
                if cand not in (to, frm):
                    out.append(Mutant(chart, "retarget", rid, f"to {to} -> {cand}",
                                      with_block(i, set_field(b, "to", f'"{cand}"'))))
                    break
        # guard: a sibling's guard (another row of the same event with another guard).
        if guard and guard != "otherwise":
            siblings = [o.get("guard") for _, o in rows
                        if o.get("event") == event and o.get("guard") not in (None, guard, "otherwise")]
            if siblings:
                g = siblings[0]
                out.append(Mutant(chart, "guard", rid, f"guard {guard} -> {g}",
                                  with_block(i, set_field(b, "guard", f'"{g}"'))))
        effects = b.effects()
        sure = [e for e in effects if not e.endswith("?")]
        if sure:
            e = sure[0]
            rest = [x for x in effects if x != e]
            out.append(Mutant(chart, "drop-effect", rid, f"effect {e} removed",
                              with_block(i, set_field(b, "effects", json.dumps(rest)))))
        # add-effect: the first effect another row declares that this one does not.
        others = [e.rstrip("?") for _, o in rows for e in o.effects()]
        new = next((e for e in others if e not in [x.rstrip("?") for x in effects]), None)
        if new:
            out.append(Mutant(chart, "add-effect", rid, f"effect {new} added",
                              with_block(i, set_field(b, "effects", json.dumps(effects + [new])))))
        out.append(Mutant(chart, "drop-row", rid, "row removed", with_block(i, None)))
    # swap: adjacent rows of one state and event, both guarded.
    for (i, a), (j, b) in zip(rows, rows[1:]):
        if j == i + 1 and a.get("from") == b.get("from") and a.get("event") == b.get("event") \
                and a.get("guard") and b.get("guard"):
            copy = list(blocks)
            copy[i], copy[j] = b, a
            out.append(Mutant(chart, "swap", f"{a.get('id')}<->{b.get('id')}",
                              "adjacent guarded rows swapped", render(head, copy)))
    return out


def all_mutants() -> list[Mutant]:
    return [m for c in CHARTS for m in mutants_of(c)]


def sample(ms: list[Mutant], n: int) -> list[int]:
    """`n` indices spread evenly over the list, each operator represented where it can be."""
    if n >= len(ms):
        return list(range(len(ms)))
    by_op: dict[str, list[int]] = {}
    for k, m in enumerate(ms):
        by_op.setdefault(m.op, []).append(k)
    picked: list[int] = []
    ops = sorted(by_op)
    r = 0
    while len(picked) < n:
        for op in ops:
            ks = by_op[op]
            # The r-th of a fixed stride through this operator's mutants.
            stride = max(1, len(ks) // max(1, n // len(ops) + 1))
            pos = (r * stride + stride // 2) % len(ks)
            if ks[pos] not in picked and len(picked) < n:
                picked.append(ks[pos])
        r += 1
        if r > len(ms):
            break
    return sorted(picked)


def default_checks(workdir: Path) -> list[str]:
    checks = []
    if (workdir / "verify" / "Cargo.toml").is_file():
        checks.append("cargo run -q --profile verify -p agentloop-verify -- --quick")
    checks.append("cargo test -q -p agentloop-core")
    return checks


def copy_project(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src = ROOT / f
        dst = dest / f
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            if not dst.is_symlink():
                os.symlink(os.readlink(src), dst)
        elif src.is_file():
            # Only what differs, with a fresh modification time: cargo judges freshness by
            # mtime, and a copy that kept the source's older time would let a build of a
            # mutant from an earlier run pass for a build of this file.
            if not dst.is_file() or dst.read_bytes() != src.read_bytes():
                shutil.copyfile(src, dst)
                shutil.copymode(src, dst)


def run(cmd: str, cwd: Path, env: dict[str, str], timeout: int) -> tuple[str, str]:
    """("ok" | "fail" | "timeout", last lines of output)."""
    try:
        p = subprocess.run(cmd, shell=True, cwd=cwd, env=env, capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", ""
    tail = "\n".join((p.stdout + p.stderr).splitlines()[-8:])
    return ("ok" if p.returncode == 0 else "fail"), tail


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print the mutants and exit")
    ap.add_argument("--sample", type=int, help="run a fixed sample of N mutants")
    ap.add_argument("--only", help="comma-separated mutant numbers (from --list)")
    ap.add_argument("--match", action="append",
                    help="the mutants whose name contains this text (repeat for several)")
    ap.add_argument("--check", action="append",
                    help="a check command; repeat for several (default: model checker, core suite)")
    ap.add_argument("--build", default="cargo build -q -p agentloop-core",
                    help="the build that tells a mutant the compiler refuses (\"not built\") "
                         "from one a check catches; build what the checks run, in their profile")
    ap.add_argument("--workdir", default=str(ROOT / "target" / "chart-mutants" / "project"),
                    help="where the project copy lives (kept between runs)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per mutant")
    ap.add_argument("--min-score", type=float, default=0.0,
                    help="fail when caught/built is below this fraction")
    args = ap.parse_args()

    ms = all_mutants()
    if args.list:
        for k, m in enumerate(ms):
            print(f"{k:4} {m.name()}")
        print(f"{len(ms)} mutants", file=sys.stderr)
        return 0
    if args.only:
        try:
            picked = [int(x) for x in args.only.split(",") if x.strip()]
        except ValueError:
            print(f"--only takes numbers: {args.only!r}", file=sys.stderr)
            return 2
        if any(not 0 <= k < len(ms) for k in picked):
            print(f"--only: numbers run from 0 to {len(ms) - 1}", file=sys.stderr)
            return 2
    elif args.match:
        picked = [k for k, m in enumerate(ms) if any(t in m.name() for t in args.match)]
        if not picked:
            print(f"--match: no mutant's name contains {args.match}", file=sys.stderr)
            return 2
    elif args.sample is not None:
        picked = sample(ms, args.sample)
    else:
        picked = list(range(len(ms)))

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    copy_project(work)
    env = dict(os.environ)
    # A target directory of the copy's own: `cargo run` runs the binary uplifted to the target
    # directory's root, which a shared directory would hand over from the other checkout.
    env["CARGO_TARGET_DIR"] = str(work.parent / "target")
    checks = args.check or default_checks(work)
    charts = {c: (CHART_DIR / f"{c}.toml").read_text() for c in CHARTS}
    generated = {f: f.read_text() for f in (work / "core" / "src" / "generated").glob("*.rs")}
    # The unmutated project must pass every check, or nothing below means anything.
    for check in checks:
        print(f"check: {check}", flush=True)
        status, tail = run(check, work, env, args.timeout)
        if status != "ok":
            print(f"the check fails on the unmutated charts ({status}):\n{tail}",
                  file=sys.stderr)
            return 2
    results = []
    for k in picked:
        m = ms[k]
        target = work / "core" / "statecharts" / f"{m.chart}.toml"
        target.write_text(m.text)
        started = time.monotonic()
        # The dispatch is generated from the charts and committed: regenerate, then build.
        built, _ = run(f"cargo run -q -p agentloop-codegen && {args.build}",
                       work, env, args.timeout)
        verdict, by = "survived", None
        if built != "ok":
            verdict = "not built"
        else:
            for check in checks:
                status, _ = run(check, work, env, args.timeout)
                if status != "ok":
                    verdict, by = "caught", check
                    break
        target.write_text(charts[m.chart])
        for f, text in generated.items():
            f.write_text(text)
        secs = time.monotonic() - started
        print(f"{k:4} {verdict:9} {secs:6.0f} s  {m.name()}" + (f"  [by {by}]" if by else ""),
              flush=True)
        results.append({"n": k, "mutant": m.name(), "verdict": verdict, "caught_by": by,
                        "seconds": round(secs)})
    built = [r for r in results if r["verdict"] != "not built"]
    caught = [r for r in built if r["verdict"] == "caught"]
    survivors = [r for r in built if r["verdict"] == "survived"]
    print(f"\n{len(caught)} caught / {len(built)} built / {len(results)} tried "
          f"(of {len(ms)} mutants)")
    for r in survivors:
        print(f"SURVIVED {r['n']}: {r['mutant']}")
    out = ROOT / "target" / "chart-mutants.json"
    for check in checks:
        n = sum(1 for r in caught if r["caught_by"] == check)
        print(f"  caught by {check}: {n}")
    out.write_text(json.dumps({"checks": checks, "results": results}, indent=1))
    score = len(caught) / len(built) if built else 1.0
    if score < args.min_score:
        print(f"score {score:.2f} is below {args.min_score:.2f}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
