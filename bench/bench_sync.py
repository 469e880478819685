"""`mem sync` against an S3-compatible server on 127.0.0.1 (moto's server mode), with
same-run baselines:

- first sync of N records (default 100,000; SYNC_BENCH_RECORDS to change) against the
  time boto3 takes to upload the same objects (same count, same sizes) in the same run:
  goal ≤ 2×;
- an incremental sync after one 200-message session: the objects and bytes it moves
  (goal: O(that session)) and its time (goal: under 1 s);
- a second machine's first sync (it pulls everything), then one more sync on each:
  converged when that round moves nothing;
- a third machine's pull from a folder the first filled, in a `mem sync` process of its
  own, then the sync after it: wall, CPU, peak RSS and the most of its anonymous memory
  and of its file pages (Tantivy's mapped segments) sampled through it. Its memory is
  meant not to grow with the records (SYNC_BENCH_RECORDS=1000000 against 100000).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_search import fill, texts
from common import report

RECORDS = int(os.environ.get("SYNC_BENCH_RECORDS", "100000"))
USER = "big"


def _server() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    return proc, f"http://127.0.0.1:{port}"


def _objects(client: Any, bucket: str, prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                  Prefix=prefix):
        for item in page.get("Contents", []):
            out[item["Key"]] = int(item["Size"])
    return out


def _own_process(args: list[str], env: dict[str, str]) -> dict[str, float]:
    """`mem ARGS` in a process of its own: wall, CPU, and its peak RSS (VmHWM), the most
    of RssAnon and of RssFile (MB) read from /proc every 0.1 s (the child's ru_maxrss
    would count this process's memory, forked before the exec)."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "memvault", *args], env=env,
                            stdout=subprocess.DEVNULL)
    peak = anon = pages = 0
    while True:
        with contextlib.suppress(OSError), open(f"/proc/{proc.pid}/status") as fh:
            for line in fh:
                if line.startswith("RssAnon:"):
                    anon = max(anon, int(line.split()[1]))
                elif line.startswith("RssFile:"):
                    pages = max(pages, int(line.split()[1]))
                elif line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.1)
    assert status == 0, f"mem {' '.join(args)} failed"
    return {"seconds": round(time.perf_counter() - started, 1),
            "cpu seconds": round(usage.ru_utime + usage.ru_stime, 1),
            "peak MB": round(peak / 1024), "most anonymous MB": round(anon / 1024),
            "most file pages MB": round(pages / 1024)}


def main() -> dict[str, object]:
    import boto3

    base = Path(tempfile.mkdtemp(prefix="mem-bench-sync-"))
    os.environ.update(MEM_CONFIG_DIR=str(base / "config"), AWS_ACCESS_KEY_ID="bench",
                      AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                      MEM_MASTER_KEY="AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
    for var in ("MEM_KEY_FILE", "MEM_KEY_COMMAND", "MEM_ORG", "MEM_USER"):
        os.environ.pop(var, None)
    from memvault.config import resolve
    from memvault.model.records import NewMessage
    from memvault.ops import sync
    from memvault.ops.admin import init
    from memvault.ops.ingest import add_messages
    from memvault.storage.remote import open_remote
    from memvault.vault.vault import Vault

    proc, endpoint = _server()
    try:
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket="bench")
        url = "s3://bench/mem"
        os.environ["MEM_VAULT"] = str(base / "a")
        init(resolve(user=USER))
        _, fill_s = fill(USER, RECORDS, texts())

        def machine(name: str) -> Vault:
            settings = resolve(vault=base / name, user=USER)
            if not (base / name / "vault.json").exists():
                init(settings)
            return Vault(settings)

        started = time.perf_counter()
        first = sync.sync(machine("a"), open_remote(url, endpoint))
        first_s = time.perf_counter() - started
        sizes = _objects(client, "bench", "mem/")
        assert first.pushed == RECORDS, first

        # The baseline: the same client library uploads the same bytes (as many objects
        # of the same sizes, random content), in this run.
        blobs = [os.urandom(size) for size in sizes.values()]
        started = time.perf_counter()
        for i, blob in enumerate(blobs):
            client.put_object(Bucket="bench", Key=f"baseline/{i}", Body=blob)
        upload_s = time.perf_counter() - started

        corpus = texts()
        add_messages(machine("a"), "one-more", [
            NewMessage(content=corpus[i % len(corpus)], role="user" if i % 2 else "assistant",
                       message_id=f"x{i}") for i in range(200)])
        before = _objects(client, "bench", "mem/")
        started = time.perf_counter()
        incremental = sync.sync(machine("a"), open_remote(url, endpoint))
        incremental_s = time.perf_counter() - started
        after = _objects(client, "bench", "mem/")
        moved = {k: v for k, v in after.items() if k not in before}

        started = time.perf_counter()
        pulled = sync.sync(machine("b"), open_remote(url, endpoint))
        pull_s = time.perf_counter() - started
        last = [sync.sync(machine(n), open_remote(url, endpoint)) for n in ("a", "b")]
        converged = all(r.pushed == r.pulled == 0 for r in last)

        # A new machine from a folder, in a process of its own (its memory is the pull's).
        folder = base / "folder"
        folder.mkdir()
        sync.sync(machine("a"), open_remote(str(folder)))
        env = {**os.environ, "MEM_VAULT": str(base / "c"), "MEM_USER": USER,
               "MEM_EMBEDDINGS_PROVIDER": "none"}
        subprocess.run([sys.executable, "-m", "memvault", "init"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        own = _own_process(["sync", "--remote", str(folder)], env)
        own_next = _own_process(["sync", "--remote", str(folder)], env)
    finally:
        proc.kill()
        proc.wait()

    doc: dict[str, object] = {
        "records": RECORDS, "fill seconds": round(fill_s, 1),
        "first sync": {"seconds": round(first_s, 2), "objects": len(sizes),
                       "bytes": sum(sizes.values())},
        "baseline boto3 upload of the same bytes": {"seconds": round(upload_s, 2)},
        "first sync / baseline": round(first_s / upload_s, 2),
        "incremental sync (one 200-message session)": {
            "seconds": round(incremental_s, 3), "pushed": incremental.pushed,
            "objects": len(moved), "bytes": sum(moved.values())},
        "second machine's first sync": {"seconds": round(pull_s, 2),
                                        "pulled": pulled.pulled},
        "converged after one sync per machine": converged,
        "a new machine's pull from a folder, in its own process": own,
        "the sync after it": own_next,
    }
    for key, value in doc.items():
        print(f"{key}: {value}")
    report("sync", doc)
    return doc


if __name__ == "__main__":
    main()
