"""Live transcripts of the agents that append JSON lines (issue 34, item 4): a Cursor agent
transcript of 10,000 messages (about 3 MB: the turns of the LoCoMo conversations, a user
line and an assistant line a turn, as Cursor's CLI writes them), as hooks read it: ingested
once, then grown by one line at a time, each growth ingested as a hook reads it
(ops.ingest.ingest_file, in this process: start-up is the same either way and would hide
what reading costs). The baseline, measured in the same run: that one line ingested
alone, as a transcript of its own in a session of its own (what storing one line costs:
sealing, the index commit). Seconds are medians of ROUNDS growths; `mem ingest` of the
grown file, start-up included, is printed beside them.

Target: a grown transcript read in O(new): its ingest ≤ 2× the one line's alone.
MEM_BENCH_LINES_MESSAGES sets the size (default 10000)."""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench_search import texts
from common import BIN, environment, report, run_timed, throwaway_env

ROUNDS = 5
GROWN_RATIO = 2.0
AGENT = "7d1c0de5-2222-4333-8444-555566667777"


def line(role: str, text: str) -> bytes:
    """One message as Cursor's agent transcript holds it (the user's words in <user_query>)."""
    if role == "user":
        text = f"<user_query>\n{text}\n</user_query>"
    return json.dumps({"role": role, "message": {"content": [
        {"type": "text", "text": text}]}}).encode() + b"\n"


def main(rounds: int = ROUNDS) -> dict[str, object]:
    env = throwaway_env()
    mem = str(BIN / "mem")
    run_timed([mem, "init"], env)
    work = Path(tempfile.mkdtemp(prefix="mem-bench-lines-"))
    count = int(os.environ.get("MEM_BENCH_LINES_MESSAGES") or 10000)
    corpus = texts()
    # Cursor's layout: <project>/agent-transcripts/<id>/<id>.jsonl, the session <id>.
    path = work / "projects" / "p" / "agent-transcripts" / AGENT / f"{AGENT}.jsonl"
    path.parent.mkdir(parents=True)
    with path.open("wb") as fh:
        for n in range(count):
            fh.write(line("user" if n % 2 == 0 else "assistant",
                          f"{corpus[n % len(corpus)]} {corpus[(n + 7) % len(corpus)]} ({n})"))
    size = path.stat().st_size
    first = run_timed([mem, "ingest", str(path), "--quiet"], env)
    unchanged = run_timed([mem, "ingest", str(path), "--quiet"], env)
    rows: dict[str, list[float]] = {"grown_s": [], "alone_s": [], "cli_grown_s": []}
    with environment(env):
        from memvault.config import resolve
        from memvault.ops.ingest import ingest_file
        from memvault.vault.vault import Vault

        vault = Vault(resolve())

        def timed(path: Path, session: str | None = None) -> float:
            started = time.perf_counter()
            ingest_file(vault, path, session=session)
            return time.perf_counter() - started

        for i in range(rounds):
            new = line("user", f"and one more thing, the {i}th: {corpus[-1 - i]}")
            alone = work / f"alone{i}.jsonl"
            alone.write_bytes(new)
            rows["alone_s"].append(timed(alone, session=f"alone-{i}"))
            with path.open("ab") as fh:
                fh.write(new)
            rows["grown_s"].append(timed(path))
            with path.open("ab") as fh:  # and again, through the command
                fh.write(line("assistant", f"noted, the {i}th"))
            rows["cli_grown_s"].append(run_timed([mem, "ingest", str(path), "--quiet"], env))
    med = {k: statistics.median(v) for k, v in rows.items()}
    ratio = med["grown_s"] / med["alone_s"]
    print(f"Cursor transcript of {count} messages ({size / 1e6:.1f} MB): first ingest "
          f"{first:.2f} s, again unchanged {unchanged:.2f} s (mem ingest)")
    print(f"one line alone: {med['alone_s']:.3f} s; the transcript grown by it: "
          f"{med['grown_s']:.3f} s ({ratio:.2f}×, target ≤ {GROWN_RATIO:.0f}×); mem ingest "
          f"of it grown again: {med['cli_grown_s']:.3f} s (medians of {rounds})")
    doc = {"messages": count, "bytes": size, "rounds": rounds, "first_s": first,
           "unchanged_s": unchanged, **med, "grown_ratio": ratio, "all": rows}
    report("live_lines", doc)
    return doc


if __name__ == "__main__":
    os.environ.setdefault("NO_COLOR", "1")
    main()
