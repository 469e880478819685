"""`mem sync` beside what a user would pick instead to carry a store between machines:
restic (an encrypted, deduplicated backup of the vault folder) and rclone (a plain copy of
the vault's files, which are ciphertext already), to a folder and to S3 (moto's server on
127.0.0.1), in one run, on the same vault: the first sync, an incremental one after one
200-message session, and a second machine (the transfer, then the first answered `mem
search`). Wall time, CPU (user + system of the command and what it waited for) and peak
RSS, medians of interleaved runs on this machine; the bytes each leaves at the remote.

    SYNC_PEERS_RECORDS=20000,100000 SYNC_PEERS_RUNS=3 python bench/bench_sync_peers.py

SYNC_PEERS_BASELINE=DIR (a checkout's src folder, e.g. a git worktree of an earlier commit)
runs that code too, as one more tool ("baseline", its own copy of the vault and its own
remote), interleaved with the others: a change measured beside the code before it.

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
KINDS = os.environ.get("SYNC_PEERS_REMOTES", "folder,s3").split(",")
BASELINE = os.environ.get("SYNC_PEERS_BASELINE")  # memvault's src folder of another commit
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


class Remotes:
    """Where each tool's copy goes in one run: a folder, or a prefix of moto's bucket."""

    def __init__(self, base: Path, endpoint: str | None) -> None:
        self.base, self.endpoint = base, endpoint

    def mem(self, kind: str, run: int, tool: str = "mem") -> list[str]:
        if kind == "folder":
            return ["--remote", str(self.base / f"run{run}" / f"{tool}-remote")]
        return ["--remote", f"s3://bench/run{run}/{tool}", "--endpoint-url", str(self.endpoint)]

    def restic(self, kind: str, run: int) -> str:
        if kind == "folder":
            return str(self.base / f"run{run}" / "restic-remote")
        return f"s3:{self.endpoint}/bench/run{run}/restic"

    def rclone(self, kind: str, run: int) -> str:
        if kind == "folder":
            return str(self.base / f"run{run}" / "rclone-remote")
        return f"moto:bench/run{run}/rclone"

    def size(self, kind: str, tool: str, run: int) -> int:
        if kind == "folder":
            return size_of(self.base / f"run{run}" / f"{tool}-remote")
        import boto3

        client = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="bench",
                              aws_secret_access_key="bench", region_name="us-east-1")
        total = 0
        for page in client.get_paginator("list_objects_v2").paginate(
                Bucket="bench", Prefix=f"run{run}/{tool}"):
            total += sum(int(item["Size"]) for item in page.get("Contents", []))
        return total


def one_size(base: Path, records: int, endpoint: str | None) -> dict[str, object]:
    env = {**os.environ, "MEM_CONFIG_DIR": str(base / "config"), "MEM_USER": USER,
           "MEM_EMBEDDINGS_PROVIDER": "none", "RESTIC_PASSWORD": "bench",
           "RCLONE_CONFIG": str(base / "rclone.conf"),
           # moto's server as rclone and restic reach it (mem and boto3 read the same keys)
           "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_DEFAULT_REGION": "us-east-1", "RCLONE_CONFIG_MOTO_TYPE": "s3",
           "RCLONE_CONFIG_MOTO_PROVIDER": "Other", "RCLONE_CONFIG_MOTO_ACCESS_KEY_ID": "bench",
           "RCLONE_CONFIG_MOTO_SECRET_ACCESS_KEY": "bench",
           "RCLONE_CONFIG_MOTO_ENDPOINT": str(endpoint)}
    # A CA bundle set for the real AWS would be read for moto's plain HTTP too.
    for var in ("MEM_KEY_FILE", "MEM_KEY_COMMAND", "MEM_ORG", "MEM_SYNC_REMOTE",
                "AWS_CA_BUNDLE", "AWS_PROFILE"):
        env.pop(var, None)
    vault = base / "a"
    os.environ.update({k: env[k] for k in ("MEM_CONFIG_DIR", "MEM_EMBEDDINGS_PROVIDER")})
    os.environ["MEM_VAULT"] = str(vault)
    from memvault.config import resolve
    from memvault.ops.admin import init

    init(resolve(user=USER))
    _, fill_s = fill(USER, records, texts())
    at_a = {**env, "MEM_VAULT": str(vault)}
    mems = ["mem"]
    at: dict[str, dict[str, str]] = {"mem": at_a}
    if BASELINE:
        # Its own copy of the vault: mem keeps one sync cache a user, for one remote.
        shutil.copytree(vault, base / "a-baseline", symlinks=True)
        at["baseline"] = {**env, "MEM_VAULT": str(base / "a-baseline"), "PYTHONPATH": BASELINE}
        mems.append("baseline")

    def second(where: Path, t: str = "mem") -> dict[str, str]:
        return {**at[t], "MEM_VAULT": str(where)}

    tools = ["mem", "restic", "rclone", *mems[1:]]
    where_to = Remotes(base, endpoint)
    figures: dict[str, dict[str, dict[str, list[float]]]] = {
        kind: {t: {k: [] for k in ("first s", "first cpu", "first MB", "inc s", "inc cpu",
                                   "second s", "second cpu", "second MB", "bytes")}
               for t in tools} for kind in KINDS}
    def backup(kind: str, t: str, run: int) -> tuple[float, float, float]:
        if t in mems:
            return measured([MEM, "sync", *where_to.mem(kind, run, t)], at[t])
        if t == "restic":
            return measured(["restic", "-q", "-r", where_to.restic(kind, run), "backup",
                             str(vault)], env)
        return measured(["rclone", "copy", str(vault), where_to.rclone(kind, run)], env)

    def one_remote(kind: str, run: int, order: list[str], session: Path) -> None:
        """The first sync, a session, the incremental sync and a second machine, each
        tool in turn, to one remote."""
        got: tuple[float, float, float]
        mine = figures[kind]
        for t in order:
            if t in mems and kind == "folder":
                (base / f"run{run}" / f"{t}-remote").mkdir()
            if t == "restic":
                subprocess.run(["restic", "init", "-q", "-r", where_to.restic(kind, run)],
                               env=env, check=True, stdout=subprocess.DEVNULL)
            got = backup(kind, t, run)
            mine[t]["first s"].append(got[0])
            mine[t]["first cpu"].append(got[1])
            mine[t]["first MB"].append(got[2])
        for t in mems:
            measured([MEM, "ingest", str(session), "--format", "jsonl", "--session",
                      session.stem], at[t])
        for t in order:
            got = backup(kind, t, run)
            mine[t]["inc s"].append(got[0])
            mine[t]["inc cpu"].append(got[1])
            mine[t]["bytes"].append(where_to.size(kind, t, run))
        for t in order:
            where = base / f"run{run}" / f"{t}-{kind}-second"
            search = ([MEM, "search", QUERY, "-n", "3"], second(
                where / vault.relative_to("/") if t == "restic" else where,
                t if t in mems else "mem"))
            if t in mems:
                # `mem init` under the same master key stands in for `mem key restore`,
                # which the comparison leaves out (restic and rclone have their keys).
                measured([MEM, "init"], second(where, t))
                got = both(([MEM, "sync", *where_to.mem(kind, run, t)], second(where, t)),
                           search)
            elif t == "restic":
                got = both((["restic", "-q", "-r", where_to.restic(kind, run), "restore",
                             "latest", "--target", str(where)], env), search)
            else:
                got = both((["rclone", "copy", where_to.rclone(kind, run), str(where)], env),
                           search)
            mine[t]["second s"].append(got[0])
            mine[t]["second cpu"].append(got[1])
            mine[t]["second MB"].append(got[2])
            shutil.rmtree(where, ignore_errors=True)

    for run in range(RUNS):
        turn = run % len(tools)
        order = tools[turn:] + tools[:turn]  # interleaved: no tool always first
        (base / f"run{run}").mkdir()
        for n, kind in enumerate(KINDS):
            # One remote after the other: mem keeps one cache per user, for the remote it
            # syncs with, and a user syncing with two in turn would read all each time.
            one_remote(kind, run, order, session_file(base / f"run{run}-{kind}.jsonl",
                                                      run * len(KINDS) + n))
        shutil.rmtree(base / f"run{run}")
    doc: dict[str, object] = {"records": records, "runs": RUNS, "fill seconds": round(fill_s)}
    for kind in KINDS:
        for t in tools:
            doc[f"{t} ({kind})"] = {k: round(statistics.median(v), 2) if "bytes" not in k
                                    else int(statistics.median(v))
                                    for k, v in figures[kind][t].items()}
        restic = figures[kind]["restic"]
        for t in mems:
            doc[f"{t} / restic ({kind})"] = {
                k: round(statistics.median(figures[kind][t][k]) /
                         statistics.median(restic[k]), 2)
                for k in ("first s", "inc s", "second s", "second cpu", "second MB", "bytes")}
    return doc


def _compiled() -> None:
    """memvault's modules compiled, as an install leaves them: a tree edited since and
    run under PYTHONDONTWRITEBYTECODE would compile them again in every command timed."""
    import compileall

    import memvault

    compileall.compile_dir(str(Path(memvault.__file__).parent), quiet=1)
    if BASELINE:
        compileall.compile_dir(str(Path(BASELINE) / "memvault"), quiet=1)


def main() -> dict[str, object]:
    _install("restic", "rclone", "time")
    _compiled()
    out: dict[str, object] = {}
    for records in SIZES:
        base = Path(tempfile.mkdtemp(prefix="mem-bench-peers-"))
        server = None
        try:
            endpoint = None
            if "s3" in KINDS:
                import boto3
                from bench_sync import _server

                server, endpoint = _server()
                boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="bench",
                             aws_secret_access_key="bench",
                             region_name="us-east-1").create_bucket(Bucket="bench")
            doc = one_size(base, records, endpoint)
        finally:
            if server is not None:
                server.kill()
                server.wait()
            shutil.rmtree(base, ignore_errors=True)
        out[str(records)] = doc
        print(f"{records} records:")
        for key, value in doc.items():
            print(f"  {key}: {value}")
    report("sync_peers", out)
    return out


if __name__ == "__main__":
    main()
