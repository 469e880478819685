"""Search by meaning: quality of `mem search --mode lexical|semantic|hybrid` on both dev
sets, and the cost of a cold hybrid search at 100,000 records.

1. Quality. LoCoMo dev and LongMemEval dev go in through `mem ingest` (the vaults of
   bench_retrieval.py and bench_longmemeval.py, cached under bench/results/), then
   `mem embed` (the configured model: the built-in one unless MEM_EMBEDDINGS_* say
   otherwise); each question is asked through the search operation `mem search` runs, in
   this process, in each mode, with SQLite FTS5 BM25 over the same turns in the same run.
   Turn R@10 per LoCoMo category and per LongMemEval question type, session hit@10, and
   the two halves (alternate questions) of each set.
2. Cost. A user of 100,000 messages (`--size`), embedded; cold `mem search` processes,
   lexical and hybrid interleaved (goal: hybrid ≤ 1.5× lexical), and the query
   embedding's share: a process that loads the model and embeds one query, less one that
   only starts.

    python bench/bench_hybrid.py [--quality-only | --cost-only] [--size N] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import BIN, RESULTS, interleaved, median_ms, report, run_timed, throwaway_env

MODES = ("lexical", "semantic", "hybrid")
K = 10


def embed_users(users: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    for user in users:
        subprocess.run([str(BIN / "mem"), "embed", "--user", user], check=True, env=env,
                       stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def locomo_rows() -> list[tuple[str, int, dict[str, float]]]:
    """(category, half, {ranker: R@10}) per LoCoMo question."""
    import bench_retrieval
    import locomo
    from locomo import CATEGORIES

    from memvault.config import resolve
    from memvault.model.records import Filters
    from memvault.ops.admin import init
    from memvault.ops.recall import search
    from memvault.vault.vault import Vault

    base = next(RESULTS.glob("locomo-*"), None) or RESULTS / "locomo-new"
    base.mkdir(parents=True, exist_ok=True)
    os.environ.update(MEM_VAULT=str(base / "vault"), MEM_CONFIG_DIR=str(base / "config"))
    init(resolve(user="bench"))
    conversations = locomo.load()
    for c in conversations:
        bench_retrieval.mem_ranker(c, base)  # ingests what is not yet
    seconds = embed_users([c.sample_id for c in conversations], os.environ.copy())
    print(f"LoCoMo: mem embed {seconds:.1f} s")
    rows = []
    now = datetime.now(UTC)
    for c in conversations:
        vault = Vault(resolve(user=c.sample_id))
        fts = bench_retrieval.baseline_ranker(c)
        for i, q in enumerate(c.questions):
            got = {"fts5": fts(q.text)[:K]}
            for mode in MODES:
                doc = search(vault, q.text, Filters(limit=K), now=now, audit=False, mode=mode)
                assert doc.mode == mode, doc.notice
                got[mode] = [r.message_id or "" for r in doc.results]
            rows.append((CATEGORIES[q.category], i % 2,
                         {n: 100 * len(q.evidence & set(r)) / len(q.evidence)
                          for n, r in got.items()}))
    return rows


def longmemeval_rows() -> list[tuple[str, int, dict[str, float], dict[str, float]]]:
    """(type, half, {ranker: R@10}, {ranker: session hit@10}) per question."""
    import bench_longmemeval as lme
    import longmemeval

    from memvault.config import resolve
    from memvault.model.records import Filters
    from memvault.ops.admin import init
    from memvault.ops.recall import search
    from memvault.vault.vault import Vault

    cache = RESULTS / f"longmemeval-{longmemeval.data_hash()}"
    cache.mkdir(parents=True, exist_ok=True)
    os.environ.update(MEM_VAULT=str(cache / "vault"), MEM_CONFIG_DIR=str(cache / "config"))
    init(resolve(user="bench"))  # a no-op when bench_longmemeval.py made the vault
    questions = longmemeval.load()
    for q in questions:
        lme.ingest(q, cache)
    seconds = embed_users([lme.user_of(q) for q in questions], os.environ.copy())
    print(f"LongMemEval: mem embed {seconds:.1f} s")
    fts = lme.fts5_ranker()
    rows, seen = [], {}
    for q in questions:
        n = seen[q.kind] = seen.get(q.kind, -1) + 1
        vault = Vault(resolve(user=lme.user_of(q)))
        got = {"fts5": fts(q)[0][:K]}
        for mode in MODES:
            doc = search(vault, q.text, Filters(limit=K, before=q.asked_at), now=q.asked_at,
                         audit=False, mode=mode)
            assert doc.mode == mode, doc.notice
            got[mode] = [r.message_id or "" for r in doc.results]
        scored = {name: lme.score(r, q) for name, r in got.items()}
        rows.append((q.kind, n % 2, {k: s["R@10"] for k, s in scored.items()},
                     {k: s["hit@10"] for k, s in scored.items()}))
    return rows


def _split(row: dict[str, float], label: str, rows: list[Any], mode: str) -> None:
    """R@10 of `mode` on each hash half of `rows`, then on each category or type."""
    for half in (0, 1):
        row[f"{label} half {'AB'[half]}"] = statistics.fmean(
            r[2][mode] for r in rows if r[1] == half)
    for kind in dict.fromkeys(r[0] for r in rows):
        row[f"{label} {kind}"] = statistics.fmean(r[2][mode] for r in rows if r[0] == kind)


def quality() -> dict[str, object]:
    for var in ("MEM_KEY_FILE", "MEM_KEY_COMMAND", "MEM_MASTER_KEY", "MEM_ORG", "MEM_USER"):
        os.environ.pop(var, None)
    names = ("fts5", *MODES)
    loc = locomo_rows()
    table: dict[str, dict[str, float]] = {n: {} for n in names}
    lme = longmemeval_rows()
    for n in names:
        table[n]["LoCoMo R@10"] = statistics.fmean(r[2][n] for r in loc)
        _split(table[n], "LoCoMo", loc, n)
        table[n]["LME R@10"] = statistics.fmean(r[2][n] for r in lme)
        table[n]["LME hit@10"] = statistics.fmean(r[3][n] for r in lme)
        _split(table[n], "LME", lme, n)
    print(f"{'turn R@10':<36}" + "".join(f"{n:>10}" for n in names) + "   hybrid-lexical")
    for metric in table["hybrid"]:
        print(f"{metric:<36}" + "".join(f"{table[n][metric]:>10.1f}" for n in names)
              + f"   {table['hybrid'][metric] - table['lexical'][metric]:+10.1f}")
    return {"locomo_questions": len(loc), "longmemeval_questions": len(lme),
            "results": table}


def cost(size: int, rounds: int, reuse: Path | None) -> dict[str, object]:
    """Cold `mem search` processes at `size` messages, lexical vs hybrid, interleaved.
    `reuse`: the directory of a vault an earlier run filled and embedded (its path is
    printed)."""
    import bench_scale

    env = throwaway_env()
    env["MEM_EMBEDDINGS_BACKGROUND"] = "false"
    fill_s = embed_s = 0.0
    if reuse is not None:
        env.update(MEM_VAULT=str(reuse / "vault"), MEM_CONFIG_DIR=str(reuse / "config"))
    else:
        with tempfile.TemporaryDirectory(prefix="mem-hybrid-") as tmp:
            corpus_file = Path(tmp) / "corpus.json"
            corpus_file.write_text(json.dumps(bench_scale.corpus()))
            started = time.perf_counter()
            bench_scale.fill(env, "bench", size, corpus_file)
            fill_s = time.perf_counter() - started
            embed_s = embed_users(["bench"], env)
        print(f"{size} messages in {Path(env['MEM_VAULT']).parent}: filled in {fill_s:.0f} s, "
              f"mem embed {embed_s:.0f} s")
    user_env = {**env, "MEM_USER": "bench"}
    queries = ["what did she paint last year", "adoption agency interview",
               "favourite hiking trail with the kids", "camping by the lake in summer"]
    mem = str(BIN / "mem")

    def case(mode: str) -> object:
        return lambda i: run_timed([mem, "search", queries[i % len(queries)], "--mode", mode,
                                    "--json"], user_env)

    # The query's embedding as a cold process pays it: the model's files read, one text.
    embed_one = ("from memvault.embed.builtin import load; "
                 "load().embed(['what did she paint last year'])")
    samples = interleaved({
        "lexical": case("lexical"), "hybrid": case("hybrid"),
        "python start": lambda i: run_timed([sys.executable, "-c", "pass"], user_env),
        "python + query embedding": lambda i: run_timed([sys.executable, "-c", embed_one],
                                                        user_env),
    }, rounds)
    medians = {k: median_ms(v) for k, v in samples.items()}
    share = medians["python + query embedding"] - medians["python start"]
    ratio = medians["hybrid"] / medians["lexical"]
    print(f"cold mem search at {size} messages (median of {rounds}): lexical "
          f"{medians['lexical']:.0f} ms, hybrid {medians['hybrid']:.0f} ms, ratio "
          f"{ratio:.2f} (goal ≤ 1.5); the query's embedding (model load + one text) "
          f"{share:.0f} ms = {100 * share / medians['hybrid']:.0f} % of hybrid")
    return {"size": size, "rounds": rounds, "median_ms": medians, "ratio": ratio,
            "embedding_ms": share, "fill_seconds": fill_s, "embed_seconds": embed_s}


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quality-only", action="store_true")
    parser.add_argument("--cost-only", action="store_true")
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--reuse", type=Path, help="a filled vault's directory (cost)")
    args = parser.parse_args(argv or [])
    doc: dict[str, object] = {}
    if not args.cost_only:
        doc["quality"] = quality()
    if not args.quality_only:
        doc["cost"] = cost(args.size, args.rounds, args.reuse)
    report("hybrid", doc)
    return doc


if __name__ == "__main__":
    main(sys.argv[1:])
