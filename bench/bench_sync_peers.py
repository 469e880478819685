"""`mem sync` beside what a user would pick instead to carry a store between machines:
restic (an encrypted, deduplicated backup of the vault folder) and rclone (a plain copy of
the vault's files, which are ciphertext already), to a folder, in one run, on the same
vault: the first sync, an incremental one after one 200-message session, and a second
machine (the transfer, then the first answered `mem search`). Wall time, CPU (user +
system of the command and what it waited for) and peak RSS, medians of interleaved runs
on this machine; the bytes each leaves at the remote.

    SYNC_PEERS_RECORDS=20000,100000 SYNC_PEERS_RUNS=3 python bench/bench_sync_peers.py

restic and rclone are Debian's packages: installed by the bench (apt-get) when missing,
as CI installs strace. Embeddings are off for every tool (MEM_EMBEDDINGS_PROVIDER=none):
vectors are derived, rebuilt on each machine, and would run in the background beside the
next measurement.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_search import fill, texts
from common import report

SIZES = [int(n) for n in os.environ.get("SYNC_PEERS_RECORDS", "20000,100000").split(",")]
RUNS = int(os.environ.get("SYNC_PEERS_RUNS", "3"))
USER = "big"
QUERY = "dinner with the family"
MEM = str(Path(sys.executable).parent / "mem")


def _install(*programs: str) -> None:
    missing = [p for p in programs if shutil.which(p) is None and
               not (p == "time" and Path("/usr/bin/time").exists())]
    if not missing:
        return
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", *missing],
                   env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
                   stdout=subprocess.DEVNULL, check=False)
    still = [p for p in programs if shutil.which(p) is None and
             not (p == "time" and Path("/usr/bin/time").exists())]
    if still:
        raise SystemExit(f"bench_sync_peers needs {', '.join(still)} (apt-get install)")


def measured(argv: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MB) of one command run to its end, read by
    GNU time: a child forked from this (large) process would count its pages as its own."""
    with tempfile.NamedTemporaryFile("r") as out:
        proc = subprocess.run(["/usr/bin/time", "-f", "%e %U %S %M", "-o", out.name, *argv],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): "
                             f"{proc.stderr.decode(errors='replace').strip()[-400:]}")
        wall, user, system, rss = out.read().split()[-4:]
    return float(wall), float(user) + float(system), int(rss) / 1024


def both(*steps: tuple[list[str], dict[str, str]]) -> tuple[float, float, float]:
    """Steps run one after another, measured as one: times summed, the larger peak."""
    out = [measured(argv, env) for argv, env in steps]
    return sum(o[0] for o in out), sum(o[1] for o in out), max(o[2] for o in out)


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def session_file(path: Path, run: int) -> Path:
    corpus = texts()
    path.write_text("\n".join(json.dumps({
        "id": f"r{run}-{i}", "role": "user" if i % 2 else "assistant",
        "content": corpus[(run * 200 + i) % len(corpus)],
        "timestamp": f"2026-11-{run + 1:02d}T10:{i // 60:02d}:{i % 60:02d}Z"})
        for i in range(200)) + "\n")
    return path


