#!/usr/bin/env bash
# Regenerates docs/trace-view.png: `agentloop trace view` of the retry fixture, shot by headless
# Debian chromium at 1400x900 with the first retry's record selected, cut to its top 690 rows.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cargo run -q -p agentloop-cli -- trace view tests/fixtures/traces/v4-retry-tool.jsonl -o "$tmp/run.html"
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$tmp/profile" \
  --screenshot="$tmp/full.png" --window-size=1400,900 "file://$tmp/run.html#r17" 2>/dev/null
python3 - "$tmp/full.png" docs/trace-view.png 690 <<'PY'
# Keeps the top ROWS pixel rows of a PNG without an imaging library: a row is filtered against
# the row above only, so the first rows of the decompressed stream stand alone.
import struct, sys, zlib
src, dst, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(src, "rb").read()
pos, chunks = 8, []
while pos < len(data):
    (n,) = struct.unpack(">I", data[pos:pos + 4])
    chunks.append((data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]))
    pos += 12 + n
ihdr = chunks[0][1]
w, h, depth, ctype = struct.unpack(">IIBB", ihdr[:10])
stride = 1 + (w * {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[ctype] * depth + 7) // 8
raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
rows = min(rows, h)
def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
extra = b"".join(chunk(k, b) for k, b in chunks if k == b"PLTE")
out = data[:8] + chunk(b"IHDR", struct.pack(">II", w, rows) + ihdr[8:]) + extra
out += chunk(b"IDAT", zlib.compress(raw[:rows * stride], 9)) + chunk(b"IEND", b"")
open(dst, "wb").write(out)
PY
ls -l docs/trace-view.png
