"""Shared helpers for the benchmarks: timing child processes, medians, a throwaway vault."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
RESULTS = ROOT / "bench" / "results"
BENCH_DATA = ROOT.parent / "shared" / "bench-data"

# The start of an ingest floor process (argv: source, out_dir): an AES-GCM key, an HMAC
# over stemmed tokens (h), and one Tantivy writer on out_dir/index. Each bench adds the
# loop over its own input.
INDEXING_FLOOR = r"""
import base64, hashlib, hmac, json, os, sys, tantivy
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
src, out_dir = sys.argv[1], sys.argv[2]
key = os.urandom(32); aead = AESGCM(key); mac = hmac.new(os.urandom(32), digestmod=hashlib.sha256)
analyzer = (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.lowercase()).filter(tantivy.Filter.stemmer("english")).build())
sb = tantivy.SchemaBuilder()
sb.add_text_field("id", stored=True, tokenizer_name="raw")
sb.add_text_field("body", tokenizer_name="whitespace")
os.makedirs(os.path.join(out_dir, "index"))
index = tantivy.Index(sb.build(), path=os.path.join(out_dir, "index"))
writer = index.writer(heap_size=32_000_000, num_threads=1)
cache = {}
def h(t):
    v = cache.get(t)
    if v is None:
        m = mac.copy(); m.update(t.encode()); v = cache[t] = m.digest()[:16].hex()
    return v
"""


def throwaway_env() -> dict[str, str]:
    """An environment whose vault and config live in a fresh temp dir.

    Bytecode is written and read as on a user's machine (pip compiles what it installs, and
    the floors' libraries are compiled): with PYTHONDONTWRITEBYTECODE set, every run would
    compile mem's own modules from source and time the compiler, not mem."""
    base = Path(tempfile.mkdtemp(prefix="mem-bench-"))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MEM_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(MEM_VAULT=str(base / "vault"), MEM_CONFIG_DIR=str(base / "config"),
               MEM_USER="bench", NO_COLOR="1", PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")
    return env


@contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """`env` set in this process for the block (for mem's operations called in-process),
    and what was there before put back."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_timed(argv: list[str], env: dict[str, str], stdin: bytes | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, input=stdin, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} failed ({proc.returncode}): {proc.stderr.decode()[-400:]}")
    return elapsed


def interleaved(cases: dict[str, Callable[[int], float]], rounds: int) -> dict[str, list[float]]:
    """Run every case once per round, in turn, so machine noise hits them alike."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for i in range(rounds):
        for name, case in cases.items():
            samples[name].append(case(i))
    return samples


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def report(name: str, doc: dict[str, object]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(doc, indent=2) + "\n")
