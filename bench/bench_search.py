"""Search speed: warm query latency at 10k and 100k records, the index build for 100k,
and a cold `mem search` process on a 20,000-message user against a floor process that
imports the same libraries, opens the Tantivy index, searches and decrypts 10 records."""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import BIN, interleaved, median_ms, report, run_timed
from locomo import load

PER_SESSION = 100
TARGET_WARM_MS = 1.0
TARGET_COLD_RATIO = 2.0

FLOOR = r"""
import base64, json, sys
import typer, rich.console, rich.table, yaml, platformdirs, tantivy
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
index_dir, session_file, key_hex = sys.argv[1:4]
index = tantivy.Index.open(index_dir)
searcher = index.searcher()
q = tantivy.Query.term_query(index.schema, "type", "message")
hits = searcher.search(q, 10).hits
ids = [searcher.doc(a).get_first("id") for _, a in hits]
aead = AESGCM(bytes.fromhex(key_hex))
with open(session_file, "rb") as fh:
    for line, _ in zip(fh, range(10)):
        doc = json.loads(line)
        try:
            aead.decrypt(base64.b64decode(doc["n"]), base64.b64decode(doc["ct"]), b"")
        except Exception:
            pass  # the floor does the work of decrypting, not the AAD bookkeeping
"""


def texts() -> list[str]:
    return [t.text for c in load() for t in c.turns]


def fill(user: str, count: int, corpus: list[str]) -> tuple[Any, float]:
    from memvault.config import resolve
    from memvault.model.records import NewMessage
    from memvault.ops.ingest import add_messages
    from memvault.vault.vault import Vault

    vault = Vault(resolve(user=user))
    started = time.perf_counter()
    for s in range(count // PER_SESSION):
        batch = [NewMessage(content=corpus[(s * PER_SESSION + i) % len(corpus)],
                            role="user" if i % 2 else "assistant", message_id=f"m{s}-{i}")
                 for i in range(PER_SESSION)]
        add_messages(vault, f"s{s:05d}", batch)
    return vault, time.perf_counter() - started


def warm_latency(vault: Any, queries: list[str]) -> dict[str, float]:
    from memvault.model.records import Filters
    from memvault.ops.recall import search

    index = vault.ready_index()
    filters = Filters(limit=10)
    for q in queries[:20]:
        search(vault, q, filters)  # warm caches
    index_only, full = [], []
    for q in queries:
        started = time.perf_counter()
        query, stems = index.build_query(q, filters)
        index.search(query, 10, recent=not stems)
        index_only.append(time.perf_counter() - started)
        started = time.perf_counter()
        search(vault, q, filters)
        full.append(time.perf_counter() - started)
    return {"index query median ms": median_ms(index_only),
            "search + decrypt 10 median ms": median_ms(full)}


def main() -> dict[str, object]:
    base = Path(tempfile.mkdtemp(prefix="mem-bench-search-"))
    os.environ.update(MEM_VAULT=str(base / "vault"), MEM_CONFIG_DIR=str(base / "config"))
    for var in ("MEM_KEY_FILE", "MEM_KEY_COMMAND", "MEM_MASTER_KEY", "MEM_ORG", "MEM_USER"):
        os.environ.pop(var, None)
    from memvault.config import resolve
    from memvault.ops.admin import init

    init(resolve(user="bench"))
    corpus = texts()
    rng = random.Random(7)
    queries = [q.text for c in load() for q in c.questions]
    rng.shuffle(queries)
    queries = queries[:300]
    doc: dict[str, object] = {}

    for size in (10_000, 100_000):
        vault, fill_s = fill(f"u{size}", size, corpus)
        row = warm_latency(vault, queries)
        row["ingest seconds"] = fill_s
        if size == 100_000:
            with vault.transaction() as tx:
                started = time.perf_counter()
                count = tx.rebuild_indexes()
                row["index build seconds"] = time.perf_counter() - started
                row["index build docs"] = count
        doc[f"{size} records"] = row
        print(f"{size:>7} records: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float)
                                                   else f"{k} {v}" for k, v in row.items()))

    # Cold processes on a 20,000-message user.
    vault, _ = fill("cold", 20_000, corpus)
    vault.ready_index()
    from memvault.crypto.keys import record_key

    store = vault.store
    env = {**os.environ, "MEM_USER": "cold", "NO_COLOR": "1"}
    floor_args = [sys.executable, "-c", FLOOR, str(vault.layout.index_dir),
                  str(vault.layout.path(vault.layout.line_files()[0])),
                  record_key(store.dek(1)).hex()]
    mem = str(BIN / "mem")
    cases = {
        "floor": lambda i: run_timed(floor_args, env),
        "mem search (question)": lambda i: run_timed(
            [mem, "search", queries[i % len(queries)], "--json"], env),
        "mem search (recent)": lambda i: run_timed([mem, "search", "--json"], env),
    }
    samples = interleaved(cases, 15)
    floor = median_ms(samples["floor"])
    cold = {}
    for name, values in samples.items():
        ms = median_ms(values)
        cold[name] = {"median_ms": round(ms, 1), "ratio": round(ms / floor, 2)}
        print(f"cold {name:<24} {ms:8.1f} ms  {ms / floor:5.2f}× floor")
    doc["cold 20000 messages"] = cold
    doc["targets"] = {"warm index query ms": TARGET_WARM_MS, "cold ratio": TARGET_COLD_RATIO}
    report("search", doc)
    return doc


if __name__ == "__main__":
    main()
