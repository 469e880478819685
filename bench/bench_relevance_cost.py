"""What the relevance floor, the role words and the stored memories' own candidates cost a
cold `mem search`: a user of 100,000 LoCoMo messages (bench_search.py's fill) plus 200
stored memories, embedded; cold `mem search QUERY --json` processes of this tree and of a
baseline tree (`--baseline DIR`: another checkout's `src`, e.g. `git archive HEAD`),
lexical and hybrid, interleaved, median of `--rounds`; and a cold `mem brief` of each.

    python bench/bench_relevance_cost.py --baseline /tmp/base/src [--tree /tmp/new/src]
        [--size N] [--rounds N] [--reuse DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import BIN, interleaved, median_ms, report, run_timed

QUERIES = ["what did she paint last year", "what does the user prefer for indentation",
           "favourite hiking trail with the kids", "camping by the lake in summer",
           "which football team does the user support"]


def fill(base: Path, size: int) -> None:
    import bench_search

    from memvault.config import resolve
    from memvault.ops import remember
    from memvault.ops.admin import init

    init(resolve(user="bench"))
    vault, seconds = bench_search.fill("bench", size, bench_search.texts())
    for i in range(200):
        remember.add(vault, f"Prefers option {i} for project setting {i % 17}", "preference")
    vault.ready_index()
    started = time.perf_counter()
    subprocess.run([str(BIN / "mem"), "embed", "--user", "bench"], check=True,
                   stdout=subprocess.DEVNULL, env=os.environ.copy())
    print(f"{size} messages in {base}: filled in {seconds:.0f} s, embedded in "
          f"{time.perf_counter() - started:.0f} s")


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--tree", type=Path, help="the `src` measured against it (default: "
                        "the installed one; a copy outside the checkout imports alike)")
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--reuse", type=Path)
    args = parser.parse_args(argv or [])
    base = args.reuse or Path(tempfile.mkdtemp(prefix="mem-relevance-cost-"))
    os.environ.update(MEM_VAULT=str(base / "vault"), MEM_CONFIG_DIR=str(base / "config"),
                      MEM_EMBEDDINGS_BACKGROUND="false")
    for var in ("MEM_KEY_FILE", "MEM_KEY_COMMAND", "MEM_MASTER_KEY", "MEM_ORG", "MEM_USER"):
        os.environ.pop(var, None)
    if args.reuse is None:
        fill(base, args.size)
    env = {**os.environ, "MEM_USER": "bench", "NO_COLOR": "1"}
    old = {**env, "PYTHONPATH": str(args.baseline.resolve())}
    if args.tree is not None:
        env["PYTHONPATH"] = str(args.tree.resolve())
    mem = str(BIN / "mem")

    def case(environ: dict[str, str], *extra: str) -> object:
        return lambda i: run_timed([mem, "search", QUERIES[i % len(QUERIES)], "--json",
                                    *extra], environ)

    samples = interleaved({
        "lexical, before": case(old, "--mode", "lexical"),
        "lexical, after": case(env, "--mode", "lexical"),
        "hybrid, before": case(old),
        "hybrid, after": case(env),
        "brief, before": lambda i: run_timed([mem, "brief"], old),
        "brief, after": lambda i: run_timed([mem, "brief"], env),
    }, args.rounds)
    medians = {k: median_ms(v) for k, v in samples.items()}
    for what in ("lexical", "hybrid", "brief"):
        before, after = medians[f"{what}, before"], medians[f"{what}, after"]
        print(f"cold {what:<8} before {before:7.0f} ms  after {after:7.0f} ms  "
              f"ratio {after / before:.2f}")
    doc = {"size": args.size, "rounds": args.rounds, "median_ms": medians, "vault": str(base)}
    report("relevance_cost", doc)
    return doc


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main(sys.argv[1:])
