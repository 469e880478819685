"""A hostile sync folder (or bucket): whoever else can write to it may put anything
there. A pipe, a socket, a device or a file outside the remote reached through a link,
a folder where an object goes, a file of any size: each is skipped and counted, never
waited on, never followed out of the remote, never read past the largest object its
kind can be (docs/sync.md), and never erased. `mem sync` runs as a real process, with a
time-out (a sync that waits on a pipe fails the test instead of hanging the suite) and
its peak memory measured."""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memvault.crypto import syncseal
from memvault.model.records import MAX_CONTENT
from memvault.ops import sync as sync_ops
from memvault.ops.remember import add
from memvault.storage.remote import FolderRemote, open_remote
from memvault.vault.vault import Vault
from tests.test_sync import contents, machine

MiB = 1 << 20
FACTS = 3

# Spawns `mem` and writes its rusage's peak RSS to a file: not started from pytest itself,
# whose larger peak a child forked from it would report as its own.
LAUNCHER = """
import os, sys
pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as fh:
    fh.write(str(usage.ru_maxrss * 1024))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_sync(v: Vault, remote: Path, timeout: float = 120) -> tuple[int, dict[str, Any], str,
                                                                     int]:
    """`mem sync --json` for this machine in a real process: its exit code, its JSON, its
    stderr, its peak RSS (bytes). A sync still running at `timeout` is killed (it and
    what it started) and fails the test."""
    mem = str(Path(sys.executable).parent / "mem")
    env = {**os.environ, "MEM_VAULT": str(v.root), "MEM_SYNC_REMOTE": str(remote)}
    with tempfile.TemporaryDirectory() as tmp:
        rss = Path(tmp) / "rss"
        proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(rss), mem, "sync",
                                 "--json"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            pytest.fail(f"mem sync was still running after {timeout} s")
        doc = json.loads(out) if proc.returncode == 0 else {}
        return proc.returncode, doc, err, int(rss.read_text()) if rss.exists() else 0


@pytest.fixture
def synced(tmp_path: Path) -> Iterator[tuple[Path, str, str]]:
    """A folder remote that machine a synced FACTS facts to: (its root, the user's
    namespace, the key id its objects are under)."""
    root = tmp_path / "remote"
    root.mkdir()
    a = machine(tmp_path, "a")
    for i in range(FACTS):
        add(a, f"fact number {i}", "fact")
    sync_ops.sync(a, FolderRemote(str(root), root))
    (ns,) = (p.name for p in root.iterdir() if p.name != "u")
    (kid,) = (p.name for p in (root / ns / "k").iterdir())
    yield root, ns, kid


def test_pipes_in_place_of_objects_are_skipped_and_counted_never_waited_on(
        tmp_path: Path, synced: tuple[Path, str, str]) -> None:
    root, ns, kid = synced
    pipes = [root / "u" / ("f" * 32), root / ns / "o" / f"{kid}-{'f' * 32}"]
    for pipe in pipes:
        os.mkfifo(pipe)  # opened for reading without O_NONBLOCK: waits for a writer
    code, doc, err, _ = run_sync(machine(tmp_path, "b"), root)
    assert code == 0, err
    assert (doc["pulled"], doc["damaged"]) == (FACTS, 2)
    assert all(stat.S_ISFIFO(p.lstat().st_mode) for p in pipes)  # left as they were


def test_links_are_never_followed_out_of_the_remote(
        tmp_path: Path, synced: tuple[Path, str, str]) -> None:
    """A link to a device, and a link to a real object moved out of the remote: neither
    is read (the object's records do not arrive through it)."""
    root, ns, _ = synced
    outside = tmp_path / "outside"
    outside.mkdir()
    (obj,) = (root / ns / "o").iterdir()
    moved = outside / obj.name
    obj.rename(moved)
    obj.symlink_to(moved)
    (root / "u" / ("e" * 32)).symlink_to("/dev/zero")
    b = machine(tmp_path, "b")
    add(b, "a fact of b's own", "fact")
    code, doc, err, _ = run_sync(b, root)
    assert code == 0, err
    assert (doc["pushed"], doc["pulled"], doc["damaged"]) == (1, 0, 2)
    assert list(contents(b).values()) == ["a fact of b's own"]
    assert obj.is_symlink() and (root / "u" / ("e" * 32)).is_symlink()
    assert sorted(p.name for p in outside.iterdir()) == [obj.name]


def test_a_namespace_folder_that_links_out_of_the_remote_is_not_listed_nor_written(
        tmp_path: Path, synced: tuple[Path, str, str]) -> None:
    root, ns, _ = synced
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / ns).rename(outside / ns)
    (root / ns).symlink_to(outside / ns)
    before = sorted(str(p) for p in outside.rglob("*"))
    b = machine(tmp_path, "b")
    add(b, "a fact of b's own", "fact")
    code, _, err, _ = run_sync(b, root)
    # Nothing of the user's is read through the link, and nothing written through it:
    # the sync stops with one line (it cannot write where its objects go).
    assert code == 74, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert list(contents(b).values()) == ["a fact of b's own"]
    assert sorted(str(p) for p in outside.rglob("*")) == before


def test_folders_where_objects_go_are_skipped_and_counted(
        tmp_path: Path, synced: tuple[Path, str, str]) -> None:
    """A folder named as a key (holding a file named as it: a listing that walked into it
    would ask for the folder as a key), as an operation and as a directory entry."""
    root, ns, kid = synced
    folders = [root / ns / "k" / ("d" * 16), root / ns / "o" / f"{kid}-{'d' * 32}",
               root / "u" / ("d" * 32)]
    for folder in folders:
        folder.mkdir()
        (folder / ("d" * 16)).write_bytes(b"MEMS\x02" + bytes(4091))
    code, doc, err, _ = run_sync(machine(tmp_path, "b"), root)
    assert code == 0, err
    # The operation, the entry and the key that is not one are each counted.
    assert (doc["pulled"], doc["damaged"]) == (FACTS, 3)
    assert all(f.is_dir() and (f / ("d" * 16)).is_file() for f in folders)


