"""Checks `agentloop trace export --format inspect` against the real Inspect AI.

Records two runs on the built-in demo model (no key, no network), exports them as one Inspect
eval log, in its JSON form and as a `.eval` zip, and reads each with
`inspect_ai.log.read_eval_log`: two samples, each with the user's
question, the assistant's tool call, the tool's result and the final answer as messages, a
model event per step with its token usage, and the usage per model. Run it with the Python
that has the pinned inspect-ai (scripts/fixtures/requirements-inspect.txt):

    python scripts/check_inspect_export.py target/debug/agentloop
"""

import pathlib
import subprocess
import sys
import tempfile

from inspect_ai.log import read_eval_log


def run(*args):
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, args))}: exit {done.returncode}\n{done.stdout}{done.stderr}")
    return done.stdout


def check(log, log_path):
    """The exported log as Inspect read it: two samples of the demo's calculator run."""
    assert log.status == "success", log.status
    samples = log.samples or []
    assert [s.id for s in samples] == ["again", "two_plus_three"], [s.id for s in samples]
    for s in samples:
        roles = [m.role for m in s.messages]
        assert roles == ["user", "assistant", "tool", "assistant"], (s.id, roles)
        assert "2+3" in s.input, s.input
        call = s.messages[1].tool_calls[0]
        assert call.function == "calculator", call
        assert s.messages[2].text == "5", s.messages[2].text
        assert "5" in s.output.completion, s.output.completion
        assert s.error is None, s.error
        models = [e for e in s.events if e.event == "model"]
        tools = [e for e in s.events if e.event == "tool"]
        assert len(models) == 2 and len(tools) == 1, [e.event for e in s.events]
        for e in models:
            u = e.output.usage
            assert u is not None and u.input_tokens > 0 and u.output_tokens > 0, u
            assert u.total_tokens == u.input_tokens + u.output_tokens, u
            assert [t.name for t in e.tools] == ["append_line", "calculator", "read_file"], e.tools
        # The model event's input, stored as a range of the messages, reads back whole.
        assert [m.role for m in models[1].input] == ["user", "assistant", "tool"], models[1].input
        assert tools[0].result == "5", tools[0].result
        [(model, total)] = s.model_usage.items()
        assert total.input_tokens == sum(e.output.usage.input_tokens for e in models), total
    assert log.stats.model_usage, log.stats
    print(f"{log_path.name}: Inspect read {len(samples)} samples, "
          f"{sum(len(s.events) for s in samples)} events, usage {dict(log.stats.model_usage)}")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_inspect_export.py AGENTLOOP_BIN")
    agentloop = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        traces = tmp / "traces"
        traces.mkdir()
        for name, question in [("two_plus_three", "What is 2+3?"), ("again", "What is 2+3, again?")]:
            run(agentloop, "run", "--trace", traces / f"{name}.jsonl", question)
        for name in ("log.json", "log.eval"):
            log_path = tmp / name
            run(agentloop, "trace", "export", "--format", "inspect", traces, "-o", log_path)
            check(read_eval_log(str(log_path)), log_path)


if __name__ == "__main__":
    main()
