"""A scheduled `mem embed` with one record waiting in a long session (issue 34, item 4): a
session of 10,000, 100,000 and 300,000 records, every one embedded but one (a person's
turn in its middle, beside another person's: its vector borrows from it), and `mem embed`
timed as cron runs it, start-up included. Beside it, in the same run: the same command
with nothing waiting (what every run costs: start-up, the vector store's ids, the
session's clear headers), and the code before this change (it decrypted the whole
session when one of its records waited), from a worktree of BEFORE run with the same
interpreter (MEM_BENCH_EMBED_OLD_SRC names another source tree instead). Medians of
ROUNDS, interleaved; peak memory of each child (its maximum resident set).

The first `mem embed` of each session (every record waiting, what a hook's background
child runs after a first ingest) is run on two copies of the vault: by this code and by
FIRST_BEFORE's (its tokeniser kept every short text it saw, so the run grew with the
records), in the same run; then `mem search` cold (a new process: the vector store's
meta blocks decrypted, the model loaded), with the vectors of every record.

Targets: flat in the session's size: one waiting ≤ 1.5× nothing waiting at every size;
a first embed's peak ≤ 150 MB at every size.
MEM_BENCH_EMBED_LINES_SIZES sets the sizes (default 10000,100000,300000)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from common import BIN, ROOT, environment, report, run_timed, throwaway_env

ROUNDS = 3
TARGET = 1.5
FIRST_TARGET_MB = 150
# The last commit whose first `mem embed` grew with the records embedded.
FIRST_BEFORE = "df26a39"
# The last commit whose `mem embed` decrypted every line of a session one of whose
# records had no vector.
BEFORE = "ea1c460"
WORDS = ("kiln glaze clay slip bisque firing cone temperature studio wheel trimming "
         "handle mug bowl teapot lid foot ring wax resist underglaze celadon shino").split()
# The command as its script runs it, saying its own peak (KiB) last on stderr: its
# VmHWM where /proc has it (ru_maxrss keeps the high-water mark of the process it was
# forked from, this bench's, across the exec: after the bench read a session in-process,
# every child's "peak" was the bench's size), else ru_maxrss.
MAIN = ("import resource, sys\nfrom memvault.cli import main\ntry:\n    code = main()\n"
        "finally:\n    try:\n        peak = next(int(l.split()[1]) for l in "
        "open('/proc/self/status') if l.startswith('VmHWM:'))\n"
        "    except OSError:\n        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "    print(peak, file=sys.stderr)\nsys.exit(code)")


def chat(path: Path, count: int) -> Path:
    """Two people and an agent (a person's turn beside a person's borrows from it)."""
    who = [("user", "alice"), ("user", "bob"), ("assistant", None)]
    with path.open("w") as fh:
        for n in range(count):
            role, name = who[n % 3]
            words = " ".join(WORDS[(n * 7 + j) % len(WORDS)] for j in range(30))
            fh.write(json.dumps({"role": role, **({"name": name} if name else {}),
                                 "content": f"{n}: {words}",
                                 "timestamp": f"2026-05-04T08:00:{n % 60:02d}Z"}) + "\n")
    return path


def timed(src: Path, env: dict[str, str]) -> tuple[float, float, int]:
    """`mem embed --json` from the source tree `src`: seconds, peak MB, records embedded."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", MAIN, "embed", "--json"],
                          env={**env, "PYTHONPATH": str(src)}, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"mem embed failed ({proc.returncode}): {proc.stderr[-400:]!r}")
    peak = int(proc.stderr.decode().split()[-1]) / 1024
    return elapsed, peak, int(json.loads(proc.stdout)["embedded"])


