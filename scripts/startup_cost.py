#!/usr/bin/env python3
"""CPU and peak memory of one short offline run: `agentloop run "What is 2+3?"`.

Runs the binary N times (default 21) on the embedded demo model, each in a fresh temporary
directory (so every run starts a new session store), and prints the median user+system CPU
and the median peak RSS, both from wait4(2) (the kernel's accounting of the child alone).

    cargo build --release            # README's build command, at the repository's root
    python3 scripts/startup_cost.py target/release/agentloop [N]

The runs are started by a small C launcher (compiled with `cc` on first use), not by Python
itself: a child's ru_maxrss also counts the memory of the process image it replaced at exec,
and a child forked from Python starts as a copy of the interpreter (about 14 MiB), which
would hide any figure below that. The launcher's own image is about 1 MiB; the line printed
also gives the floor of the method (the peak RSS of `/bin/true` started the same way).

Exits non-zero if a run fails or does not print the answer (so CI can run it in test mode
with a small N against a debug build).
"""

import os
import statistics
import subprocess
import sys
import tempfile

LAUNCHER_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* launch OUT PROGRAM ARGS...: runs PROGRAM with stdout to OUT, stdin and stderr to
   /dev/null; prints "user_us system_us maxrss_kib exit_code". */
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
        int out = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int null = open("/dev/null", O_RDWR);
        if (out < 0 || null < 0) _exit(126);
        dup2(null, 0); dup2(out, 1); dup2(null, 2);
        execv(argv[2], argv + 2);
        _exit(127);
    }
    int status = 0;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0) return 2;
    printf("%ld %ld %ld %d\n",
           (long)(ru.ru_utime.tv_sec * 1000000L + ru.ru_utime.tv_usec),
           (long)(ru.ru_stime.tv_sec * 1000000L + ru.ru_stime.tv_usec),
           (long)ru.ru_maxrss, WIFEXITED(status) ? WEXITSTATUS(status) : 128);
    return 0;
}
"""


def launcher(cache: str) -> str:
    exe = os.path.join(cache, "startup_launch")
    if not os.path.exists(exe):
        src = os.path.join(cache, "startup_launch.c")
        with open(src, "w", encoding="utf-8") as f:
            f.write(LAUNCHER_C)
        subprocess.run(["cc", "-O2", "-o", exe, src], check=True)
    return exe


def launch(exe: str, argv: list[str], cwd: str) -> tuple[float, float, int, bytes]:
    out_path = os.path.join(cwd, "stdout.txt")
    res = subprocess.run(
        [exe, out_path, *argv], cwd=cwd, stdout=subprocess.PIPE, check=True
    )
    user_us, sys_us, maxrss_kib, code = (int(x) for x in res.stdout.split())
    with open(out_path, "rb") as f:
        out = f.read()
    return (user_us + sys_us) / 1000.0, maxrss_kib / 1024.0, code, out


def one(exe: str, binary: str) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        cpu_ms, rss_mib, code, out = launch(exe, [binary, "run", "What is 2+3?"], tmp)
        if code != 0 or b"5" not in out:
            sys.exit(f"run failed (exit {code}): {out!r}")
        return cpu_ms, rss_mib


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 21
    with tempfile.TemporaryDirectory() as cache:
        exe = launcher(cache)
        with tempfile.TemporaryDirectory() as tmp:
            floor = launch(exe, ["/bin/true"], tmp)[1]
        one(exe, binary)  # warm the page cache
        runs = [one(exe, binary) for _ in range(n)]
    cpu = sorted(r[0] for r in runs)
    rss = sorted(r[1] for r in runs)
    print(
        f"agentloop run \"What is 2+3?\" ({n} runs): CPU median {statistics.median(cpu):.1f} ms "
        f"(min {cpu[0]:.1f}, max {cpu[-1]:.1f}); peak RSS median {statistics.median(rss):.1f} MiB "
        f"(min {rss[0]:.1f}, max {rss[-1]:.1f}); method floor (/bin/true) {floor:.1f} MiB"
    )


if __name__ == "__main__":
    main()
