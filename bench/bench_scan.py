"""Scan: `mem ingest --scan DIR` over 1,000 session files of 100 messages each (what a
cron job finds in ~/.claude/projects after a busy month), against a floor process that
ingests the same messages in one process: it parses each file, encrypts each line,
writes each session file with its own fsync (a scan must make each file durable), HMACs
every token and adds it to one Tantivy index with one commit. Target: ≤ 3× the floor.
Also the re-scan of the unchanged tree, which must read nothing but the directory."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from common import BIN, INDEXING_FLOOR, report, run_timed, throwaway_env
from locomo import load

FILES = int(os.environ.get("MEM_BENCH_SCAN_FILES", "1000"))
PER_FILE = 100
ROUNDS = 3
TARGET_RATIO = 3.0

FLOOR = INDEXING_FLOOR + r"""
n = 0
for root, _, names in os.walk(src):
    for name in sorted(names):
        lines = []
        with open(os.path.join(root, name), "rb") as fh:
            for raw in fh:
                msg = json.loads(raw)
                nonce = os.urandom(12)
                ct = aead.encrypt(nonce, raw, str(n).encode())
                lines.append(json.dumps({"n": base64.b64encode(nonce).decode(),
                                         "ct": base64.b64encode(ct).decode()}).encode() + b"\n")
                writer.add_document(tantivy.Document(id=str(n), body=" ".join(
                    h(t) for t in analyzer.analyze(msg["content"]))))
                n += 1
        fd = os.open(os.path.join(out_dir, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.write(fd, b"".join(lines)); os.fsync(fd); os.close(fd)
writer.commit()
"""


def make_tree(root: Path) -> int:
    """FILES generic JSONL session files of PER_FILE LoCoMo turns, in project folders."""
    turns = [t.text for c in load() for t in c.turns]
    n = 0
    for f in range(FILES):
        folder = root / f"project-{f % 20:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / f"session-{f:04d}.jsonl").open("w") as fh:
            for i in range(PER_FILE):
                fh.write(json.dumps({"id": f"m{i}", "role": "user" if i % 2 else "assistant",
                                     "content": turns[n % len(turns)],
                                     "timestamp": f"2026-02-{1 + f % 28:02d}T10:{i // 60:02d}:"
                                                  f"{i % 60:02d}Z"}) + "\n")
                n += 1
    return n


def main() -> dict[str, object]:
    env = throwaway_env()
    work = Path(tempfile.mkdtemp(prefix="mem-bench-scan-"))
    mem = str(BIN / "mem")
    run_timed([mem, "init"], env)
    tree = work / "projects"
    messages = make_tree(tree)
    floor_s, mem_s = [], []
    for i in range(ROUNDS):
        out = work / f"floor{i}"
        out.mkdir()
        floor_s.append(run_timed([sys.executable, "-c", FLOOR, str(tree), str(out)], env))
        shutil.rmtree(out)
        mem_s.append(run_timed([mem, "ingest", "--scan", str(tree), "--user", f"scan{i}",
                                "--quiet"], env))
    rescan = run_timed([mem, "ingest", "--scan", str(tree), "--user", "scan0", "--quiet"], env)
    floor, ours = statistics.median(floor_s), statistics.median(mem_s)
    print(f"tree: {FILES} files, {messages} messages")
    print(f"floor (parse, encrypt, fsync per file, HMAC tokens, one commit): {floor:.2f} s")
    print(f"mem ingest --scan: {ours:.2f} s ({ours / floor:.2f}× floor, target ≤ "
          f"{TARGET_RATIO}×); runs {', '.join(f'{x:.2f}' for x in mem_s)}")
    print(f"mem ingest --scan of the unchanged tree: {rescan:.2f} s")
    doc = {"files": FILES, "messages": messages, "floor_s": floor, "mem_scan_s": ours,
           "ratio": ours / floor, "floor_runs": floor_s, "mem_runs": mem_s,
           "rescan_s": rescan, "target": TARGET_RATIO}
    report("scan", doc)
    return doc


if __name__ == "__main__":
    main()
