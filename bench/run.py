"""Run the benchmarks: `python bench/run.py [name ...]` (default: all). Results land in
bench/results/*.json; every figure is a median with its ratio to a same-run baseline."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

BENCHES = ["startup", "retrieval", "longmemeval", "search", "redact", "sanitize", "lifecycle",
           "ingest", "live", "live_lines", "scan", "scale", "compact", "agents", "brief",
           "vectors", "embed", "embed_lines", "hybrid", "sync", "sync_peers", "browse"]


def main(argv: list[str]) -> None:
    for name in argv or BENCHES:
        print(f"\n== {name} ==")
        importlib.import_module(f"bench_{name}").main()


if __name__ == "__main__":
    main(sys.argv[1:])
