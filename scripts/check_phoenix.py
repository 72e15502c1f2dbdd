#!/usr/bin/env python3
"""A run's spans reach a real OTLP receiver: Arize Phoenix (from PyPI, embedded SQLite).

Usage: python scripts/check_phoenix.py AGENTLOOP_BIN   (with the venv's python, where
`arize-phoenix` is installed: scripts/requirements-phoenix.txt)

Starts `phoenix serve` on 127.0.0.1 (a free port, a temporary working directory, no gRPC
port a free one too), waits for it to answer, runs
`agentloop run --otlp-endpoint http://127.0.0.1:PORT/v1/traces` on the offline scripted model
with a prompt that calls a tool, then reads the spans back from Phoenix's REST API
(`GET /v1/projects/default/spans`) and checks the `invoke_agent`, `chat` and `execute_tool`
spans with their `gen_ai.*` attributes, their parent links, and that the content is absent
without `--otlp-content`. A second run with `--otlp-content` must carry the messages.
Phoenix is stopped at the end, whatever happened.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read().decode())


def wait_until_up(base: str, proc: subprocess.Popen, log: Path, limit_s: float = 120.0):
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if proc.poll() is not None:
            sys.exit(f"phoenix serve exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit(f"phoenix did not answer within {limit_s} s:\n{log.read_text()[-3000:]}")


def spans_of(base: str, expect: int, limit_s: float = 30.0):
    """The default project's spans, once at least `expect` arrived (ingestion is async)."""
    started = time.monotonic()
    spans = []
    while time.monotonic() - started < limit_s:
        try:
            spans = get(f"{base}/v1/projects/default/spans?limit=100")["data"]
        except OSError:
            spans = []
        if len(spans) >= expect:
            return spans
        time.sleep(0.5)
    sys.exit(f"expected {expect} spans in Phoenix, found {len(spans)}: {spans}")


def run(binary: str, endpoint: str, work: Path, *extra: str) -> str:
    out = subprocess.run(
        [binary, "run", "--otlp-endpoint", endpoint, *extra, "What is 2+3?"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0:
        sys.exit(f"agentloop run failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    if "[otlp] sent 4 spans" not in out.stderr:
        sys.exit(f"agentloop run did not send its spans:\n{out.stderr}")
    return out.stderr


def check(spans, content: bool, session: str):
    by_name = {}
    for s in spans:
        by_name.setdefault(s["name"], []).append(s)
    names = sorted(by_name)
    want = ["chat scripted", "execute_tool calculator", "invoke_agent agentloop"]
    if names != want:
        sys.exit(f"span names {names}, want {want}")
    if len(by_name["chat scripted"]) != 2:
        sys.exit(f"want 2 chat spans: {by_name['chat scripted']}")

    def attrs(s):
        return s.get("attributes") or {}

    root = by_name["invoke_agent agentloop"][0]
    ops = {s["name"]: attrs(s).get("gen_ai.operation.name") for s in spans}
    if ops != {
        "invoke_agent agentloop": "invoke_agent",
        "chat scripted": "chat",
        "execute_tool calculator": "execute_tool",
    }:
        sys.exit(f"gen_ai.operation.name per span: {ops}")
    root_id = root["context"]["span_id"]
    for s in spans:
        if s is not root and s.get("parent_id") != root_id:
            sys.exit(f"{s['name']} is not a child of invoke_agent: {s}")
    for s in by_name["chat scripted"]:
        a = attrs(s)
        if a.get("gen_ai.request.model") != "scripted" or not a.get("gen_ai.usage.input_tokens"):
            sys.exit(f"chat span without model or usage: {a}")
        if ("gen_ai.input.messages" in a) != content:
            sys.exit(f"chat span content {'missing' if content else 'present'}: {a}")
    tool = attrs(by_name["execute_tool calculator"][0])
    if tool.get("gen_ai.tool.name") != "calculator" or not tool.get("gen_ai.tool.call.id"):
        sys.exit(f"execute_tool span attributes: {tool}")
    if content and "5" not in str(tool.get("gen_ai.tool.call.result")):
        sys.exit(f"execute_tool result missing: {tool}")
    if attrs(root).get("gen_ai.conversation.id") != session:
        sys.exit(f"invoke_agent attributes: {attrs(root)}")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        port = free_port()
        env = dict(
            os.environ,
            PHOENIX_WORKING_DIR=str(tmp / "phoenix"),
            PHOENIX_HOST="127.0.0.1",
            PHOENIX_PORT=str(port),
            PHOENIX_GRPC_PORT=str(free_port()),
            PHOENIX_TELEMETRY_ENABLED="false",
        )
        log = tmp / "phoenix.log"
        phoenix = Path(sys.executable).parent / "phoenix"
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [str(phoenix), "serve"], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            base = f"http://127.0.0.1:{port}"
            up = wait_until_up(base, proc, log)
            print(f"phoenix up in {up:.1f} s")
            endpoint = f"{base}/v1/traces"
            work = tmp / "work"
            work.mkdir()
            # A collector that is down costs a warning, not the run.
            down = subprocess.run(
                [binary, "run", "--otlp-endpoint", f"http://127.0.0.1:{free_port()}/v1/traces",
                 "What is 2+3?"],
                cwd=work, capture_output=True, text=True, timeout=60,
            )
            if down.returncode != 0 or "[otlp] warning: spans not sent" not in down.stderr:
                sys.exit(f"a collector that is down: {down.returncode}\n{down.stderr}")
            run(binary, endpoint, work)
            spans = spans_of(base, 4)
            check(spans, content=False, session="default")
            print(f"phoenix holds the run's 4 spans with gen_ai.* attributes: {sorted(s['name'] for s in spans)}")
            # With content, in another session (told apart by gen_ai.conversation.id).
            run(binary, endpoint, work, "--otlp-content", "--session", "with-content")
            all_spans = spans_of(base, 8)
            with_content = [
                s for s in all_spans
                if (s.get("attributes") or {}).get("gen_ai.conversation.id") == "with-content"
            ]
            if len(with_content) != 4:
                sys.exit(f"want 4 spans of the second run: {with_content}")
            check(with_content, content=True, session="with-content")
            print("with --otlp-content the spans carry the messages")
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(f"Phoenix check: {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