def searched(env: dict[str, str]) -> tuple[float, float]:
    """`mem search` of a question, in a new process: seconds, peak MB."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", MAIN, "search", "what temperature does the "
                           "celadon glaze fire at", "--json"],
                          env={**env, "PYTHONPATH": str(ROOT / "src")}, capture_output=True,
                          check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"mem search failed ({proc.returncode}): {proc.stderr[-400:]!r}")
    return elapsed, int(proc.stderr.decode().split()[-1]) / 1024


def first_embeds(env: dict[str, str], new: Path, old: Path | None
                 ) -> dict[str, tuple[float, float, int]]:
    """The first mem embed of the vault as ingested, by each code on a copy of its own."""
    vault = Path(env["MEM_VAULT"])
    copy = vault.with_name("vault-old")
    if old is not None:
        shutil.copytree(vault, copy, symlinks=True)
    out = {"new": timed(new, env)}
    if old is not None:
        out["old"] = timed(old, {**env, "MEM_VAULT": str(copy)})
        shutil.rmtree(copy, ignore_errors=True)
    return out


@contextlib.contextmanager
def old_tree(commit: str = BEFORE, variable: str = "MEM_BENCH_EMBED_OLD_SRC"
             ) -> Iterator[Path | None]:
    """The source tree of the code before the change (None: not to be had here)."""
    named = os.environ.get(variable)
    if named:
        yield Path(named)
        return
    work = Path(tempfile.mkdtemp(prefix="mem-bench-old-")) / "tree"
    added = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(work),
                            commit], capture_output=True, check=False)
    try:
        yield work / "src" if added.returncode == 0 else None
    finally:
        if added.returncode == 0:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(work)], capture_output=True, check=False)
        shutil.rmtree(work.parent, ignore_errors=True)


def one_waiting(env: dict[str, str]) -> str:
    """A person's turn in the session's middle whose neighbour before it is a person's
    too (its id): the one record made to wait."""
    with environment(env):
        from memvault.config import resolve
        from memvault.index.base import said_by_a_person
        from memvault.vault.vault import Vault

        vault = Vault(resolve())
        (relpath,) = [f for f in vault.layout.content_files() if f.endswith(".jsonl")]
        ids = [h.memory_id.encode() for h in vault.store.headers(relpath)]
        others = set(ids) - set(ids[len(ids) // 2:len(ids) // 2 + 6])
        turns = [r for _, line, _ in vault.store.lines_without(relpath, others)
                 if (r := vault.store.open_sealed(line)) is not None]
        for before, turn in zip(turns, turns[1:], strict=False):
            if said_by_a_person(before) and said_by_a_person(turn):
                return turn.memory_id
        raise RuntimeError("no person's turn beside another")


def drop_vector(env: dict[str, str], memory_id: str) -> None:
    with environment(env):
        from memvault.config import resolve
        from memvault.vault.vault import Vault

        vault = Vault(resolve())
        vault.vector_store(vault.state().key_version).remove([memory_id])


def main(rounds: int = ROUNDS) -> dict[str, object]:
    sizes = [int(s) for s in (os.environ.get("MEM_BENCH_EMBED_LINES_SIZES")
                              or "10000,100000,300000").split(",")]
    new = ROOT / "src"
    rows: list[dict[str, object]] = []
    with old_tree() as old, old_tree(FIRST_BEFORE, "MEM_BENCH_EMBED_FIRST_OLD_SRC") as first:
        for size in sizes:
            env = {**throwaway_env(), "MEM_EMBEDDINGS_BACKGROUND": "false"}
            run_timed([str(BIN / "mem"), "init"], env)
            work = Path(tempfile.mkdtemp(prefix="mem-bench-embed-lines-"))
            path = chat(work / "chat.jsonl", size)
            ingest_s = run_timed([str(BIN / "mem"), "ingest", str(path), "--quiet"], env)
            firsts = first_embeds(env, new, first)  # every record waits, the first time
            all_s, all_mb, embedded = firsts["new"]
            assert embedded == size, (embedded, size)
            searches = [searched(env) for _ in range(rounds)]
            waiting = one_waiting(env)
            session_mb = _session_mb(env)
            samples: dict[str, list[tuple[float, float]]] = {"new": [], "none": [], "old": []}
            for _ in range(rounds):
                cases = [("new", new, True), ("none", new, False)]
                if old is not None:
                    cases.append(("old", old, True))
                for name, src, wait in cases:
                    if wait:
                        drop_vector(env, waiting)
                    seconds, peak, done = timed(src, env)
                    assert done == (1 if wait else 0), (name, done)
                    samples[name].append((seconds, peak))
            row: dict[str, object] = {"records": size, "session_mb": round(session_mb, 1),
                                      "ingest_s": round(ingest_s, 2),
                                      "embed_all_s": round(all_s, 2),
                                      "embed_all_peak_mb": round(all_mb, 1)}
            if "old" in firsts:
                row["embed_all_old_s"] = round(firsts["old"][0], 2)
                row["embed_all_old_peak_mb"] = round(firsts["old"][1], 1)
            row["search_cold_s"] = round(statistics.median(s for s, _ in searches), 3)
            row["search_cold_peak_mb"] = round(statistics.median(p for _, p in searches), 1)
            for name, got in samples.items():
                if got:
                    row[f"{name}_s"] = round(statistics.median(s for s, _ in got), 3)
                    row[f"{name}_peak_mb"] = round(statistics.median(p for _, p in got), 1)
            row["new_over_none"] = round(float(row["new_s"]) / float(row["none_s"]), 2)  # type: ignore[arg-type]
            if "old_s" in row:
                row["old_over_new"] = round(float(row["old_s"]) / float(row["new_s"]), 1)  # type: ignore[arg-type]
            rows.append(row)
            print(json.dumps(row))
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(Path(env["MEM_VAULT"]).parent, ignore_errors=True)
    worst = max(float(r["new_over_none"]) for r in rows)  # type: ignore[arg-type]
    first_peak = max(float(r["embed_all_peak_mb"]) for r in rows)  # type: ignore[arg-type]
    doc: dict[str, object] = {
        "what": "mem embed with one record waiting in a session of N records, start-up "
                "included (seconds, medians); none: nothing waiting; old: before the change; "
                "embed_all: the first mem embed, every record waiting (one run each, this "
                "code and FIRST_BEFORE's on copies of one vault); search_cold: mem search in "
                "a new process, every record with a vector",
        "rounds": rounds, "target_new_over_none": TARGET,
        "target_embed_all_peak_mb": FIRST_TARGET_MB, "first_before": FIRST_BEFORE,
        "rows": rows, "pass": worst <= TARGET and first_peak <= FIRST_TARGET_MB}
    report("embed_lines", doc)
    return doc


def _session_mb(env: dict[str, str]) -> float:
    with environment(env):
        from memvault.config import resolve
        from memvault.vault.vault import Vault

        vault = Vault(resolve())
        return sum(vault.layout.path(f).stat().st_size for f in vault.layout.content_files()
                   if f.endswith(".jsonl")) / 2**20


if __name__ == "__main__":
    main()
