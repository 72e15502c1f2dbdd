#!/usr/bin/env python3
"""Record which functions a few short commands run, as the linker's code order for the CLI.

    cargo build --release -p agentloop-cli
    python3 scripts/code_order.py target/release/agentloop            # writes cli/startup.order
    python3 scripts/code_order.py target/release/agentloop --out F    # writes F instead
    python3 scripts/code_order.py target/release/agentloop --check    # how much of it the binary has
                                                                      # (of --out F if given)

Runs the binary under valgrind's callgrind (`apt-get install valgrind`) for: `run` one-shot,
two prompts on a stored session, `chat` with two piped prompts, `--help` and `sessions
list`, each on the built-in offline model with stdout a pipe (a terminal's status line is not
recorded), in a fresh temporary directory (`AGENTLOOP_STORE` unset, so the session store is
`./.agentloop/sessions` there). Writes the mangled names of the binary's functions they
executed (not the C library's), in the order of their first mention in callgrind's output
(roughly the order they first ran), one per line. cli/build.rs hands the file to the linker
(`--symbol-ordering-file`) for release builds, so the code a short command runs is contiguous
(see cli/build.rs for the measured effect).

The names carry the compiler's hashes: a new Rust release, or changed code, renames some of
them and the linker skips those. `--check` prints how many of the file's names the binary
defines; regenerate the file when that falls (the order costs memory when stale, nothing
else). The binary to record from may be built with or without the order: the names are the
same.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "cli", "startup.order")

# (arguments, stdin) of each recorded command.
COMMANDS = [
    (["run", "What is 2+3?"], None),
    (["run", "--session", "demo", "What is 2+3?"], None),
    (["run", "--session", "demo", "hello there"], None),
    (["chat"], b"What is 4*5?\nthanks\n"),
    (["--help"], None),
    (["sessions", "list"], None),
]

DEFINITION = re.compile(r"^c?fn=\((\d+)\) (.+)$")


def record(binary: str) -> list[str]:
    """Function names executed by COMMANDS, in first-met order, without duplicates."""
    seen: dict[str, None] = {}
    with tempfile.TemporaryDirectory() as work:
        env = {k: v for k, v in os.environ.items() if k != "AGENTLOOP_STORE"}
        for i, (args, stdin) in enumerate(COMMANDS):
            out = os.path.join(work, f"callgrind.{i}")
            res = subprocess.run(
                ["valgrind", "--tool=callgrind", "--demangle=no", "--compress-strings=yes",
                 f"--callgrind-out-file={out}", binary, *args],
                cwd=work, env=env, input=stdin or b"",
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )
            if res.returncode != 0:
                sys.exit(f"`agentloop {' '.join(args)}` failed under callgrind "
                         f"(exit {res.returncode}):\n{res.stderr.decode(errors='replace')[-2000:]}")
            with open(out, encoding="utf-8", errors="replace") as f:
                for line in f:
                    m = DEFINITION.match(line.rstrip("\n"))
                    if m:
                        seen.setdefault(m.group(2), None)
    # callgrind's placeholders for code without a symbol: "0x...", "(below main)".
    return [n for n in seen if not n.startswith(("0x", "("))]


def defined(binary: str) -> set[str]:
    """The function symbols the binary defines (its symbol table, as the linker wrote it)."""
    res = subprocess.run(["nm", "--defined-only", binary], stdout=subprocess.PIPE, check=True)
    names = set()
    for line in res.stdout.decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "tTwW":
            names.add(parts[2])
    return names


def main() -> None:
    ap = argparse.ArgumentParser(
        description="Record the functions short commands run, as the CLI's code order.",
        epilog="See the module docstring (scripts/code_order.py) for what is recorded.")
    ap.add_argument("binary", help="the agentloop binary to record from (or to check)")
    ap.add_argument("--out", default=DEFAULT_OUT,
                    help="the order file to write or check (default cli/startup.order)")
    ap.add_argument("--check", action="store_true",
                    help="only print how many of the file's names the binary defines")
    args = ap.parse_args()
    if not os.path.isfile(args.binary):
        sys.exit(f"no such binary: {args.binary}")
    binary = os.path.abspath(args.binary)
    try:
        if args.check:
            if not os.path.isfile(args.out):
                sys.exit(f"no order file at {args.out}")
            with open(args.out, encoding="utf-8") as f:
                wanted = [line.strip() for line in f if line.strip()]
            have = defined(binary)
            found = sum(1 for n in wanted if n in have)
            print(f"{found} of {len(wanted)} names in {os.path.relpath(args.out, ROOT)} "
                  f"are functions of {args.binary}")
            return
        have = defined(binary)
        names = [n for n in record(binary) if n in have]  # not the C library's
    except FileNotFoundError as e:
        sys.exit(f"{e.filename}: not found (valgrind and nm are needed: apt-get install valgrind binutils)")
    except subprocess.CalledProcessError as e:
        sys.exit(f"{' '.join(e.cmd)} failed with status {e.returncode}")
    if not names:
        sys.exit("callgrind recorded none of the binary's functions (a stripped binary?)")
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(names) + "\n")
    print(f"{len(names)} functions -> {args.out}")


if __name__ == "__main__":
    main()
