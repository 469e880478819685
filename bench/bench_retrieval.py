"""Retrieval quality on LoCoMo: turn-level Recall@5/10/25 per category and overall
(categories 1-4), mem against a stemmed BM25 baseline (SQLite FTS5, porter tokenizer,
question words OR-ed) computed in the same run over the same turns.

The ingested vaults are kept between runs under bench/results/locomo-<data hash>/
(`--fresh` starts over; `--reindex` rebuilds every index, for a change to indexing that
does not bump the index format).

    python bench/bench_retrieval.py [--fresh] [--reindex]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from common import BENCH_DATA, BIN, RESULTS, report
from locomo import CATEGORIES, Conversation, load

KS = (5, 10, 25)
TARGET_R10 = 62.8


def baseline_ranker(conv: Conversation) -> Callable[[str], list[str]]:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE turns USING fts5(dia_id UNINDEXED, text, "
               "tokenize='porter')")
    db.executemany("INSERT INTO turns VALUES (?, ?)", [(t.dia_id, t.text) for t in conv.turns])

    def rank(question: str) -> list[str]:
        words = re.findall(r"\w+", question)
        if not words:
            return []
        match = " OR ".join(f'"{w}"' for w in words)
        rows = db.execute("SELECT dia_id FROM turns WHERE turns MATCH ? ORDER BY rank "
                          "LIMIT ?", (match, max(KS))).fetchall()
        return [r[0] for r in rows]

    return rank


def mem_ranker(conv: Conversation, base: Path, reindex: bool = False
               ) -> tuple[Callable[[str], list[str]], float]:
    """Each LoCoMo session goes in the way a user's chat export would: a generic JSONL file
    (speakers as `name`, OpenAI's chat convention) through `mem ingest`. Questions are
    asked through the search operation the CLI runs, in this process (a process per
    question would time the interpreter's start, not the search)."""
    from memvault.config import resolve
    from memvault.model.records import Filters
    from memvault.ops.recall import search
    from memvault.vault.vault import Vault

    marker = base / "ingested" / conv.sample_id
    sessions: dict[str, list[dict[str, str]]] = {}
    for t in conv.turns if not marker.exists() else ():
        sessions.setdefault(t.session, []).append(
            {"id": t.dia_id, "role": "user", "name": t.speaker, "content": t.text,
             "timestamp": t.created_at})
    started = time.perf_counter()
    for session, rows in sessions.items():
        path = base / f"{conv.sample_id}-{session}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        subprocess.run([str(BIN / "mem"), "ingest", str(path), "--format", "jsonl",
                        "--session", session, "--user", conv.sample_id, "--quiet"],
                       check=True, env=os.environ.copy())
    ingest_s = time.perf_counter() - started
    if not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"{ingest_s:.2f}\n")
    vault = Vault(resolve(user=conv.sample_id))
    if reindex:
        with vault.lock():
            vault.rebuild_indexes(vault.store.load_state())

    def rank(question: str) -> list[str]:
        # As `mem search` asks: now (time phrases count from it).
        doc = search(vault, question, Filters(limit=max(KS)), now=datetime.now(UTC))
        return [r.message_id or "" for r in doc.results]

    return rank, ingest_s


def evaluate(name: str, rankers: dict[str, Callable[[str], list[str]]],
             conversations: list[Conversation]) -> dict[str, dict[str, float]]:
    recalls: dict[str, dict[tuple[int, int], list[float]]] = {n: {} for n in rankers}
    latencies: dict[str, list[float]] = {n: [] for n in rankers}
    halves: dict[str, dict[int, list[float]]] = {n: {0: [], 1: []} for n in rankers}
    for conv in conversations:
        for i, q in enumerate(conv.questions):
            for n, rank in rankers.items():
                started = time.perf_counter()
                ranked = rank(f"{conv.sample_id}\x00{q.text}")
                latencies[n].append(time.perf_counter() - started)
                for k in KS:
                    hit = len(q.evidence & set(ranked[:k])) / len(q.evidence)
                    recalls[n].setdefault((q.category, k), []).append(hit)
                    if k == 10:
                        halves[n][i % 2].append(hit)
    out: dict[str, dict[str, float]] = {}
    for n in rankers:
        row: dict[str, float] = {}
        for k in KS:
            every: list[float] = []
            for cat in CATEGORIES:
                values = recalls[n].get((cat, k), [])
                every += values
                row[f"cat{cat} R@{k}"] = 100 * statistics.fmean(values) if values else 0.0
            row[f"R@{k}"] = 100 * statistics.fmean(every)
        # Alternate questions of each conversation: a change that helps one half only
        # fits the questions, not the retrieval.
        row["half A R@10"] = 100 * statistics.fmean(halves[n][0])
        row["half B R@10"] = 100 * statistics.fmean(halves[n][1])
        row["median query ms"] = 1000 * statistics.median(latencies[n])
        out[n] = row
    return out


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--reindex", action="store_true")
    args = parser.parse_args(argv or [])
    conversations = load()
    data = hashlib.sha256((BENCH_DATA / "locomo_dev.json").read_bytes()).hexdigest()[:12]
    base = RESULTS / f"locomo-{data}"
    if args.fresh:
        shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True, exist_ok=True)
    os.environ.update(MEM_VAULT=str(base / "vault"), MEM_CONFIG_DIR=str(base / "config"))
    for var in ("MEM_KEY_FILE", "MEM_KEY_COMMAND", "MEM_MASTER_KEY", "MEM_ORG"):
        os.environ.pop(var, None)
    from memvault.config import resolve
    from memvault.ops.admin import init

    init(resolve(user="bench"))
    baseline = {c.sample_id: baseline_ranker(c) for c in conversations}
    mems, ingest_total = {}, 0.0
    for c in conversations:
        mems[c.sample_id], seconds = mem_ranker(c, base, args.reindex)
        ingest_total += seconds

    def dispatch(table: dict[str, Callable[[str], list[str]]]) -> Callable[[str], list[str]]:
        def rank(key: str) -> list[str]:
            sample, _, question = key.partition("\x00")
            return table[sample](question)
        return rank

    results = evaluate("locomo", {"bm25 (fts5 porter)": dispatch(baseline),
                                  "mem": dispatch(mems)}, conversations)
    questions = sum(len(c.questions) for c in conversations)
    turns = sum(len(c.turns) for c in conversations)
    print(f"{len(conversations)} conversations, {turns} turns, {questions} questions "
          f"(categories 1-4); mem ingest {ingest_total:.1f} s")
    cols = [f"R@{k}" for k in KS] + [f"cat{c} R@10" for c in CATEGORIES] + ["half A R@10",
                                                                  "half B R@10",
                                                                  "median query ms"]
    print(f"{'':<22}" + "".join(f"{c:>17}" for c in cols))
    for name, row in results.items():
        print(f"{name:<22}" + "".join(f"{row[c]:>17.1f}" for c in cols))
    delta = results["mem"]["R@10"] - results["bm25 (fts5 porter)"]["R@10"]
    print(f"mem R@10 - baseline R@10 = {delta:+.1f} points "
          f"(categories: {', '.join(f'{k}={v}' for k, v in CATEGORIES.items())})")
    doc = {"conversations": len(conversations), "turns": turns, "questions": questions,
           "results": results, "ingest_seconds": ingest_total}
    report("retrieval", doc)
    return doc


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
