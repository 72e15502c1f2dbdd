#!/usr/bin/env bash
# Starts a local Restate server for agentloop-restate (docs/scale-out.md).
#
#   scripts/restate_up.sh install            # npm-installs @restatedev/restate-server (~225 MB) into the cache
#   scripts/restate_up.sh start DIR          # starts it on 127.0.0.1 with its data in DIR; prints its pid
#   scripts/restate_up.sh register [URI]     # registers a worker (default http://127.0.0.1:9080)
#   scripts/restate_up.sh stop PID
#
# Ports: ingress 8080, admin 9070, node 5122. Telemetry off. The server is BSL 1.1 (self-hosting
# allowed); it is installed from the npm registry, never downloaded as a loose binary.
set -euo pipefail
VERSION="${RESTATE_SERVER_VERSION:-1.7.12}"
CACHE="${RESTATE_CACHE:-$HOME/.cache/agentloop/restate-$VERSION}"
BIN="$CACHE/node_modules/.bin/restate-server"
ADMIN="${RESTATE_ADMIN:-http://127.0.0.1:9070}"
INGRESS="${RESTATE_INGRESS:-http://127.0.0.1:8080}"

cmd="${1:-}"
case "$cmd" in
  install)
    if [ ! -x "$BIN" ]; then
      mkdir -p "$CACHE"
      npm install --silent --no-audit --no-fund --prefix "$CACHE" "@restatedev/restate-server@$VERSION" >&2
    fi
    test -x "$BIN"
    echo "$BIN"
    ;;
  start)
    dir="${2:?usage: restate_up.sh start DIR}"
    "$0" install >/dev/null
    mkdir -p "$dir"
    # The native binary of the platform package, not the node wrapper in .bin: the pid printed
    # is then the server's own, and `stop PID` (or a kill) stops it.
    native="$(find "$CACHE/node_modules/@restatedev" -path '*/bin/restate-server' -type f | head -1)"
    RESTATE_DISABLE_TELEMETRY=true nohup "${native:-$BIN}" --bind-ip 127.0.0.1 --base-dir "$dir" \
      >"$dir/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 120); do
      if curl -fsS "$ADMIN/health" >/dev/null 2>&1 && curl -fsS "$INGRESS/restate/health" >/dev/null 2>&1; then
        echo "$pid"
        exit 0
      fi
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "restate-server exited; see $dir/server.log" >&2
        tail -20 "$dir/server.log" >&2
        exit 1
      fi
      sleep 0.5
    done
    echo "restate-server did not answer on $ADMIN (admin) and $INGRESS (ingress) within 60 s" >&2
    kill "$pid" 2>/dev/null || true
    exit 1
    ;;
  register)
    uri="${2:-http://127.0.0.1:9080}"
    for _ in $(seq 1 60); do
      if curl -fsS -X POST "$ADMIN/deployments" -H 'content-type: application/json' \
        -d "{\"uri\": \"$uri\", \"force\": true}" >/dev/null 2>&1; then
        echo "registered $uri"
        exit 0
      fi
      sleep 0.5
    done
    echo "could not register $uri with $ADMIN" >&2
    exit 1
    ;;
  stop)
    pid="${2:?usage: restate_up.sh stop PID}"
    kill "$pid" 2>/dev/null || true
    ;;
  *)
    sed -n '2,10p' "$0"
    exit 2
    ;;
esac
