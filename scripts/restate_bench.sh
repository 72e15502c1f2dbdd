#!/usr/bin/env bash
# Throughput of the release worker (docs/scale-out.md, "Measured"): one session of 121 steps
# (each a model ctx.run and an append_line ctx.run), then 20 sessions at once of 31 steps each.
# Build first: cargo build --release -p agentloop-restate; scripts/restate_up.sh install.
# Uses the fixed ports of restate_up.sh (8080, 9070, 5122) and 9080.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release/agentloop-restate}
D=$(mktemp -d)

PID=$(scripts/restate_up.sh start "$D/rd")
mkdir -p "$D/root"
python3 - "$D" <<'PY'
import json, sys
d = sys.argv[1]
t = [{"text": "Let me calculate that.", "tool_calls": [{"name": "calculator", "arguments": {"expression": "{{prompt_expression}}"}}]},
     {"text": "The answer is {{last_tool_result}}."}]
t += [{"tool_calls": [{"name": "append_line", "arguments": {"path": "out.txt", "line": f"line {i}"}}]} for i in range(120)]
t += [{"text": "done"}]
json.dump({"turns": t}, open(f"{d}/one.json", "w"))
t = [{"tool_calls": [{"name": "append_line", "arguments": {"path": "s{{prompt_expression}}.txt", "line": f"line {k}"}}]} for k in range(30)]
t += [{"text": "done"}]
json.dump({"turns": t}, open(f"{d}/many.json", "w"))
PY
"$BIN" serve --script "$D/one.json" --root "$D/root" --max-steps 1000 2>/dev/null &
W=$!
sleep 0.5
scripts/restate_up.sh register >/dev/null
P='curl -s -X POST 127.0.0.1:8080/Session/m1/prompt -H content-type:application/json'
$P -d '{"prompt": "What is 2+3?"}' >/dev/null
s=$(date +%s.%N); $P -d '{"prompt": "go"}'; e=$(date +%s.%N); echo
python3 -c "print(f'one session: 121 steps in {$e-$s:.2f} s = {121/($e-$s):.1f} steps/s')"
kill $W; wait $W 2>/dev/null || true
"$BIN" serve --script "$D/many.json" --root "$D/root" --max-steps 1000 2>/dev/null &
W=$!
sleep 0.5
scripts/restate_up.sh register >/dev/null
s=$(date +%s.%N)
for n in $(seq 1 20); do
  curl -s -X POST 127.0.0.1:8080/Session/p$n/prompt -H content-type:application/json -d "{\"prompt\": \"session $n\"}" >/dev/null &
done
wait $(jobs -p | grep -v "^$W$") 2>/dev/null || true
e=$(date +%s.%N)
python3 -c "print(f'20 sessions at once: 620 steps in {$e-$s:.2f} s = {620/($e-$s):.0f} steps/s')"
wc -l "$D"/root/s*.txt | tail -1
kill $W; scripts/restate_up.sh stop "$PID"; sleep 1; kill -9 "$PID" 2>/dev/null || true
rm -rf "$D"
