#!/usr/bin/env python3
"""Per-delta CPU of agentloop and rig 0.44 on the same real SSE stream.

Starts the loopback mock (its own process, so its CPU is not counted), then runs each client
binary R times for 2,000 deltas and for 1 delta (the same 16,000-character answer),
interleaved (agentloop, rig, agentloop, rig, ...), and takes each child's CPU time (user +
system, every thread) from os.wait4's rusage. Prints, for each client, the median CPU of the
2,000-delta run and of the 1-delta run, their difference (the marginal cost of 1,999 more
deltas; also per delta, split into user and system time, and the marginal voluntary context
switches per delta) and the ratio agentloop / rig of the marginals.

    cargo build --release          # in peers/rig-delta (CARGO_BUILD_JOBS=2 on a small machine)
    python3 run.py [--runs R] [--warmup W] [--deltas N] [--gap-us US] [--sink] [--floor] [--tcp]
                   [--runtime multi-thread|current-thread]

--sink adds agentloop consuming the same events through an event sink (Agent::run + FnSink)
instead of Agent::run_stream; --floor adds a bare reqwest 0.12 client that splits the SSE body
by hand (the transport floor every reqwest-based client pays); --tcp adds a client on a bare
tokio TcpStream read in the run's own task (no HTTP library: the socket wakeups alone).
--runtime current-thread runs every client on a current-thread tokio runtime instead of the
default multi-thread one (the headline comparison is multi-thread, what #[tokio::main] builds).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ANSWER_CHARS = 16_000


def cpu_of(argv):
    """Runs argv to completion; returns ((user, system) CPU seconds, voluntary context switches),
    stdout)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(r)
            os.dup2(w, 1)
            os.close(w)
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    _, status, ru = os.wait4(pid, 0)
    out = b"".join(chunks).decode(errors="replace").strip()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"FAILED: {' '.join(argv)} exited with status {status}: {out!r}")
    return (ru.ru_utime, ru.ru_stime, ru.ru_nvcsw), out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=21, help="measured runs per client and size (default 21)")
    ap.add_argument("--warmup", type=int, default=3, help="unmeasured runs first (default 3)")
    ap.add_argument("--deltas", type=int, default=2000, help="deltas of the long answer (default 2000)")
    ap.add_argument("--gap-us", type=int, default=50, help="mock's pause before each event (default 50)")
    ap.add_argument("--sink", action="store_true", help="also measure agentloop through an event sink")
    ap.add_argument("--spawn", action="store_true", help="also measure both clients with the whole run in a spawned task")
    ap.add_argument("--floor", action="store_true", help="also measure the bare reqwest floor client")
    ap.add_argument("--tcp", action="store_true", help="also measure the bare tokio TcpStream client")
    ap.add_argument("--runtime", choices=("multi-thread", "current-thread"), default="multi-thread")
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "target", "release"))
    args = ap.parse_args()

    if args.runs < 2:
        raise SystemExit("--runs must be at least 2")
    if ANSWER_CHARS % args.deltas:
        raise SystemExit(f"--deltas must divide {ANSWER_CHARS}")
    exe = lambda name: os.path.join(args.bin_dir, name)
    for name in ("mock", "agentloop_client", "rig_client", "floor_client", "tcp_client"):
        if not os.access(exe(name), os.X_OK):
            raise SystemExit(f"{exe(name)} missing: run `cargo build --release` in {HERE}")

    mock = subprocess.Popen([exe("mock"), "--gap-us", str(args.gap_us)], stdout=subprocess.PIPE, text=True)
    try:
        line = mock.stdout.readline().split()
        if len(line) != 2 or line[0] != "PORT":
            raise SystemExit(f"mock did not start: {line!r}")
        base = f"http://127.0.0.1:{line[1]}"
        clients = [("agentloop", lambda m: [exe("agentloop_client"), base, m, "stream"])]
        if args.sink:
            clients.append(("agentloop-sink", lambda m: [exe("agentloop_client"), base, m, "sink"]))
        if args.spawn:
            clients.append(("agentloop-spawn", lambda m: [exe("agentloop_client"), base, m, "spawn"]))
            clients.append(("rig-spawn", lambda m: [exe("rig_client"), base, m, "spawn"]))
        if args.floor:
            clients.append(("reqwest floor", lambda m: [exe("floor_client"), base, m]))
        if args.tcp:
            clients.append(("tcp floor", lambda m: [exe("tcp_client"), base, m]))
        clients.append(("rig 0.44", lambda m: [exe("rig_client"), base, m]))
        os.environ["PEER_RUNTIME"] = args.runtime
        sizes = (args.deltas, 1)
        cpu = {(c, n): [] for c, _ in clients for n in sizes}

        started = time.time()
        for i in range(args.warmup + args.runs):
            for n in sizes:
                for name, argv in clients:
                    secs, out = cpu_of(argv(f"deltas-{n}"))
                    if out != str(ANSWER_CHARS):
                        raise SystemExit(
                            f"FAILED: {name} with {n} deltas printed {out!r}, expected {ANSWER_CHARS}"
                        )
                    if i >= args.warmup:
                        cpu[(name, n)].append((secs[0] * 1000, secs[1] * 1000, secs[2]))
        elapsed = time.time() - started
    finally:
        mock.kill()
        mock.wait()

    print(
        f"{args.runs} runs per client and size (+{args.warmup} warm-up), interleaved; "
        f"{ANSWER_CHARS} chars in {args.deltas} deltas vs 1 delta, {args.gap_us} us mock gap; "
        f"child CPU = user + sys (wait4); {args.runtime} tokio runtime; {os.cpu_count()} CPUs; "
        f"{elapsed:.0f} s"
    )
    print(
        f"{'client':<16}{'median ' + str(args.deltas):>14}{'median 1':>11}{'marginal':>11}{'per delta':>11}"
        f"{'p25-p75 ' + str(args.deltas):>20}{'marginal user/sys':>22}{'csw/delta':>11}"
    )
    med = lambda runs, f: statistics.median(f(r) for r in runs)
    total, user, system, csw = (lambda r: r[0] + r[1]), (lambda r: r[0]), (lambda r: r[1]), (lambda r: r[2])
    marginal = {}
    for name, _ in clients:
        long, short = cpu[(name, args.deltas)], cpu[(name, 1)]
        ml, ms = med(long, total), med(short, total)
        marginal[name] = ml - ms
        q = statistics.quantiles([total(r) for r in long], n=4)
        mu = med(long, user) - med(short, user)
        msys = med(long, system) - med(short, system)
        mcsw = (med(long, csw) - med(short, csw)) / (args.deltas - 1)
        print(
            f"{name:<16}{ml:>11.1f} ms{ms:>8.1f} ms{ml - ms:>8.1f} ms{(ml - ms) * 1000 / (args.deltas - 1):>8.1f} us"
            f"{q[0]:>11.1f}-{q[2]:.1f} ms{mu:>10.1f} / {msys:.1f} ms{mcsw:>11.2f}"
        )
    rig = marginal["rig 0.44"]
    for name, _ in clients[:-1]:
        print(f"ratio {name} / rig 0.44 (marginal): {marginal[name] / rig:.2f}" if rig > 0 else "rig marginal <= 0")


if __name__ == "__main__":
    sys.exit(main())
