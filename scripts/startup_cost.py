#!/usr/bin/env python3
"""CPU and peak memory of one short offline run: `agentloop run "What is 2+3?"`.

Runs the binary N times (default 21) on the embedded demo model, each in a fresh temporary
directory (so every run starts a new session store), and prints the median user+system CPU
and the median peak RSS, both from wait4(2) (the kernel's accounting of the child alone).

    cargo build --release -p agentloop-cli
    python3 scripts/startup_cost.py target/release/agentloop [N]

Exits non-zero if a run fails or does not print the answer (so CI can run it in test mode
with a small N against a debug build).
"""

import os
import statistics
import subprocess
import sys
import tempfile


def one(binary: str) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            [binary, "run", "What is 2+3?"],
            cwd=tmp,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        out = proc.stdout.read() if proc.stdout else b""
        _, status, usage = os.wait4(proc.pid, 0)
        if proc.stdout:
            proc.stdout.close()
        if os.waitstatus_to_exitcode(status) != 0 or b"5" not in out:
            sys.exit(f"run failed (status {status}): {out!r}")
        cpu_ms = (usage.ru_utime + usage.ru_stime) * 1000.0
        rss_mib = usage.ru_maxrss / 1024.0  # ru_maxrss is in KiB on Linux
        return cpu_ms, rss_mib


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 21
    one(binary)  # warm the page cache
    runs = [one(binary) for _ in range(n)]
    cpu = sorted(r[0] for r in runs)
    rss = sorted(r[1] for r in runs)
    print(
        f"agentloop run \"What is 2+3?\" ({n} runs): CPU median {statistics.median(cpu):.1f} ms "
        f"(min {cpu[0]:.1f}, max {cpu[-1]:.1f}); peak RSS median {statistics.median(rss):.1f} MiB "
        f"(min {rss[0]:.1f}, max {rss[-1]:.1f})"
    )


if __name__ == "__main__":
    main()
