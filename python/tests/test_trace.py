"""The agentloop Python package against traces the `agentloop` command records.

Run from a checkout after `pip install ./python pandas pytest`:

    cargo build -p agentloop-cli && python -m pytest python/tests

AGENTLOOP_BIN names the CLI binary (default: target/debug/agentloop of this checkout).
"""

import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

import agentloop

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("AGENTLOOP_BIN", str(ROOT / "target" / "debug" / "agentloop"))

# Three calculator steps, then an answer: four model steps, three tool calls.
SCRIPT = {
    "description": "three calculator steps, then an answer",
    "turns": [
        {"text": f"Step {i}.", "tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i}+{i}"}}]}
        for i in range(1, 4)
    ]
    + [{"text": "Done: 2, 4, 6."}],
}


def agentloop_cli(*args, cwd):
    if not os.path.exists(BIN):
        raise unittest.SkipTest(f"{BIN} not found: run `cargo build -p agentloop-cli` or set AGENTLOOP_BIN")
    return subprocess.run([BIN, *args], cwd=cwd, check=True, capture_output=True, text=True)


def record(directory, name, *extra):
    """Records a trace with the CLI's offline scripted model; returns its path."""
    agentloop_cli("run", "What is 2+3?", "--trace", name, *extra, cwd=directory)
    return os.path.join(directory, name)


def same(a, b):
    """Equal, with pandas' NaN for a missing number standing for None."""
    missing = lambda v: v is None or (isinstance(v, float) and math.isnan(v))
    return (missing(a) and missing(b)) or a == b


class TraceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name
        cls.demo = record(cls.dir, "demo.jsonl")
        script = os.path.join(cls.dir, "script.json")
        with open(script, "w") as f:
            json.dump(SCRIPT, f)
        cls.scripted = record(cls.dir, "scripted.jsonl", "--script", "script.json")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_a_recorded_trace_loads_and_replays_identically(self):
        for path in (self.demo, self.scripted):
            t = agentloop.Trace.load(path)
            self.assertEqual(t.version, agentloop.TRACE_VERSION)
            self.assertGreater(len(t), 0)
            self.assertIsNone(t.replay())

    def test_steps_is_a_data_frame_with_one_row_per_step(self):
        import pandas

        t = agentloop.Trace.load(self.scripted)
        steps = t.steps()
        self.assertIsInstance(steps, pandas.DataFrame)
        self.assertEqual(len(steps), 4)
        self.assertEqual(t.summary()["steps"], 4)
        self.assertEqual(list(steps["step"]), [1, 2, 3, 4])
        self.assertEqual(list(steps["tool_calls"]), [1, 1, 1, 0])
        self.assertEqual(steps["text"].iloc[-1], "Done: 2, 4, 6.")
        calls = t.tool_calls()
        self.assertEqual(len(calls), 3)
        self.assertEqual(set(calls["tool"]), {"calculator"})
        self.assertEqual(list(calls["result"]), ["2", "4", "6"])
        runs = t.runs()
        self.assertEqual(len(runs), 1)
        self.assertEqual(runs["outcome"].iloc[0], "completed")
        self.assertEqual(len(t.events()), len(t))

    def test_the_tables_are_the_cli_exports(self):
        for table in ("runs", "steps", "tool_calls", "events"):
            out = os.path.join(self.dir, f"export-{table}.jsonl")
            agentloop_cli("trace", "export", "scripted.jsonl", "--table", table, "--format", "jsonl", "-o", out, cwd=self.dir)
            with open(out) as f:
                exported = [json.loads(line) for line in f]
            frame = agentloop.Trace.load(self.scripted).__getattribute__(table)()
            columns = dict(agentloop.TABLES)[table]
            self.assertEqual(list(frame.columns), columns)
            self.assertEqual(len(frame), len(exported))
            for row, want in zip(frame.to_dict("records"), exported):
                for c in columns:
                    if c == "trace":
                        continue  # the CLI names the trace as given on its command line
                    self.assertTrue(same(row[c], want[c]), f"{table}.{c}: {row[c]!r} != {want[c]!r}")

    def test_what_if_reports_what_changed(self):
        t = agentloop.Trace.load(self.scripted)
        w = t.what_if(max_steps=1)
        self.assertTrue(w["changed"])
        self.assertIsNotNone(w["index"])
        self.assertEqual(w["before"]["steps"], 4)
        self.assertEqual(w["after"]["steps"], 1)
        self.assertIn("steps 4 → 1", w["changes"])
        self.assertNotEqual(w["before"]["outcome"], w["after"]["outcome"])
        same_config = t.what_if({"retry.max_retries": t.header["config"]["step"]["retry"]["max_retries"]})
        self.assertFalse(same_config["changed"])
        self.assertEqual(same_config["changes"], [])

    def test_a_changed_trace_reports_its_first_divergence(self):
        with open(self.demo) as f:
            lines = f.read().splitlines()
        path = os.path.join(self.dir, "cut.jsonl")
        with open(path, "w") as f:
            f.write("\n".join(lines[:-1]) + "\n")
        d = agentloop.Trace.load(path).replay()
        self.assertIsInstance(d, dict)
        self.assertEqual(d["index"], len(lines) - 2)
        self.assertIsNone(d["recorded"])
        self.assertIsNotNone(d["replayed"])
        self.assertIn("replayed", d["diff"])
        os.remove(path)

    def test_bad_files_raise_typed_exceptions(self):
        bad = os.path.join(self.dir, "bad.txt")
        with open(bad, "w") as f:
            f.write('{"kind": "header", "version": 6}\nnot json\n')
        with self.assertRaises(agentloop.TraceCorruptError):
            agentloop.Trace.load(bad)
        with open(bad, "wb") as f:
            f.write(b"\xff\xfe garbage\n")
        with self.assertRaises(agentloop.TraceCorruptError):
            agentloop.Trace.load(bad)
        with open(self.demo) as f:
            header = json.loads(f.readline())
        header["version"] = 999
        with open(bad, "w") as f:
            f.write(json.dumps(header) + "\n")
        with self.assertRaises(agentloop.TraceVersionError):
            agentloop.Trace.load(bad)
        with self.assertRaises(agentloop.TraceReadError):
            agentloop.Trace.load(os.path.join(self.dir, "missing.jsonl"))
        with self.assertRaises(agentloop.TraceReadError):
            agentloop.Trace.load(self.dir)
        for e in (agentloop.TraceCorruptError, agentloop.TraceVersionError, agentloop.TraceReadError):
            self.assertTrue(issubclass(e, agentloop.TraceError))
        t = agentloop.Trace.load(self.demo)
        with self.assertRaises(agentloop.SettingError):
            t.what_if(no_such_setting=1)
        with self.assertRaises(ValueError):
            t.what_if(max_steps=0)

    def test_a_corpus_is_replayed_and_tabled(self):
        corpus = os.path.join(self.dir, "corpus")
        os.makedirs(os.path.join(corpus, "sub"), exist_ok=True)
        for name in ("a.jsonl", os.path.join("sub", "b.jsonl")):
            with open(self.scripted) as src, open(os.path.join(corpus, name), "w") as dst:
                dst.write(src.read())
        with open(os.path.join(corpus, "broken.jsonl"), "w") as f:
            f.write("{}\n")
        summary = agentloop.replay_dir(corpus)
        self.assertEqual((summary["traces"], summary["identical"], summary["unreadable"]), (3, 2, 1))
        self.assertEqual([f["status"] for f in summary["files"]], ["identical", "unreadable", "identical"])
        with self.assertRaises(agentloop.TraceCorruptError):
            agentloop.steps(corpus)
        steps = agentloop.steps(corpus, skip_unreadable=True)
        self.assertEqual(len(steps), 8)
        self.assertEqual(len(set(steps["trace"])), 2)
        self.assertEqual(len(agentloop.load_dir(corpus, skip_unreadable=True)), 2)
        w = agentloop.what_if_dir(corpus, max_steps=1)
        self.assertEqual((w["changed"], w["unreadable"]), (2, 1))
        self.assertEqual(w["totals"]["steps"], {"before": 8, "after": 2})

    def test_older_versions_are_read_and_replayed_where_they_can_be(self):
        fixtures = ROOT / "tests" / "fixtures" / "traces"
        old = agentloop.Trace.load(fixtures / "v1-calc.jsonl")
        self.assertEqual(old.version, 1)
        self.assertGreater(len(old.steps()), 0)
        with self.assertRaises(agentloop.TraceVersionError):
            old.replay()
        for name in ("v3-calc.jsonl", "v4-retry-tool.jsonl", "v5-calc.jsonl", "v6-retry-after.jsonl"):
            self.assertIsNone(agentloop.Trace.load(fixtures / name).replay(), name)
        summary = agentloop.replay_dir(fixtures)
        self.assertEqual(summary["unreadable"], 2, summary)  # v1 and v2: read, not replayed

    def test_an_inspect_eval_log_imports_as_traces(self):
        log = ROOT / "tests" / "fixtures" / "inspect" / "eval.json"
        traces = agentloop.import_inspect(log)
        self.assertEqual([t.path.rsplit("#", 1)[1] for t in traces], ["1_epoch1", "two_words_epoch2"])
        for t in traces:
            self.assertIsNone(t.replay())
            self.assertEqual(t.session, "arithmetic")
        self.assertEqual(traces[0].findings, [])
        self.assertIn("reasoning", traces[1].findings[0])
        self.assertEqual(list(traces[0].steps()["text"]), ["Let me calculate that.", "The answer is 5."])
        with self.assertRaises(agentloop.TraceCorruptError):
            agentloop.import_inspect(self.demo)

    def test_inspects_own_eval_log_imports_with_usage_per_step(self):
        fixtures = ROOT / "tests" / "fixtures" / "inspect"
        zipped = agentloop.import_inspect(fixtures / "arithmetic.eval")
        plain = agentloop.import_inspect(fixtures / "arithmetic.json")
        names = [t.path.rsplit("#", 1)[1] for t in zipped]
        self.assertEqual(names, ["add_epoch1", "divide_epoch1", "loop_epoch1"])
        add = zipped[0]
        self.assertEqual(add.findings, [])
        self.assertIsNone(add.replay())
        steps = add.steps()
        self.assertEqual(list(steps["tokens_in"]), [52, 87])
        self.assertEqual(list(steps["tokens_out"]), [18, 7])
        self.assertEqual(list(steps["tokens_cache_read"]), [10, 0])
        self.assertEqual(list(steps["tokens_reasoning"]), [0, 3])
        self.assertEqual(list(plain[0].steps()["tokens_in"]), [52, 87])
        self.assertIn("ZeroDivisionError", " ".join(zipped[1].findings))
        with tempfile.TemporaryDirectory() as tmp:
            half = pathlib.Path(tmp) / "half.eval"
            data = (fixtures / "arithmetic.eval").read_bytes()
            half.write_bytes(data[: len(data) // 2])
            with self.assertRaises(agentloop.TraceCorruptError):
                agentloop.import_inspect(half)

    def test_an_otel_genai_export_imports_as_traces(self):
        spans = ROOT / "tests" / "fixtures" / "otel" / "genai.json"
        traces = agentloop.import_otel(spans)
        self.assertEqual(
            [t.path.rsplit("#", 1)[1] for t in traces],
            ["5b8efff798038103d269b633813fc60c", "0af7651916cd43dd8448eb211c80319c"],
        )
        for t in traces:
            self.assertIsNone(t.replay())
        self.assertIn("get_weather", list(traces[0].tool_calls()["tool"]))
        self.assertEqual(traces[1].findings, [])
        with self.assertRaises(agentloop.TraceCorruptError):
            agentloop.import_otel(self.demo)

    def test_the_instrumentations_own_spans_import_with_usage_and_settings(self):
        # Written by openai-v2, pydantic-ai and OpenInference (scripts/fixtures/otel_fixtures.py).
        for name in ("openai_v2", "pydantic_ai", "openinference"):
            [t] = agentloop.import_otel(ROOT / "tests" / "fixtures" / "otel" / f"{name}.json")
            self.assertIsNone(t.replay(), name)
            steps = t.steps()
            self.assertEqual(list(steps["tokens_in"]), [61, 98], name)
            self.assertEqual(list(steps["tokens_out"]), [17, 12], name)
            self.assertEqual(list(t.tool_calls()["tool"]), ["get_weather"], name)
            self.assertEqual(t.header["config"]["params"], {"temperature": 0.2, "max_tokens": 200})
            self.assertIn("seed = 7", " ".join(t.findings), name)

    def test_to_otlp_and_to_inspect_are_the_cli_exports(self):
        t = agentloop.Trace.load(self.scripted)
        spans = t.to_otlp(include_content=True)
        cli = pathlib.Path(self.dir) / "spans.json"
        agentloop_cli("trace", "export", "--format", "otlp", "--include-content", self.scripted,
                      "-o", str(cli), cwd=self.dir)
        self.assertEqual(spans, json.loads(cli.read_text()))
        names = [s["name"] for s in spans["resourceSpans"][0]["scopeSpans"][0]["spans"]]
        self.assertEqual(names.count("execute_tool calculator"), 3, names)
        bare = json.dumps(t.to_otlp())
        self.assertNotIn("gen_ai.input.messages", bare)
        # The spans with content import back as the same steps.
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "spans.json"
            path.write_text(json.dumps(spans))
            [back] = agentloop.import_otel(path)
            self.assertEqual(list(back.steps()["tokens_in"]), list(t.steps()["tokens_in"]))
            self.assertEqual(list(back.steps()["text"]), list(t.steps()["text"]))
        log = t.to_inspect()
        cli = pathlib.Path(self.dir) / "log.json"
        agentloop_cli("trace", "export", "--format", "inspect", self.scripted, "-o", str(cli),
                      cwd=self.dir)
        self.assertEqual(log, json.loads(cli.read_text()))
        self.assertEqual([s["id"] for s in log["samples"]], ["scripted"])

    def test_the_package_imports_without_pandas(self):
        code = (
            "import sys; sys.modules['pandas'] = None\n"
            "import agentloop\n"
            f"t = agentloop.Trace.load({self.scripted!r})\n"
            "assert len(t.columns('steps')['step']) == 4\n"
            "try:\n    t.steps()\nexcept ImportError as e:\n    print('needs pandas:', e)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
        self.assertIn("needs pandas", out.stdout)


if __name__ == "__main__":
    unittest.main()
