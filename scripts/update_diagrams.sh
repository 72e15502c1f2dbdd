#!/usr/bin/env bash
# Regenerates statecharts/*.mmd, the diagrams in README.md and the session diagram in
# docs/architecture.md from statecharts/*.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run -q --bin agentloop -- chart react > statecharts/react.mmd
cargo run -q --bin agentloop -- chart process > statecharts/process.mmd
cargo run -q --bin agentloop -- chart tool-call > statecharts/tool_call.mmd
cargo run -q --bin agentloop -- chart session > statecharts/session.mmd
python3 - <<'PY'
import re
readme = open("README.md").read()
blocks = [m for m in re.finditer(r"```mermaid\n.*?```", readme, re.S)]
new = ["```mermaid\n" + open(f"statecharts/{n}.mmd").read() + "```" for n in ("react", "process", "tool_call")]
for m, text in reversed(list(zip(blocks, new))):
    readme = readme[: m.start()] + text + readme[m.end():]
open("README.md", "w").write(readme)
arch = open("docs/architecture.md").read()
m = re.search(r"```mermaid\n---\ntitle: Session machine\n.*?```", arch, re.S)
if m:
    arch = arch[: m.start()] + "```mermaid\n" + open("statecharts/session.mmd").read() + "```" + arch[m.end():]
    open("docs/architecture.md", "w").write(arch)
PY
