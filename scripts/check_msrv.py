#!/usr/bin/env python3
"""MSRV check without a second toolchain: every workspace crate's declared `rust-version` must be
at least the highest `rust-version` declared by any crate in its resolved normal and build
dependency graph (from Cargo.lock, via `cargo metadata`). CI machines have one toolchain and
cannot fetch another, so this is the verification `.ci/run` does; `cargo +1.88 check` is the
stronger check where a 1.88 toolchain is installed."""
import json
import subprocess
import sys


def ver(s):
    return tuple(int(x) for x in s.split(".")) + (0,) * (3 - len(s.split(".")))


meta = json.loads(
    subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
)
pkgs = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
failed = False
for member in meta["workspace_members"]:
    declared = pkgs[member].get("rust_version")
    if declared is None:
        print(f"{pkgs[member]['name']}: no rust-version declared")
        failed = True
        continue
    seen, stack, worst = set(), [member], None
    while stack:
        pid = stack.pop()
        for dep in nodes[pid]["deps"]:
            kinds = {k["kind"] for k in dep["dep_kinds"]}
            if not (kinds & {None, "build"}):
                continue  # dev-dependencies do not bind users
            if dep["pkg"] in seen:
                continue
            seen.add(dep["pkg"])
            stack.append(dep["pkg"])
            rv = pkgs[dep["pkg"]].get("rust_version")
            if rv and (worst is None or ver(rv) > ver(worst[0])):
                worst = (rv, pkgs[dep["pkg"]]["name"], pkgs[dep["pkg"]]["version"])
    name = pkgs[member]["name"]
    if worst and ver(worst[0]) > ver(declared):
        print(f"{name}: declares rust-version {declared}, but {worst[1]} {worst[2]} needs {worst[0]}")
        failed = True
    else:
        need = f"{worst[0]} ({worst[1]} {worst[2]})" if worst else "nothing"
        print(f"{name}: rust-version {declared} >= highest dependency requirement {need}")
sys.exit(1 if failed else 0)
