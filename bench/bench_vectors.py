"""The sealed vector store: bytes per vector at rest (sealing included), warm search
median at 10k / 100k (and 1M with MEM_BENCH_VECTORS_1M=1: building it takes minutes),
cold open + first search, peak RSS of a process that searches, recall@10 against exact
brute force, and what a write that touches one embedded record costs in a fresh process
(apply(): an archive move, then a delete).

Data: real embeddings, the built-in model over every distinct message of the bench
data (LoCoMo, LongMemEval, the transcripts) and every distinct sentence or line of them
of 20+ characters: 317k texts (embedded once, about a minute, cached in the temp dir).
100k is a fixed random sample of them; 1M is all of them plus pairs combined as
normalise(a + b), which is what the model (a mean of token rows) gives for the two texts
joined. Queries: the data sets' own questions (never stored). A last row at 100k uses
random unit vectors, the worst case for sign codes. Baseline, same run: plain numpy brute
force (matrix product + argpartition) over the same vectors unsealed in float32.

Targets: <= 1 KB per vector; warm search < 10 ms at 100k, < 100 ms at 1M; recall@10
>= 0.95 at 100k, >= 0.9 at 1M. Each size is measured in fresh processes, so that peak
RSS is the search's own. The machine's cores and load average are in the report."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import BENCH_DATA, ROOT, report

DIMS = 256
QUERIES = 40
SIZES = [10_000, 100_000] + ([1_000_000] if os.environ.get("MEM_BENCH_VECTORS_1M") else [])
BATCH = 65_536
TEXT_KEYS = ("text", "content", "answer", "message", "output")


def unit_rows(seed: int, n: int, dims: int = DIMS) -> object:
    import numpy as np

    rng = np.random.default_rng(seed)
    out = np.empty((n, dims), np.float32)
    for lo in range(0, n, BATCH):
        m = rng.standard_normal((min(BATCH, n - lo), dims)).astype(np.float32)
        out[lo:lo + len(m)] = m / np.linalg.norm(m, axis=1, keepdims=True)
    return out


def _strings(o: object, out: list[str], questions: list[str]) -> None:
    """Every message text in a JSON document (questions apart: they are the queries)."""
    if isinstance(o, str):
        if len(o.strip()) >= 8:
            out.append(o.strip())
    elif isinstance(o, dict):
        for k, v in o.items():
            if k == "question" and isinstance(v, str):
                questions.append(v)
            elif k in TEXT_KEYS or isinstance(v, (dict, list)):
                _strings(v, out, questions)
    elif isinstance(o, list):
        for v in o:
            _strings(v, out, questions)


def real_texts() -> tuple[list[str], list[str]]:
    """(stored texts, queries) from the bench data: every distinct message of LoCoMo,
    LongMemEval and the transcripts, then every distinct sentence or line of them of
    20+ characters (a memory is often one fact); the datasets' questions as queries."""
    texts: list[str] = []
    questions: list[str] = []
    for name in ("locomo_dev.json", "longmemeval_dev.json"):
        _strings(json.loads((BENCH_DATA / name).read_text()), texts, questions)
    for path in sorted((BENCH_DATA / "transcripts").rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                _strings(json.loads(line), texts, questions)
    messages = list(dict.fromkeys(texts))
    pieces = [s.strip() for t in messages for s in re.split(r"(?<=[.!?])\s+|\n+", t)
              if len(s.strip()) >= 20]
    return list(dict.fromkeys(messages + pieces)), list(dict.fromkeys(questions))


def real_embeddings() -> tuple[object, object]:
    """(stored, queries) float32 unit rows of the built-in model over real_texts(),
    cached in the temp dir by the texts' hash (embedding them takes a minute)."""
    import numpy as np

    from memvault.embed.builtin import load

    texts, questions = real_texts()
    tag = hashlib.sha256("\0".join(texts + ["--"] + questions).encode()).hexdigest()[:16]
    cache = Path(tempfile.gettempdir()) / f"mem-bench-vectors-{tag}.npz"
    if cache.exists():
        with np.load(cache) as f:
            return f["stored"], f["queries"]
    model = load()
    stored = np.concatenate([model.embed(texts[lo:lo + 4096])
                             for lo in range(0, len(texts), 4096)]).astype(np.float32)
    queries = model.embed(questions).astype(np.float32)
    keep = np.linalg.norm(stored, axis=1) > 0  # a text with no known token has no vector
    np.savez(cache, stored=stored[keep], queries=queries[np.linalg.norm(queries, axis=1) > 0])
    return stored[keep], queries[np.linalg.norm(queries, axis=1) > 0]


def real_rows(n: int) -> object:
    """n real unit rows: a fixed random sample of the real embeddings when there are
    enough, else all of them and, for the rest, pairs of them combined: the built-in
    model averages its tokens' rows, so normalise(a + b) stands for the embedding of two
    texts joined (a memory that holds two messages)."""
    import numpy as np

    stored, _ = real_embeddings()
    base = stored  # type: ignore[assignment]
    rng = np.random.default_rng(3)
    if n <= len(base):
        return base[np.sort(rng.choice(len(base), n, replace=False))]
    extra = n - len(base)
    out = np.empty((n, base.shape[1]), np.float32)
    out[:len(base)] = base
    for lo in range(0, extra, BATCH):
        m = min(BATCH, extra - lo)
        a, b = rng.integers(0, len(base), m), rng.integers(0, len(base), m)
        v = base[a] + base[b]
        out[len(base) + lo:len(base) + lo + m] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def rows_of(kind: str, n: int) -> object:
    return real_rows(n) if kind == "real" else unit_rows(1, n)


def queries_of(kind: str) -> object:
    """The first is the cold search's, the rest are timed: real questions (a fixed
    sample) or random unit vectors."""
    import numpy as np

    if kind == "random":
        return unit_rows(7, QUERIES + 1)
    _, questions = real_embeddings()
    pick = np.random.default_rng(5).choice(len(questions), QUERIES + 1, replace=False)  # type: ignore[arg-type]
    return questions[pick]  # type: ignore[index]


def build(directory: Path, n: int, kind: str) -> float:
    """A store of n vectors added in batches (segments), and the queries beside it (so
    that the measuring process never holds the data set); seconds the adds took."""
    import numpy as np

    from memvault.embed.base import ModelId
    from memvault.index.vectors import VectorItem, VectorStore, text_digest

    rows = rows_of(kind, n)
    np.save(directory.parent / "queries.npy", queries_of(kind))
    store = VectorStore(directory, b"k" * 32, 1, owner="bench/user")
    model = ModelId("builtin", "l2_supercat", DIMS)
    start = time.perf_counter()
    for lo in range(0, n, BATCH):
        store.add(model, [VectorItem(f"{i:036d}", text_digest(f"text {i}"), False, rows[i],  # type: ignore[index]
                                     "sessions/s.jsonl") for i in range(lo, min(n, lo + BATCH))])
    return time.perf_counter() - start


def measure(directory: str, n: int, kind: str) -> dict[str, object]:
    """In a fresh process: cold open + first search, warm searches, recall, peak RSS;
    then the brute-force baseline (after the RSS reading, which it would swamp)."""
    import resource
    import statistics

    t0 = time.perf_counter()
    import numpy as np

    from memvault.index.vectors import VectorStore

    imported = time.perf_counter() - t0
    queries = np.load(Path(directory).parent / "queries.npy")
    start, cpu0 = time.perf_counter(), time.process_time()
    store = VectorStore(Path(directory), b"k" * 32, 1, owner="bench/user")
    store.search(queries[0], 10)
    cold, cold_cpu = time.perf_counter() - start, time.process_time() - cpu0
    warm, cpu, hits = [], [], []
    for q in queries[1:]:
        s, c = time.perf_counter(), time.process_time()
        found = store.search(q, 10)
        warm.append(time.perf_counter() - s)
        cpu.append(time.process_time() - c)
        hits.append([int(h.memory_id) for h in found])
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rows = rows_of(kind, n)
    base, recall = [], []
    for q, found in zip(queries[1:], hits, strict=True):
        s = time.perf_counter()
        scores = rows @ q  # type: ignore[operator]
        top = np.argpartition(-scores, 10)[:10]
        top = top[np.argsort(-scores[top])]
        base.append(time.perf_counter() - s)
        recall.append(len(set(top.tolist()) & set(found)) / 10)
    return {"vectors": n, "data": kind, "numpy_import_ms": round(imported * 1000, 1),
            "cold_open_first_search_ms": round(cold * 1000, 1),
            "cold_open_first_search_cpu_ms": round(cold_cpu * 1000, 1),
            "warm_search_median_ms": round(statistics.median(warm) * 1000, 2),
            # CPU time too: on a machine shared with other work, wall time waits for a core
            "warm_search_median_cpu_ms": round(statistics.median(cpu) * 1000, 2),
            "brute_force_f32_median_ms": round(statistics.median(base) * 1000, 2),
            "ratio_to_baseline": round(statistics.median(warm) / statistics.median(base), 3),
            "recall_at_10": round(statistics.mean(recall), 3),
            "peak_rss_mb_of_search_process": round(peak_kb / 1024, 1)}


def measure_apply(directory: str) -> dict[str, object]:
    """In a fresh process (as `mem add --supersedes` or a forget is): the store told
    that one embedded record moved to the archive (its segment rewritten), then that
    one record was deleted. Wall and CPU ms of each (numpy and the store's modules
    imported first: those are in the measure's numpy_import_ms)."""
    import numpy  # noqa: F401

    from memvault.index.base import Entry
    from memvault.index.vectors import VectorStore
    from memvault.model.location import Location
    from memvault.model.records import Record

    store = VectorStore(Path(directory), b"k" * 32, 1, owner="bench/user")
    memory_id = f"{7:036d}"
    record = Record(memory_id, "bench", "user", "message", "text 7", "", archived=True)
    out: dict[str, object] = {}
    for label, call in (
            ("apply_archive_one_ms", lambda: store.apply(
                [Entry(record, Location("archive/s.jsonl"))], [], ())),
            ("apply_delete_one_ms", lambda: store.apply([], [memory_id], ()))):
        s, c = time.perf_counter(), time.process_time()
        call()
        out[label] = round((time.perf_counter() - s) * 1000, 1)
        out[label.replace("_ms", "_cpu_ms")] = round((time.process_time() - c) * 1000, 1)
    return out


def run_size(n: int, kind: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="mem-bench-vectors-") as tmp:
        directory = Path(tmp) / "vectors"
        # Built and measured each in a process of its own: ru_maxrss survives exec, so
        # the measuring process must not be forked from one that held the vectors.
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

        def child(*args: str) -> str:
            return subprocess.run([sys.executable, __file__, *args, str(directory), str(n),
                                   kind], check=True, capture_output=True, text=True,
                                  env=env).stdout

        seconds = float(child("--build"))
        size = sum(p.stat().st_size for p in directory.iterdir())
        row = json.loads(child("--measure"))
        row.update(json.loads(child("--apply")))
        row.update({"bytes_per_vector_at_rest": round(size / n, 1),
                    "build_seconds": round(seconds, 1)})
        return row


def main() -> dict[str, object]:
    rows = []
    cases = [(n, "real") for n in SIZES] + [(100_000, "random")]
    for n, kind in cases:
        row = run_size(n, kind)
        rows.append(row)
        print(json.dumps(row), flush=True)
    doc = {"dims": DIMS, "queries": QUERIES,
           "cores": len(os.sched_getaffinity(0)), "load_average": os.getloadavg(),
           "data": "real: the built-in model over the bench data's distinct messages and "
                   "their sentences (317k texts), pairs of them combined past that; queries "
                   "the data sets' questions. random: unit vectors (the worst case)",
           "baseline": "numpy brute force over the unsealed float32 matrix",
           "targets": {"bytes_per_vector": 1024, "warm_ms_100k": 10, "warm_ms_1m": 100},
           "results": rows}
    report("vectors", doc)
    return doc


if __name__ == "__main__":
    mode, args = sys.argv[1:2], sys.argv[2:]
    if mode == ["--measure"]:
        print(json.dumps(measure(args[0], int(args[1]), args[2])))
    elif mode == ["--apply"]:
        print(json.dumps(measure_apply(args[0])))
    elif mode == ["--build"]:
        print(build(Path(args[0]), int(args[1]), args[2]))
    else:
        main()
