"""Retrieval quality on LongMemEval-S: turn-level R@5/R@10 and session-level hit@5/@10
per question type, mem against a stemmed BM25 (SQLite FTS5, porter tokenizer, question
words OR-ed) over the same turns in the same run, and query latency.

Each question is its own memory, put in the way a user's chat exports would be: one
generic JSONL file per haystack session (its real date and time on every message),
through `mem ingest --scan`, as user `q-<question id>`. The question is asked through
the search operation the CLI runs, in this process, as of the question's date.

Ingesting 60 haystacks takes minutes, so the vaults are kept between runs under
bench/results/longmemeval-<data hash>/ (`--fresh` starts over; `--reindex` rebuilds
every index, for a change to indexing that does not bump the index format).

    python bench/bench_longmemeval.py [--type TYPE ...] [--fresh] [--reindex]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import BIN, RESULTS, report
from longmemeval import TYPES, Question, data_hash, load

KS = (5, 10)
PARALLEL = 2  # the machine's cores: ingests run two at a time

Ranker = Callable[[Question], tuple[list[str], float]]  # the ranked ids, the query's time


def fts5_ranker() -> Ranker:
    """SQLite FTS5 BM25 over the question's turns (one table, filtered by question)."""
    def rank(q: Question) -> tuple[list[str], float]:
        db = sqlite3.connect(":memory:")
        db.execute("CREATE VIRTUAL TABLE turns USING fts5(turn_id UNINDEXED, text, "
                   "tokenize='porter')")
        db.executemany("INSERT INTO turns VALUES (?, ?)", [(t.turn_id, t.text)
                                                           for t in q.turns])
        words = re.findall(r"\w+", q.text)
        match = " OR ".join(f'"{w}"' for w in words)
        started = time.perf_counter()
        rows = db.execute("SELECT turn_id FROM turns WHERE turns MATCH ? ORDER BY rank "
                          "LIMIT ?", (match, max(KS))).fetchall()
        elapsed = time.perf_counter() - started
        db.close()
        return [r[0] for r in rows], elapsed

    return rank


def user_of(q: Question) -> str:
    return "q-" + re.sub(r"[^A-Za-z0-9_.-]", "-", q.question_id)[:60]


def ingest(q: Question, cache: Path) -> float:
    """The question's haystack through `mem ingest --scan`, one JSONL file per session."""
    marker = cache / "ingested" / q.question_id
    if marker.exists():
        return 0.0
    with tempfile.TemporaryDirectory(prefix="mem-lme-") as tmp:
        sessions: dict[int, list[str]] = {}
        for t in q.turns:
            sessions.setdefault(t.session, []).append(json.dumps(
                {"id": t.turn_id, "role": t.role, "content": t.text,
                 "timestamp": t.created_at}))
        for s, lines in sessions.items():
            (Path(tmp) / f"s{s:03d}.jsonl").write_text("\n".join(lines) + "\n")
        started = time.perf_counter()
        subprocess.run([str(BIN / "mem"), "ingest", "--scan", tmp, "--format", "jsonl",
                        "--user", user_of(q), "--quiet"], check=True, env=os.environ.copy())
        seconds = time.perf_counter() - started
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{seconds:.2f}\n")
    return seconds


def mem_ranker(reindex: bool) -> Ranker:
    from memvault.config import resolve
    from memvault.model.records import Filters
    from memvault.ops.recall import search
    from memvault.vault.vault import Vault

    def rank(q: Question) -> tuple[list[str], float]:
        vault = Vault(resolve(user=user_of(q)))
        if reindex:
            with vault.lock():
                vault.rebuild_indexes(vault.store.load_state())
        vault.ready_index()
        started = time.perf_counter()
        doc = search(vault, q.text, Filters(limit=max(KS), before=q.asked_at),
                     now=q.asked_at)
        return [r.message_id or "" for r in doc.results], time.perf_counter() - started

    return rank


def score(ranked: list[str], q: Question) -> dict[str, float]:
    row = {}
    for k in KS:
        top = ranked[:k]
        row[f"R@{k}"] = 100 * len(q.gold_turns & set(top)) / len(q.gold_turns)
        sessions = {int(t.split(":")[0]) for t in top if ":" in t}
        row[f"hit@{k}"] = 100.0 if sessions & q.gold_sessions else 0.0
    return row


