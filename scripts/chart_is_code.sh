#!/usr/bin/env bash
# The chart is the code (outer machine): in a copy of the committed tree, swap the guards of
# rows planning_limit_stop and planning_limit_final in statecharts/react.toml, regenerate the
# core's code (`cargo run -p agentloop-codegen`) and rebuild, with no hand-written Rust edit. `agentloop run --max-model-calls 1 --on-limit stop` then asks for the final
# answer: two model requests instead of one. Prints both counts; exits non-zero unless 1 then 2.
# CARGO_TARGET_DIR may point at a reusable target directory (the copy's own otherwise), but not
# a checkout's own target/: cargo does not tell the copy's crates from the checkout's, so the
# checkout would then run the copy's build of the swapped chart until its sources change.
set -euo pipefail
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$root" archive HEAD | tar -x -C "$work"
# Fresh mtimes: with a reused target directory, files extracted with the commit's (older) time
# would look unchanged to cargo and an earlier build of the other chart would be reused.
find "$work" -type f -exec touch {} +
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$work/target}

requests() {
    (cd "$work" && cargo build -q -p agentloop-cli)
    mkdir -p "$work/run"
    (cd "$work/run" && "$CARGO_TARGET_DIR/debug/agentloop" run \
        --script ../examples/scripts/demo.json --max-model-calls 1 --on-limit stop \
        --events json "What is 2+3?" | grep -c '"type":"request_start"')
}

before=$(requests)
perl -0pi -e '
    s/(id = "planning_limit_stop"\n(?:[^\n]*\n){2}guard = ")limit_stop"/${1}limit_final_answer"/;
    s/(id = "planning_limit_final"\n(?:[^\n]*\n){2}guard = ")limit_final_answer"/${1}limit_stop"/;
' "$work/statecharts/react.toml"
git -C "$root" show HEAD:core/statecharts/react.toml | diff -u --label a/core/statecharts/react.toml --label b/core/statecharts/react.toml - "$work/core/statecharts/react.toml" || true
(cd "$work" && cargo run -q -p agentloop-codegen >/dev/null)
git -C "$root" show HEAD:core/src/generated/react_dispatch.rs | diff -u --label a/core/src/generated/react_dispatch.rs --label b/core/src/generated/react_dispatch.rs - "$work/core/src/generated/react_dispatch.rs" || true
after=$(requests)
echo "model requests: chart as committed $before, guards swapped $after"
[ "$before" = 1 ] && [ "$after" = 2 ]
