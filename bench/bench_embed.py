"""Embedding cost: how fast `mem embed` turns stored messages into vectors (one core), what
embedding in the background costs the command that starts it (`mem ingest` with
`embeddings.background` on against off, in the same run), and the SessionStart hook with
a vault that holds vectors against one that does not (it must be no slower: it never
embeds). Medians, and ratios against a baseline measured in the same run."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from common import BIN, report, run_timed, throwaway_env

MESSAGES = int(os.environ.get("MEM_BENCH_EMBED_MESSAGES", "5000"))
INGEST_MESSAGES = 1000
ROUNDS = 5
MEM = str(BIN / "mem")
WORDS = ("invoice billing service flaky test deploy terraform friday review postgres "
         "ledger schema migration pytest fixture cache latency retry budget").split()


def transcript(path: Path, n: int, seed: int = 0) -> Path:
    with path.open("w") as fh:
        for i in range(n):
            words = " ".join(WORDS[(i * 7 + j + seed) % len(WORDS)] for j in range(24))
            fh.write(json.dumps({"id": f"m{seed}-{i}", "role": "user" if i % 2 else
                                 "assistant", "content": f"{i}: {words}"}) + "\n")
    return path


def fresh(env_extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**throwaway_env(), "MEM_EMBEDDINGS_BACKGROUND": "false", **(env_extra or {})}
    subprocess.run([MEM, "init"], env=env, capture_output=True, check=True)
    return env


def pending(env: dict[str, str]) -> int:
    done = subprocess.run([MEM, "stats", "--json"], env=env, capture_output=True, check=True)
    return int(json.loads(done.stdout)["vectors_pending"])


def wait_embedded(env: dict[str, str], timeout: float = 300) -> float:
    started = time.perf_counter()
    while pending(env) and time.perf_counter() - started < timeout:
        time.sleep(0.2)
    return time.perf_counter() - started


def one_core(argv: list[str]) -> list[str]:
    return ["taskset", "-c", "0", *argv] if shutil.which("taskset") else argv


def main() -> None:
    base = Path(throwaway_env()["MEM_VAULT"]).parent
    # 1. `mem embed` throughput on one core.
    env = fresh()
    subprocess.run([MEM, "ingest", str(transcript(base / "big.jsonl", MESSAGES)),
                    "--format", "jsonl", "--session", "big"], env=env, check=True,
                   capture_output=True)
    started = time.perf_counter()
    done = subprocess.run(one_core([MEM, "embed", "--json"]), env=env, capture_output=True,
                          check=True)
    seconds = time.perf_counter() - started
    embedded = json.loads(done.stdout)["embedded"]
    rate = embedded / seconds
    # 2. `mem ingest` with background embedding on vs off (the command's own time).
    small = transcript(base / "small.jsonl", INGEST_MESSAGES, seed=1)
    off, on, lag = [], [], []
    for _ in range(ROUNDS):
        env_off = fresh()
        off.append(run_timed([MEM, "ingest", str(small), "--format", "jsonl"], env_off))
        env_on = fresh({"MEM_EMBEDDINGS_BACKGROUND": "true"})
        on.append(run_timed([MEM, "ingest", str(small), "--format", "jsonl"], env_on))
        lag.append(wait_embedded(env_on))  # the child finishes before the next round
    # 3. SessionStart with and without vectors.
    payload = json.dumps({"session_id": "s", "hook_event_name": "SessionStart",
                          "source": "startup"}).encode()
    plain = fresh()
    with_vectors = fresh()
    for env_ in (plain, with_vectors):
        for text in ("Prefers pytest with fixtures", "Works on the billing service"):
            subprocess.run([MEM, "add", text, "--type", "preference"], env=env_, check=True,
                           capture_output=True)
    subprocess.run([MEM, "embed"], env=with_vectors, check=True, capture_output=True)
    hook_plain, hook_vectors = [], []
    for _ in range(ROUNDS * 2):
        hook_plain.append(run_timed([MEM, "hook", "claude-code"], plain, payload))
        hook_vectors.append(run_timed([MEM, "hook", "claude-code"], with_vectors, payload))
    ms = lambda xs: round(statistics.median(xs) * 1000, 1)  # noqa: E731
    doc = {
        "embed_messages": embedded, "embed_seconds": round(seconds, 2),
        "embed_messages_per_s": round(rate, 1),
        "ingest_1000_background_off_ms": ms(off), "ingest_1000_background_on_ms": ms(on),
        "ingest_ratio_on_off": round(statistics.median(on) / statistics.median(off), 2),
        "background_done_after_s": round(statistics.median(lag), 2),
        "session_start_no_vectors_ms": ms(hook_plain),
        "session_start_vectors_ms": ms(hook_vectors),
        "session_start_ratio": round(statistics.median(hook_vectors)
                                     / statistics.median(hook_plain), 2),
    }
    report("embed", doc)
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
