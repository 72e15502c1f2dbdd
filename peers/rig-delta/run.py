#!/usr/bin/env python3
"""agentloop vs rig 0.44 on the same loopback OpenAI-compatible server, side by side.

Starts the loopback mock (its own process, so its CPU is not counted), then runs each client
binary once per workload and round, interleaved (every client in turn within a round), and
takes each child's CPU time (user + system, every thread) and peak RSS (ru_maxrss) from
os.wait4's rusage.

    cargo build --release && python3 run.py --all   # in peers/rig-delta: THE comparison, both
                                   # libraries, both tokio runtimes, the two-turn run and the
                                   # 2,000-delta marginal
    python3 run.py --smoke --profile ci   # test mode: every client once, tiny answers, checked

Before measuring, run.py runs `cargo build --locked` (with the profile's flag) in both
workspaces: the rig side here and agentloop's client in agentloop-client/ (its own workspace);
cargo does nothing where nothing changed. --no-build skips that.

--all measures agentloop and rig 0.44 (agent.prompt(..).stream()), each on a multi-thread
runtime (what #[tokio::main] builds) and on a current-thread one, on three workloads: the
two-turn run (model `two-turn`: one call of an `add` tool, its result sent back, a short text
answer), a 16,000-character answer in 2,000 deltas, and the same answer in 1 delta.
agentloop's headline row is README's program (quickstart_client: build_model, a ToolRegistry
with one typed tool, Agent::builder()...build(), agent.run); Agent::run_stream and Agent::run
with a closure sink are extra rows. It prints, per client, the two-turn run's median CPU and
median peak RSS, the 2,000-delta marginal (median 2,000-delta minus median 1-delta CPU), every
figure's ratio to rig on the same runtime, and a headline line per runtime.
--baseline-dir DIR adds an earlier build's quickstart_client to the same rounds.

Without --all, the older per-delta comparison on one runtime: README's program and agentloop
(run_stream) vs rig,
with --sink, --spawn, --floor (bare reqwest), --tcp (bare TcpStream) adding clients and
--runtime choosing the runtime.

--smoke runs every client binary (README's program, all modes, both
runtimes, the floors) once on the two-turn run and on a 16-delta answer, checks each answer
(the two-turn answer names the tool's result; the long answer has all 16,000 characters) and
exits non-zero on any failure.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ANSWER_CHARS = 16_000
TWO_TURN = "two-turn"
TWO_TURN_ANSWER = "The sum is 42"
RUNTIMES = ("multi-thread", "current-thread")
RT_SHORT = {"multi-thread": "mt", "current-thread": "ct"}
# agentloop's client: a package and workspace of its own, so cargo's feature unification does not
# hand it what rig asks of the reqwest both use (aws-lc, HTTP/2, charset decoding).
AGENTLOOP_PACKAGE = "agentloop-client"
BINARIES = ("measure", "mock", "quickstart_client", "agentloop_client", "rig_client", "floor_client", "tcp_client")
AGENTLOOP_BINARIES = ("quickstart_client", "agentloop_client")


class Client:
    """One client configuration: a binary, its mode, a runtime."""

    def __init__(self, name, library, binary, mode, runtime, tools=True):
        self.name, self.library, self.binary = name, library, binary
        self.mode, self.runtime, self.tools = mode, runtime, tools

    def argv(self, exe, base, model):
        binary = self.binary if os.path.isabs(self.binary) else exe(self.binary)
        return [binary, base, model] + ([self.mode] if self.mode else [])


def measure(launcher, argv, env):
    """Runs argv to completion through the launcher (src/bin/measure.rs: a small process, so
    the child's peak RSS is its own, not this Python process's image it would be forked from);
    returns (user ms, sys ms, voluntary context switches, peak RSS KiB), stdout."""
    p = subprocess.run([launcher] + argv, env=env, stdout=subprocess.PIPE)
    out = p.stdout.decode(errors="replace").strip().split("\n")
    if p.returncode != 0 or not out or not out[-1].startswith("RUSAGE "):
        raise SystemExit(f"FAILED: {' '.join(argv)} ({env.get('PEER_RUNTIME')}) exited with status {p.returncode}: {out!r}")
    user_us, sys_us, nvcsw, maxrss = (int(x) for x in out[-1].split()[1:])
    return (user_us / 1000, sys_us / 1000, nvcsw, maxrss), "\n".join(out[:-1]).strip()


def expected(model):
    return TWO_TURN_ANSWER if model == TWO_TURN else str(ANSWER_CHARS)


def llmock_fixtures(models, latency_ms):
    """aimock fixtures serving what src/bin/mock.rs serves for `models`: `deltas-N` the
    16,000-character answer in chunks of 16,000 / N characters, `two-turn` one `add` call, then
    (once the request carries a tool result containing 42) the answer in chunks of 4."""
    fixtures = [
        {"match": {"model": TWO_TURN, "hasToolResult": False},
         "response": {"toolCalls": [{"name": "add", "arguments": '{"a": 40, "b": 2}', "id": "call_add_1"}]},
         "latency": latency_ms},
        {"match": {"model": TWO_TURN, "hasToolResult": True, "toolResultContains": "42"},
         "response": {"content": TWO_TURN_ANSWER}, "chunkSize": 4, "latency": latency_ms},
    ]
    for m in models:
        if m.startswith("deltas-"):
            n = int(m.split("-")[1])
            fixtures.append({"match": {"model": m}, "response": {"content": "abcdefg " * (ANSWER_CHARS // 8)},
                             "chunkSize": ANSWER_CHARS // n, "latency": latency_ms})
    return {"fixtures": fixtures}


def start_mock(exe, args, models):
    """The server: the in-repo mock (default) or aimock's llmock (--server llmock)."""
    if args.server == "llmock":
        llmock = args.llmock_bin or os.environ.get("AIMOCK_BIN") or os.path.join(
            HERE, "..", "..", ".ci", "node", "node_modules", ".bin", "llmock")
        if not os.access(llmock, os.X_OK):
            raise SystemExit(f"llmock not found at {llmock} (set AIMOCK_BIN or --llmock-bin)")
        fd, path = tempfile.mkstemp(suffix=".json", prefix="rig-delta-fixtures-")
        with os.fdopen(fd, "w") as f:
            json.dump(llmock_fixtures(models, args.llmock_latency_ms), f)
        mock = subprocess.Popen([llmock, "-p", "0", "-f", path, "--strict"], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        line = ""
        for _ in range(20):
            line = mock.stdout.readline()
            if "listening on " in line:
                os.unlink(path)
                # Keep reading its log so it never blocks on a full pipe.
                threading.Thread(target=mock.stdout.read, daemon=True).start()
                return mock, line.split("listening on ")[1].strip()
            if not line:
                break
        mock.kill()
        os.unlink(path)
        raise SystemExit(f"llmock did not start (last line {line!r})")
    mock = subprocess.Popen([exe("mock"), "--gap-us", str(args.gap_us)], stdout=subprocess.PIPE, text=True)
    line = mock.stdout.readline().split()
    if len(line) != 2 or line[0] != "PORT":
        mock.kill()
        raise SystemExit(f"mock did not start: {line!r}")
    return mock, f"http://127.0.0.1:{line[1]}"


def run_rounds(exe, base, clients, models, rounds, warmup, progress=False):
    """Every client on every model, `warmup + rounds` times, interleaved; the measured runs'
    (user, sys, csw, rss) by (client name, model)."""
    runs = {(c.name, m): [] for c in clients for m in models}
    for i in range(warmup + rounds):
        for model in models:
            for c in clients:
                if model == TWO_TURN and not c.tools:
                    continue
                env = dict(os.environ, PEER_RUNTIME=c.runtime)
                secs, out = measure(exe("measure"), c.argv(exe, base, model), env)
                if out != expected(model):
                    raise SystemExit(f"FAILED: {c.name} on {model} printed {out!r}, expected {expected(model)!r}")
                if i >= warmup:
                    runs[(c.name, model)].append(secs)
        if progress:
            print(f"  round {i + 1}/{warmup + rounds} done", file=sys.stderr, flush=True)
    return runs


def server_desc(args):
    if args.server == "llmock":
        return f"llmock (aimock) with {args.llmock_latency_ms} ms between chunks"
    return f"in-repo mock, {args.gap_us} us before each event"


total = lambda r: r[0] + r[1]
med = lambda runs, f: statistics.median(f(r) for r in runs)


def quartiles(values):
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def smoke(exe, args):
    """Every client binary, every mode, both runtimes, once, on small answers."""
    deltas = 16
    clients = []
    for rt in RUNTIMES:
        clients.append(Client(f"agentloop README program {RT_SHORT[rt]}", "agentloop", "quickstart_client", None, rt))
        for mode in ("stream", "sink", "spawn"):
            clients.append(Client(f"agentloop {mode} {RT_SHORT[rt]}", "agentloop", "agentloop_client", mode, rt))
        for mode in ("stream", "spawn"):
            clients.append(Client(f"rig {mode} {RT_SHORT[rt]}", "rig", "rig_client", mode, rt))
        clients.append(Client(f"reqwest floor {RT_SHORT[rt]}", "floor", "floor_client", None, rt, tools=False))
        clients.append(Client(f"tcp floor {RT_SHORT[rt]}", "floor", "tcp_client", None, rt, tools=False))
    started = time.time()
    models = (TWO_TURN, f"deltas-{deltas}", "deltas-1")
    mock, base = start_mock(exe, args, models)
    try:
        runs = run_rounds(exe, base, clients, models, 1, 0)
    finally:
        mock.kill()
        mock.wait()
    n = sum(len(v) for v in runs.values())
    print(f"smoke: {n} runs of {len(clients)} client configurations passed in {time.time() - started:.1f} s "
          f"(two-turn answer {TWO_TURN_ANSWER!r}; {ANSWER_CHARS} chars in {deltas} deltas and in 1)")


def headline_clients(rt, args):
    """The clients of one runtime in --all's order: README's program (the headline), the extra
    agentloop rows, an earlier build of README's program (--baseline-dir), rig."""
    r = RT_SHORT[rt]
    clients = [Client(f"README program {r}", "agentloop", "quickstart_client", None, rt)]
    if args.baseline_dir:
        clients.append(Client(f"README prog. (base) {r}", "agentloop",
                              os.path.abspath(os.path.join(args.baseline_dir, "quickstart_client")), None, rt))
    clients.append(Client(f"run_stream {r}", "agentloop", "agentloop_client", "stream", rt))
    clients.append(Client(f"run + sink {r}", "agentloop", "agentloop_client", "sink", rt))
    clients.append(Client(f"rig 0.44 {r}", "rig", "rig_client", None, rt))
    return clients


def compare_all(exe, args):
    clients = [c for rt in RUNTIMES for c in headline_clients(rt, args)]
    long = f"deltas-{args.deltas}"
    models = (TWO_TURN, long, "deltas-1")
    started = time.time()
    mock, base = start_mock(exe, args, models)
    try:
        runs = run_rounds(exe, base, clients, models, args.runs, args.warmup, progress=True)
    finally:
        mock.kill()
        mock.wait()
    elapsed = time.time() - started
    rig_of = {rt: next(c for c in clients if c.library == "rig" and c.runtime == rt) for rt in RUNTIMES}

    print(
        f"R = {args.runs} rounds (+{args.warmup} warm-up), every client in turn within a round; "
        f"{os.cpu_count()} CPUs; {server_desc(args)}; child CPU = user + sys and peak RSS from wait4; "
        f"load average before: {args.load}; {elapsed:.0f} s"
    )
    print("Ratios are to rig 0.44 on the same tokio runtime (mt: what #[tokio::main] builds; "
          "ct: flavor = \"current_thread\").")
    print()
    print("Two-turn run (one `add` tool call, its result sent back, a 13-character answer):")
    cpu = {c.name: med(runs[(c.name, TWO_TURN)], total) for c in clients}
    rss = {c.name: med(runs[(c.name, TWO_TURN)], lambda r: r[3]) / 1024 for c in clients}
    print(f"{'client':<26}{'median CPU':>12}{'p25-p75':>16}{'median RSS':>12}{'CPU / rig':>11}{'RSS / rig':>11}")
    for c in clients:
        q = quartiles([total(r) for r in runs[(c.name, TWO_TURN)]])
        rig = rig_of[c.runtime].name
        print(
            f"{c.name:<26}{cpu[c.name]:>9.1f} ms{q[0]:>8.1f}-{q[1]:<5.1f}ms{rss[c.name]:>9.1f} MB"
            f"{cpu[c.name] / cpu[rig]:>11.2f}{rss[c.name] / rss[rig]:>11.2f}"
        )
    print()
    print(f"{args.deltas}-delta marginal ({ANSWER_CHARS} chars in {args.deltas} deltas minus the same in 1 delta):")
    marginal = {}
    print(
        f"{'client':<26}{'median ' + str(args.deltas):>13}{'median 1':>11}{'marginal':>11}{'per delta':>11}"
        f"{'p25-p75 ' + str(args.deltas):>18}{'csw/delta':>11}{'RSS ' + str(args.deltas):>10}{'/ rig':>8}"
    )
    rows = []
    for c in clients:
        lr, sr = runs[(c.name, long)], runs[(c.name, "deltas-1")]
        ml, ms = med(lr, total), med(sr, total)
        marginal[c.name] = ml - ms
        q = quartiles([total(r) for r in lr])
        csw = (med(lr, lambda r: r[2]) - med(sr, lambda r: r[2])) / (args.deltas - 1)
        rows.append((c, ml, ms, q, csw, med(lr, lambda r: r[3]) / 1024))
    for c, ml, ms, q, csw, rss_long in rows:
        m = marginal[c.name]
        print(
            f"{c.name:<26}{ml:>10.1f} ms{ms:>8.1f} ms{m:>8.1f} ms{m * 1000 / (args.deltas - 1):>8.1f} us"
            f"{q[0]:>9.1f}-{q[1]:<5.1f}ms{csw:>11.2f}{rss_long:>7.1f} MB{m / marginal[rig_of[c.runtime].name]:>8.2f}"
        )
    print()
    print("Headline: README's program (build_model, one typed tool, agent.run) against rig 0.44, same runtime:")
    for rt in RUNTIMES:
        q, rig = f"README program {RT_SHORT[rt]}", rig_of[rt].name
        print(
            f"  {rt:<15} agentloop {rt} vs rig {rt}: two-turn CPU {cpu[q] / cpu[rig]:.2f} x "
            f"({cpu[q]:.1f} vs {cpu[rig]:.1f} ms), peak RSS {rss[q] / rss[rig]:.2f} x "
            f"({rss[q]:.1f} vs {rss[rig]:.1f} MB), per-delta CPU {marginal[q] / marginal[rig]:.2f} x "
            f"({marginal[q] * 1000 / (args.deltas - 1):.1f} vs {marginal[rig] * 1000 / (args.deltas - 1):.1f} us)"
        )


def compare_one_runtime(exe, args):
    """The per-delta comparison on one runtime (the harness's original mode)."""
    rt = args.runtime
    clients = [Client("README program", "agentloop", "quickstart_client", None, rt),
               Client("agentloop", "agentloop", "agentloop_client", "stream", rt)]
    if args.sink:
        clients.append(Client("agentloop-sink", "agentloop", "agentloop_client", "sink", rt))
    if args.spawn:
        clients.append(Client("agentloop-spawn", "agentloop", "agentloop_client", "spawn", rt))
        clients.append(Client("rig-spawn", "rig", "rig_client", "spawn", rt))
    if args.floor:
        clients.append(Client("reqwest floor", "floor", "floor_client", None, rt, tools=False))
    if args.tcp:
        clients.append(Client("tcp floor", "floor", "tcp_client", None, rt, tools=False))
    clients.append(Client("rig 0.44", "rig", "rig_client", None, rt))
    long = f"deltas-{args.deltas}"
    started = time.time()
    mock, base = start_mock(exe, args, (long, "deltas-1"))
    try:
        runs = run_rounds(exe, base, clients, (long, "deltas-1"), args.runs, args.warmup)
    finally:
        mock.kill()
        mock.wait()
    elapsed = time.time() - started
    print(
        f"{args.runs} runs per client and size (+{args.warmup} warm-up), interleaved; "
        f"{ANSWER_CHARS} chars in {args.deltas} deltas vs 1 delta, {server_desc(args)}; "
        f"child CPU = user + sys (wait4); {rt} tokio runtime; {os.cpu_count()} CPUs; {elapsed:.0f} s"
    )
    print(
        f"{'client':<16}{'median ' + str(args.deltas):>14}{'median 1':>11}{'marginal':>11}{'per delta':>11}"
        f"{'p25-p75 ' + str(args.deltas):>20}{'marginal user/sys':>22}{'csw/delta':>11}"
    )
    user, system, csw = (lambda r: r[0]), (lambda r: r[1]), (lambda r: r[2])
    marginal = {}
    for c in clients:
        lr, sr = runs[(c.name, long)], runs[(c.name, "deltas-1")]
        ml, ms = med(lr, total), med(sr, total)
        marginal[c.name] = ml - ms
        q = quartiles([total(r) for r in lr])
        mu = med(lr, user) - med(sr, user)
        msys = med(lr, system) - med(sr, system)
        mcsw = (med(lr, csw) - med(sr, csw)) / (args.deltas - 1)
        print(
            f"{c.name:<16}{ml:>11.1f} ms{ms:>8.1f} ms{ml - ms:>8.1f} ms{(ml - ms) * 1000 / (args.deltas - 1):>8.1f} us"
            f"{q[0]:>11.1f}-{q[1]:.1f} ms{mu:>10.1f} / {msys:.1f} ms{mcsw:>11.2f}"
        )
    rig = marginal["rig 0.44"]
    for c in clients[:-1]:
        print(f"ratio {c.name} / rig 0.44 (marginal): {marginal[c.name] / rig:.2f}" if rig > 0 else "rig marginal <= 0")


def build(where, flag):
    """`cargo build --locked FLAG` in one of the two workspaces (each has its own target/; a
    CARGO_TARGET_DIR set for another project is not inherited)."""
    env = {k: v for k, v in os.environ.items() if k != "CARGO_TARGET_DIR"}
    print(f"building {os.path.relpath(where, HERE) if where != HERE else 'the rig side'}: "
          f"cargo build --locked {' '.join(flag)}", file=sys.stderr, flush=True)
    p = subprocess.run(["cargo", "build", "--locked"] + flag, cwd=where, env=env)
    if p.returncode != 0:
        raise SystemExit(f"cargo build failed in {where} (status {p.returncode})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--all", action="store_true", help="the full comparison (both runtimes, two-turn run, marginal)")
    ap.add_argument("--smoke", action="store_true", help="test mode: every client once, checked")
    ap.add_argument("--runs", type=int, default=None, help="measured rounds (default 9 with --all, else 21)")
    ap.add_argument("--warmup", type=int, default=None, help="unmeasured rounds first (default 2 with --all, else 3)")
    ap.add_argument("--deltas", type=int, default=2000, help="deltas of the long answer (default 2000)")
    ap.add_argument("--gap-us", type=int, default=50, help="mock's pause before each event (default 50)")
    ap.add_argument("--server", choices=("mock", "llmock"), default="mock",
                    help="the in-repo mock (default) or aimock's llmock (AIMOCK_BIN, else .ci/node's)")
    ap.add_argument("--llmock-bin", default=None, help="the llmock binary (default $AIMOCK_BIN, else .ci/node's)")
    ap.add_argument("--llmock-latency-ms", type=int, default=0,
                    help="llmock's pause between SSE chunks in ms (default 0, llmock's own: the chunks "
                         "back to back, so a client reads several per wake-up; 1 parks it for each)")
    ap.add_argument("--sink", action="store_true", help="also measure agentloop through an event sink")
    ap.add_argument("--spawn", action="store_true", help="also measure both clients with the whole run in a spawned task")
    ap.add_argument("--floor", action="store_true", help="also measure the bare reqwest floor client")
    ap.add_argument("--tcp", action="store_true", help="also measure the bare tokio TcpStream client")
    ap.add_argument("--baseline-dir", default=None,
                    help="with --all: also measure the quickstart_client in this directory (an earlier build "
                         "of the library, for a before/after of a library change in the same rounds)")
    ap.add_argument("--runtime", choices=RUNTIMES, default="multi-thread")
    ap.add_argument("--profile", default="release", help="cargo profile whose binaries to run (default release)")
    ap.add_argument("--bin-dir", default=None, help="directory of the rig-side binaries (default target/<profile>)")
    ap.add_argument("--no-build", action="store_true",
                    help="run the binaries as they are (by default both workspaces are built first)")
    ap.add_argument("--agentloop-bin-dir", default=None,
                    help=f"directory of agentloop_client (default {AGENTLOOP_PACKAGE}/target/<profile>)")
    args = ap.parse_args()

    if args.runs is None:
        args.runs = 9 if args.all else 21
    if args.warmup is None:
        args.warmup = 2 if args.all else 3
    if args.runs < 1 or (args.runs < 2 and not args.all):
        raise SystemExit("--runs too small")
    if ANSWER_CHARS % args.deltas:
        raise SystemExit(f"--deltas must divide {ANSWER_CHARS}")
    profile_dir = "debug" if args.profile == "dev" else args.profile
    bin_dir = args.bin_dir or os.path.join(HERE, "target", profile_dir)
    # agentloop's client is built in its own workspace (agentloop-client/), apart from rig's.
    agentloop_dir = args.agentloop_bin_dir or os.path.join(HERE, AGENTLOOP_PACKAGE, "target", profile_dir)
    exe = lambda name: os.path.join(agentloop_dir if name in AGENTLOOP_BINARIES else bin_dir, name)
    flag = ["--release"] if args.profile == "release" else ["--profile", args.profile]
    if not args.no_build:
        # Both workspaces, so that `cargo build --release && python3 run.py --all` (or run.py
        # alone) measures what the tree holds now; cargo does nothing where nothing changed.
        # A directory given with --bin-dir / --agentloop-bin-dir is taken as built.
        for where, given in ((HERE, args.bin_dir), (os.path.join(HERE, AGENTLOOP_PACKAGE), args.agentloop_bin_dir)):
            if not given:
                build(where, flag)
    for name in BINARIES:
        if not os.access(exe(name), os.X_OK):
            where = os.path.join(HERE, AGENTLOOP_PACKAGE) if name in AGENTLOOP_BINARIES else HERE
            raise SystemExit(f"{exe(name)} missing: run `cargo build {' '.join(flag)}` in {where}")
    args.load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    if not args.smoke:
        # Peak RSS is mostly pages of the binary, and how many of them one fault maps depends
        # on how the file entered the page cache: a file just written (by the linker, or a
        # copy) sits in larger folios than one read back from disk, up to 0.9 MB more for the
        # same binary on Linux 6.18. Every client (a baseline too) runs from a fresh copy in
        # one directory, so both libraries are measured alike, as a binary just built.
        staged = tempfile.mkdtemp(prefix="rig-delta-")
        for name in BINARIES:
            shutil.copy2(exe(name), staged)
        if args.baseline_dir:
            base = os.path.join(staged, "baseline")
            os.mkdir(base)
            shutil.copy2(os.path.join(args.baseline_dir, "quickstart_client"), base)
            args.baseline_dir = base
        exe = lambda name: os.path.join(staged, name)

    try:
        if args.smoke:
            smoke(exe, args)
        elif args.all:
            compare_all(exe, args)
        else:
            compare_one_runtime(exe, args)
    finally:
        if not args.smoke:
            shutil.rmtree(staged, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