def sparse(path: Path, size: int, head: bytes = b"") -> None:
    """A file of `size` bytes that takes no room: `head`, then a hole."""
    with path.open("wb") as fh:
        fh.write(head)
        fh.truncate(size)


def test_a_file_larger_than_its_kind_is_never_read_whole(
        tmp_path: Path, synced: tuple[Path, str, str]) -> None:
    root, ns, kid = synced
    big = {
        # Beginning as an operation does, past the largest one (a page at the model's
        # limits) by a padding step.
        root / ns / "o" / f"{kid}-{'a' * 32}": (syncseal.OBJECT_MAX + 128 * MiB,
                                                 b"MEMS\x02"),
        # Within it, but not beginning as an operation does.
        root / ns / "o" / f"{kid}-{'b' * 32}": (syncseal.OBJECT_MAX, b""),
        root / "u" / ("c" * 32): (64 * MiB, b""),  # an entry is 4 KiB
    }
    for path, (size, head) in big.items():
        sparse(path, size, head)
    code, doc, err, rss = run_sync(machine(tmp_path, "b"), root)
    assert code == 0, err
    assert (doc["pulled"], doc["damaged"]) == (FACTS, 3)
    assert rss < 200 * MiB, rss / MiB  # a sync of a few records: no file read whole
    assert {p: p.stat().st_size for p in big} == {p: s for p, (s, _) in big.items()}


def test_a_key_object_larger_than_a_key_is_passed_over(
        tmp_path: Path, synced: tuple[Path, str, str]) -> None:
    root, ns, _ = synced
    sparse(root / ns / "k" / ("9" * 16), 64 * MiB, b"MEMR\x01")
    code, doc, err, rss = run_sync(machine(tmp_path, "b"), root)
    assert code == 0, err
    assert (doc["pulled"], doc["damaged"]) == (FACTS, 1)  # passed over, and counted
    assert rss < 150 * MiB, rss / MiB


def test_the_bound_of_an_operation_holds_a_page_of_the_largest_records() -> None:
    """OBJECT_MAX is the share of each of PAGE records times PAGE: a sealed page of the
    largest records the model allows (MAX_CONTENT of text that compresses poorly, with
    every character JSON escapes) keeps within its share, and sync pages by PAGE."""
    assert sync_ops.PAGE <= syncseal.PAGE
    rng = random.Random(7)
    alphabet = [chr(c) for c in range(0x20, 0x7f)] + ['"', "\\", "\n", "\t"] * 8
    n = 8
    records = []
    for i in range(n):
        content = "".join(rng.choice(alphabet) for _ in range(MAX_CONTENT))
        records.append({"r": {"memory_id": f"{i:08d}-0000-7000-8000-000000000000",
                              "type": "message", "content": content, "tags": ["x" * 64]},
                        "a": False})
    raw = json.dumps({"kind": "add", "at": "2026-01-01T00:00:00.000000Z",
                      "records": records}).encode()
    blob = syncseal.seal_json(bytes(32), "n" * 32, "k" * 16, "o" * 32, raw)
    share = n * (MAX_CONTENT + syncseal.RECORD_FIELDS)
    assert len(blob) <= syncseal.padded_size(share + (share >> 8) + 64)


# --- S3 ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    pytest.importorskip("moto")
    from tests.servers.moto_s3 import moto_server

    with moto_server() as endpoint:
        yield endpoint


def test_an_s3_object_larger_than_its_kind_is_not_downloaded(
        tmp_path: Path, s3_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    boto3 = pytest.importorskip("boto3")
    from tests.servers.moto_s3 import CREDENTIALS

    for k, v in CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    bucket, url = "mem-hostile", "s3://mem-hostile/mem"
    client: Any = boto3.client("s3", endpoint_url=s3_server)
    client.create_bucket(Bucket=bucket)
    a = machine(tmp_path, "a")
    for i in range(FACTS):
        add(a, f"fact number {i}", "fact")
    sync_ops.sync(a, open_remote(url, s3_server))
    keys = [item["Key"] for item in client.list_objects_v2(Bucket=bucket)["Contents"]]
    (key,) = (k for k in keys if "/k/" in k)
    ns, kid = key.split("/")[1], key.rsplit("/", 1)[1]
    planted = {f"mem/u/{'c' * 32}": b"",  # an entry is 4 KiB
               f"mem/{ns}/o/{kid}-{'b' * 32}": b"",  # not beginning as an operation does
               f"mem/{ns}/o/{kid}-{'e' * 32}": None}  # empty: no byte 0 to range from
    for name, head in planted.items():
        client.put_object(Bucket=bucket, Key=name,
                          Body=b"" if head is None else head + bytes(32 * MiB - len(head)))

    b = machine(tmp_path, "b")
    remote = open_remote(url, s3_server)
    list(remote.list("u/"))  # the client made (its service models read) before measuring
    tracemalloc.start()
    try:
        result = sync_ops.sync(b, remote)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (result.pulled, result.damaged) == (FACTS, 3)
    assert peak < 16 * MiB, peak / MiB
    sizes = {item["Key"]: item["Size"]
             for item in client.list_objects_v2(Bucket=bucket)["Contents"]}
    assert {n: sizes[n] for n in planted} == {n: 0 if h is None else 32 * MiB
                                              for n, h in planted.items()}
