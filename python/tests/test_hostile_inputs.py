"""Bad inputs to the Python entry points raise exceptions; the interpreter never dies.

A FIFO, `/dev/zero`, a file over the reader's limits and deeply nested JSON given to
`Trace.load`, `import_inspect`, `import_otel` and `replay_dir` (which reports each trace it
cannot read) — the inputs the `agentloop` command refuses the same way.
"""

import os
import pathlib
import tempfile
import unittest

import agentloop

ROOT = pathlib.Path(__file__).resolve().parents[2]
# A valid header (a recorded trace's first line), followed by the hostile lines.
HEADER = (ROOT / "tests" / "fixtures" / "traces" / "v6-retry-after.jsonl").read_text().splitlines()[0]


class HostileInputTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.saved = {k: os.environ.get(k) for k in ("AGENTLOOP_TRACE_MAX_BYTES", "AGENTLOOP_TRACE_MAX_LINE_BYTES")}

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self.tmp.cleanup()

    def path(self, name, text=None):
        p = os.path.join(self.dir, name)
        if text is not None:
            with open(p, "w") as f:
                f.write(text)
        return p

    def readers(self):
        return (agentloop.Trace.load, agentloop.import_inspect, agentloop.import_otel)

    @unittest.skipUnless(hasattr(os, "mkfifo"), "no FIFOs here")
    def test_a_fifo_is_refused_without_blocking(self):
        fifo = self.path("pipe.jsonl")
        os.mkfifo(fifo)
        for read in self.readers():
            with self.assertRaises(agentloop.TraceReadError, msg=read.__name__) as e:
                read(fifo)
            self.assertIn("not a regular file", str(e.exception))
        report = agentloop.replay_dir([fifo])
        self.assertEqual(report["unreadable"], 1)
        self.assertIn("not a regular file", report["files"][0]["error"])

    @unittest.skipUnless(os.path.exists("/dev/zero"), "no /dev/zero here")
    def test_dev_zero_is_refused_not_read_forever(self):
        for read in self.readers():
            with self.assertRaises(agentloop.TraceReadError, msg=read.__name__):
                read("/dev/zero")
        self.assertEqual(agentloop.replay_dir(["/dev/zero"])["unreadable"], 1)

    def test_a_file_over_the_limits_is_trace_too_large(self):
        big = self.path("big.jsonl", HEADER + "\n" + '{"kind":"input","pad":"' + "x" * 50_000 + '"}\n')
        os.environ["AGENTLOOP_TRACE_MAX_LINE_BYTES"] = "10000"
        with self.assertRaises(agentloop.TraceTooLargeError) as e:
            agentloop.Trace.load(big)
        self.assertIn("line limit of 10000 bytes", str(e.exception))
        os.environ["AGENTLOOP_TRACE_MAX_BYTES"] = "1000"
        json_file = self.path("big.json", "[" + ",".join(["1"] * 2000) + "]")
        for read in self.readers():
            with self.assertRaises(agentloop.TraceTooLargeError, msg=read.__name__):
                read(json_file if read is not agentloop.Trace.load else big)
        # In a corpus, the file over the limit is reported and the others replayed.
        report = agentloop.replay_dir([big])
        self.assertEqual(report["unreadable"], 1)
        self.assertIn("limit", report["files"][0]["error"])

    def test_deeply_nested_json_is_corrupt_not_a_crash(self):
        deep = "[" * 200_000 + "]" * 200_000
        nested = self.path("deep.json", deep)
        for read in (agentloop.import_inspect, agentloop.import_otel):
            with self.assertRaises(agentloop.TraceCorruptError, msg=read.__name__):
                read(nested)
        trace = self.path("deep.jsonl", HEADER + '\n{"kind":"input","index":0,"event":' + deep + "}\n")
        with self.assertRaises(agentloop.TraceCorruptError) as e:
            agentloop.Trace.load(trace)
        self.assertIn(":2:", str(e.exception))
        with self.assertRaises(agentloop.TraceCorruptError):
            agentloop.Trace.loads(HEADER + "\n" + deep)
        self.assertEqual(agentloop.replay_dir([trace])["unreadable"], 1)


if __name__ == "__main__":
    unittest.main()
