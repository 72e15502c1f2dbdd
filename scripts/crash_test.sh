#!/usr/bin/env bash
# Kill-and-resume crash test against the release binary (issue 4, item 6).
#
#   scripts/crash_test.sh [ROUNDS] [SEED]
#
# Each round starts `agentloop run --session` on examples/scripts/crash_many.json (24 steps
# of parallel and single append_line calls), SIGKILLs it after a random delay, then runs
# `agentloop resume` (killing it again at random) until it exits 0, and checks:
#   - no append_line call id is in the side-effect file twice, and every call with a
#     `completed` result is there exactly once (an `outcome_unknown` call: at most once);
#   - `agentloop sessions check` exits 0;
#   - the final answer is stored and the run ended completed.
# ROUNDS (default 10) sessions of KILLS (default 12) killed attempts each, then a last
# attempt that runs to the end; SEED (default 4242) seeds bash's $RANDOM; MAX_DELAY_US
# (default 40000) bounds the kill delay. KEEP=1 keeps the work directory.
# Needs: cargo, bash, python3 (for the checks).
set -euo pipefail

ROUNDS=${1:-10}
SEED=${2:-4242}
MAX_DELAY_US=${MAX_DELAY_US:-40000}
KILLS=${KILLS:-12}
RANDOM=$SEED

cd "$(dirname "$0")/.."
SCRIPT="$PWD/examples/scripts/crash_many.json"
cargo build --release --quiet --bin agentloop
BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/agentloop"

WORK=$(mktemp -d)
if [[ "${KEEP:-0}" != 1 ]]; then trap 'rm -rf "$WORK"' EXIT; else echo "work dir: $WORK"; fi
STORE="$WORK/store"

kills=0
for round in $(seq 1 "$ROUNDS"); do
  S="crash-$round"
  ROOT="$WORK/$S"
  mkdir -p "$ROOT"
  attempts=0
  while :; do
    attempts=$((attempts + 1))
    if [[ $attempts -gt 1000 ]]; then echo "round $round: no completion after 1000 attempts" >&2; exit 1; fi
    if grep -qs '"entry":"user_input"' "$STORE/$S.jsonl"; then
      cmd=("$BIN" resume "$S")
    else
      cmd=("$BIN" run --session "$S" go)
    fi
    "${cmd[@]}" --store "$STORE" --script "$SCRIPT" --root "$ROOT" --max-steps 100 \
      >/dev/null 2>"$WORK/stderr" &
    pid=$!
    # A random delay of 0..MAX_DELAY_US microseconds, then SIGKILL (if still running).
    if (( attempts <= KILLS )); then
      delay=$(( (RANDOM * 32768 + RANDOM) % MAX_DELAY_US ))
      sleep "$(printf '0.%06d' "$delay")"
      if kill -KILL "$pid" 2>/dev/null; then
        wait "$pid" 2>/dev/null || true
        kills=$((kills + 1))
        continue
      fi
    fi
    if wait "$pid"; then break; fi
    echo "round $round: '${cmd[*]}' failed:" >&2
    cat "$WORK/stderr" >&2
    exit 1
  done

  "$BIN" sessions check "$S" --store "$STORE" >/dev/null
  python3 - "$STORE/$S.jsonl" "$ROOT/side_effects.txt" "$S" <<'PY'
import collections, json, sys
session_file, effects_file, session = sys.argv[1:]
entries = [json.loads(l) for l in open(session_file)]
results = {e["result"]["tool_call_id"]: e["result"]["status"] for e in entries if e["entry"] == "tool_result"}
try:
    lines = [l for l in open(effects_file).read().splitlines() if l]
except FileNotFoundError:
    lines = []
count = collections.Counter(w[5:] for l in lines for w in l.split() if w.startswith("call="))
bad = []
for cid, n in count.items():
    if n > 1:
        bad.append(f"{cid} appears {n} times")
for cid, status in results.items():
    if status == "completed" and count[cid] != 1:
        bad.append(f"{cid} completed but appears {count[cid]} times")
last = entries[-1]
if not (last["entry"] == "run_end" and last["outcome"] == "completed"):
    bad.append(f"last entry is not a completed run end: {last}")
if bad:
    sys.exit(f"{session}: " + "; ".join(bad))
unknown = sum(1 for s in results.values() if s == "outcome_unknown")
print(f"{session}: ok ({len(results)} calls, {unknown} outcome_unknown, {len(entries)} entries)")
PY
done
echo "crash test passed: $ROUNDS sessions, $kills kills (seed $SEED)"