def table(rows: dict[str, list[tuple[Question, dict[str, float]]]],
          keep: Callable[[Question], bool]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name, scored in rows.items():
        mine = [(q, s) for q, s in scored if keep(q)]
        if not mine:
            continue
        line: dict[str, float] = {}
        for metric in [f"R@{k}" for k in KS] + [f"hit@{k}" for k in KS]:
            line[metric] = statistics.fmean(s[metric] for _, s in mine)
        for kind in TYPES:
            values = [s["R@10"] for q, s in mine if q.kind == kind]
            if values:
                line[f"{kind} R@10"] = statistics.fmean(values)
        out[name] = line
    return out


def show(title: str, results: dict[str, dict[str, float]]) -> None:
    print(title)
    cols = [c for c in next(iter(results.values()))]
    short = {c: c.replace("single-session-", "ss-").replace("knowledge-update", "k-update")
             .replace("temporal-reasoning", "temporal").replace("multi-session", "multi")
             .replace("assistant", "assist").replace("preference", "pref")
             .replace("median query", "query") for c in cols}
    print(f"{'':<20}" + "".join(f"{short[c]:>16}" for c in cols))
    for name, line in results.items():
        print(f"{name:<20}" + "".join(f"{line.get(c, 0.0):>16.1f}" for c in cols))


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--type", action="append", choices=TYPES)
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--reindex", action="store_true")
    args = parser.parse_args(argv or [])
    questions = [q for q in load() if not args.type or q.kind in args.type]
    cache = RESULTS / f"longmemeval-{data_hash()}"
    if args.fresh:
        shutil.rmtree(cache, ignore_errors=True)
    os.environ.update(MEM_VAULT=str(cache / "vault"), MEM_CONFIG_DIR=str(cache / "config"))
    for var in ("MEM_KEY_FILE", "MEM_KEY_COMMAND", "MEM_MASTER_KEY", "MEM_ORG", "MEM_USER"):
        os.environ.pop(var, None)
    from memvault.config import resolve
    from memvault.ops.admin import init

    init(resolve(user="bench"))
    started = time.perf_counter()
    with ThreadPoolExecutor(PARALLEL) as pool:
        ingest_s = sum(pool.map(lambda q: ingest(q, cache), questions))
    wall = time.perf_counter() - started
    rankers: dict[str, Ranker] = {"bm25 (fts5 porter)": fts5_ranker(),
                                  "mem": mem_ranker(args.reindex)}
    rows: dict[str, list[tuple[Question, dict[str, float]]]] = {n: [] for n in rankers}
    latency: dict[str, list[float]] = {n: [] for n in rankers}
    for q in questions:
        for name, rank in rankers.items():
            ranked, seconds = rank(q)
            rows[name].append((q, score(ranked, q)))
            latency[name].append(seconds)
    print(f"{len(questions)} questions, {sum(len(q.turns) for q in questions)} turns; "
          f"mem ingest {ingest_s:.1f} s of processes ({wall:.1f} s wall, "
          f"{PARALLEL} at a time; cached in {cache.relative_to(RESULTS.parent.parent)})")
    results = table(rows, lambda q: True)
    for name in results:
        results[name]["median query ms"] = 1000 * statistics.median(latency[name])
    show("all questions", results)
    # Two halves (alternate questions of each type): a change that helps only one half
    # fits the questions, not the retrieval.
    order = {q.question_id: i for i, q in enumerate(questions)}
    halves = {}
    for half in (0, 1):
        halves[f"half {'AB'[half]}"] = table(
            rows, lambda q, h=half: order[q.question_id] % 2 == h)  # type: ignore[misc]
    for name, res in halves.items():
        show(name, {n: {k: v for k, v in line.items() if "@" in k and " " not in k}
                    for n, line in res.items()})
    mem, bm25 = results["mem"], results["bm25 (fts5 porter)"]
    worst = min(TYPES, key=lambda t: mem.get(f"{t} R@10", 0) - bm25.get(f"{t} R@10", 0))
    print(f"mem R@10 - baseline R@10 = {mem['R@10'] - bm25['R@10']:+.1f} points; "
          f"worst type {worst} {mem[f'{worst} R@10'] - bm25[f'{worst} R@10']:+.1f}; "
          f"mem session hit@10 {mem['hit@10']:.1f}")
    doc = {"questions": len(questions), "results": results, "halves": halves,
           "ingest_seconds": ingest_s}
    report("longmemeval", doc)
    return doc


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