def one_size(base: Path, records: int) -> dict[str, object]:
    env = {**os.environ, "MEM_CONFIG_DIR": str(base / "config"), "MEM_USER": USER,
           "MEM_EMBEDDINGS_PROVIDER": "none", "RESTIC_PASSWORD": "bench",
           "RCLONE_CONFIG": str(base / "rclone.conf")}
    for var in ("MEM_KEY_FILE", "MEM_KEY_COMMAND", "MEM_ORG", "MEM_SYNC_REMOTE"):
        env.pop(var, None)
    vault = base / "a"
    os.environ.update({k: env[k] for k in ("MEM_CONFIG_DIR", "MEM_EMBEDDINGS_PROVIDER")})
    os.environ["MEM_VAULT"] = str(vault)
    from memvault.config import resolve
    from memvault.ops.admin import init

    init(resolve(user=USER))
    _, fill_s = fill(USER, records, texts())
    at_a = {**env, "MEM_VAULT": str(vault)}

    def second(where: Path) -> dict[str, str]:
        return {**env, "MEM_VAULT": str(where)}

    tools = ["mem", "restic", "rclone"]
    figures: dict[str, dict[str, list[float]]] = {
        t: {k: [] for k in ("first s", "first cpu", "first MB", "inc s", "inc cpu",
                            "second s", "second cpu", "second MB", "bytes")}
        for t in tools}
    for run in range(RUNS):
        order = tools[run % 3:] + tools[:run % 3]  # interleaved: no tool always first
        remotes = {t: base / f"run{run}" / f"{t}-remote" for t in tools}
        for t in order:
            remotes[t].parent.mkdir(parents=True, exist_ok=True)
            if t == "mem":
                remotes[t].mkdir()
                got = measured([MEM, "sync", "--remote", str(remotes[t])], at_a)
            elif t == "restic":
                subprocess.run(["restic", "init", "-q", "-r", str(remotes[t])], env=env,
                               check=True, stdout=subprocess.DEVNULL)
                got = measured(["restic", "-q", "-r", str(remotes[t]), "backup",
                                str(vault)], env)
            else:
                got = measured(["rclone", "copy", str(vault), str(remotes[t])], env)
            figures[t]["first s"].append(got[0])
            figures[t]["first cpu"].append(got[1])
            figures[t]["first MB"].append(got[2])
        measured([MEM, "ingest", str(session_file(base / f"run{run}.jsonl", run)),
                  "--format", "jsonl", "--session", f"run{run}"], at_a)
        for t in order:
            if t == "mem":
                got = measured([MEM, "sync", "--remote", str(remotes[t])], at_a)
            elif t == "restic":
                got = measured(["restic", "-q", "-r", str(remotes[t]), "backup",
                                str(vault)], env)
            else:
                got = measured(["rclone", "copy", str(vault), str(remotes[t])], env)
            figures[t]["inc s"].append(got[0])
            figures[t]["inc cpu"].append(got[1])
            figures[t]["bytes"].append(size_of(remotes[t]))
        for t in order:
            where = base / f"run{run}" / f"{t}-second"
            search = ([MEM, "search", QUERY, "-n", "3"], second(
                where / vault.relative_to("/") if t == "restic" else where))
            if t == "mem":
                # `mem init` under the same master key stands in for `mem key restore`,
                # which the comparison leaves out (restic and rclone have their keys).
                measured([MEM, "init"], second(where))
                got = both(([MEM, "sync", "--remote", str(remotes[t])], second(where)),
                           search)
            elif t == "restic":
                got = both((["restic", "-q", "-r", str(remotes[t]), "restore", "latest",
                             "--target", str(where)], env), search)
            else:
                got = both((["rclone", "copy", str(remotes[t]), str(where)], env), search)
            figures[t]["second s"].append(got[0])
            figures[t]["second cpu"].append(got[1])
            figures[t]["second MB"].append(got[2])
        shutil.rmtree(base / f"run{run}")
    doc: dict[str, object] = {"records": records, "runs": RUNS, "fill seconds": round(fill_s)}
    for t in tools:
        doc[t] = {k: round(statistics.median(v), 2) if "bytes" not in k
                  else int(statistics.median(v)) for k, v in figures[t].items()}
    mem_, restic = figures["mem"], figures["restic"]
    doc["mem / restic"] = {
        k: round(statistics.median(mem_[k]) / statistics.median(restic[k]), 2)
        for k in ("first s", "inc s", "second s", "second cpu")}
    return doc


def main() -> dict[str, object]:
    _install("restic", "rclone", "time")
    out: dict[str, object] = {}
    for records in SIZES:
        base = Path(tempfile.mkdtemp(prefix="mem-bench-peers-"))
        try:
            doc = one_size(base, records)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        out[str(records)] = doc
        print(f"{records} records:")
        for key, value in doc.items():
            print(f"  {key}: {value}")
    report("sync_peers", out)
    return out


if __name__ == "__main__":
    main()
