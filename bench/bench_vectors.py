"""The sealed vector store: bytes per vector at rest (sealing included), warm search
median at 10k / 100k (and 1M with MEM_BENCH_VECTORS_1M=1: building it takes minutes),
cold open + first search, peak RSS of a process that searches, and recall@10 against
exact brute force. Synthetic random unit vectors of the built-in model's 256 dimensions
(the worst case for sign codes: real embeddings cluster). Baseline, same run: plain numpy
brute force (matrix product + argpartition) over the same vectors unsealed in float32.

Targets: <= 1 KB per vector; warm search < 10 ms at 100k, < 100 ms at 1M.
Each size is measured in a fresh process, so that peak RSS is the search's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, report

DIMS = 256
QUERIES = 40
SIZES = [10_000, 100_000] + ([1_000_000] if os.environ.get("MEM_BENCH_VECTORS_1M") else [])
BATCH = 65_536


def unit_rows(seed: int, n: int, dims: int = DIMS) -> object:
    import numpy as np

    rng = np.random.default_rng(seed)
    out = np.empty((n, dims), np.float32)
    for lo in range(0, n, BATCH):
        m = rng.standard_normal((min(BATCH, n - lo), dims)).astype(np.float32)
        out[lo:lo + len(m)] = m / np.linalg.norm(m, axis=1, keepdims=True)
    return out


def build(directory: Path, n: int) -> float:
    """A store of n vectors added in batches (segments); seconds it took."""
    from memvault.embed.base import ModelId
    from memvault.index.vectors import VectorItem, VectorStore

    rows = unit_rows(1, n)
    store = VectorStore(directory, b"k" * 32, 1, owner="bench/user")
    model = ModelId("builtin", "l2_supercat", DIMS)
    start = time.perf_counter()
    for lo in range(0, n, BATCH):
        store.add(model, [VectorItem(f"{i:036d}", b"\0" * 8, False, rows[i],  # type: ignore[index]
                                     "sessions/s.jsonl") for i in range(lo, min(n, lo + BATCH))])
    return time.perf_counter() - start


def measure(directory: str, n: int) -> dict[str, object]:
    """In a fresh process: cold open + first search, warm searches, recall, peak RSS;
    then the brute-force baseline (after the RSS reading, which it would swamp)."""
    import resource
    import statistics

    t0 = time.perf_counter()
    import numpy as np

    from memvault.index.vectors import VectorStore

    imported = time.perf_counter() - t0
    queries = unit_rows(7, QUERIES + 1)
    start = time.perf_counter()
    store = VectorStore(Path(directory), b"k" * 32, 1, owner="bench/user")
    store.search(queries[0], 10)  # type: ignore[index]
    cold = time.perf_counter() - start
    warm, cpu, hits = [], [], []
    for q in queries[1:]:  # type: ignore[index]
        s, c = time.perf_counter(), time.process_time()
        found = store.search(q, 10)
        warm.append(time.perf_counter() - s)
        cpu.append(time.process_time() - c)
        hits.append([int(h.memory_id) for h in found])
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rows = unit_rows(1, n)
    base, recall = [], []
    for q, found in zip(queries[1:], hits, strict=True):  # type: ignore[index]
        s = time.perf_counter()
        scores = rows @ q  # type: ignore[operator]
        top = np.argpartition(-scores, 10)[:10]
        top = top[np.argsort(-scores[top])]
        base.append(time.perf_counter() - s)
        recall.append(len(set(top.tolist()) & set(found)) / 10)
    return {"vectors": n, "numpy_import_ms": round(imported * 1000, 1),
            "cold_open_first_search_ms": round(cold * 1000, 1),
            "warm_search_median_ms": round(statistics.median(warm) * 1000, 2),
            # CPU time too: on a machine shared with other work, wall time waits for a core
            "warm_search_median_cpu_ms": round(statistics.median(cpu) * 1000, 2),
            "brute_force_f32_median_ms": round(statistics.median(base) * 1000, 2),
            "ratio_to_baseline": round(statistics.median(warm) / statistics.median(base), 3),
            "recall_at_10": round(statistics.mean(recall), 3),
            "peak_rss_mb_of_search_process": round(peak_kb / 1024, 1)}


def main() -> dict[str, object]:
    rows = []
    for n in SIZES:
        with tempfile.TemporaryDirectory(prefix="mem-bench-vectors-") as tmp:
            directory = Path(tmp) / "vectors"
            # Built and measured each in a process of its own: ru_maxrss survives exec, so
            # the measuring process must not be forked from one that held the vectors.
            env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
            built = subprocess.run([sys.executable, __file__, "--build", str(directory),
                                    str(n)], check=True, capture_output=True, text=True, env=env)
            seconds = float(built.stdout)
            size = sum(p.stat().st_size for p in directory.iterdir())
            out = subprocess.run(
                [sys.executable, __file__, "--measure", str(directory), str(n)],
                check=True, capture_output=True, text=True, env=env)
            row = json.loads(out.stdout)
            row.update({"bytes_per_vector_at_rest": round(size / n, 1),
                        "build_seconds": round(seconds, 1)})
            rows.append(row)
            print(json.dumps(row))
    doc = {"dims": DIMS, "queries": QUERIES, "data": "random unit vectors (worst case)",
           "baseline": "numpy brute force over the unsealed float32 matrix",
           "targets": {"bytes_per_vector": 1024, "warm_ms_100k": 10, "warm_ms_1m": 100},
           "results": rows}
    report("vectors", doc)
    return doc


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        print(json.dumps(measure(sys.argv[2], int(sys.argv[3]))))
    elif sys.argv[1:2] == ["--build"]:
        print(build(Path(sys.argv[2]), int(sys.argv[3])))
    else:
        main()
