"""The sync fault suite: every kind of erasure crossed with every fault a remote can
have, on a folder and on an S3-compatible server (moto's, on 127.0.0.1), with a
machine that was away during the erasure and a new machine after it.

After the machines converge: nothing acknowledged on a machine is lost, nothing
erased is on any machine or in any object the remote holds (read by the independent
decryptor, tests/sync_oracle.py), and `mem verify` passes everywhere. The whole cross
is `make test-sync-faults` (marker `faults`); a sample of it runs in `make test`.
"""

from __future__ import annotations

import itertools
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memvault.ops import forget as forget_ops
from memvault.ops import sync as sync_ops
from memvault.ops.admin import destroy
from memvault.ops.ingest import ingest_text
from memvault.ops.remember import add
from memvault.ops.verify import verify
from memvault.vault.vault import Vault
from tests.servers.moto_s3 import CREDENTIALS, moto_server
from tests.sync_oracle import MASTER, _keys, _open
from tests.test_sync import CANARY, ids, machine

KINDS = ("id", "session", "query", "date", "now", "destroy")
FAULTS = ("cache-removed", "spelling", "rolled-back", "emptied", "object-deleted",
          "object-truncated")
ORDERS = ("away", "online")  # the second machine during the erasure; a third is always new
# One case of each fault and each kind in `make test` (folder); the whole cross, on both
# remotes, behind the marker.
SAMPLE = {("id", "rolled-back", "away"), ("session", "cache-removed", "away"),
          ("query", "emptied", "online"), ("date", "object-truncated", "away"),
          ("now", "spelling", "away"), ("destroy", "rolled-back", "away"),
          ("destroy", "emptied", "online"), ("id", "object-deleted", "online")}


# --- the remote, seen from outside -------------------------------------------------------


class Outside:
    """What a fault does to a remote: its objects read, put back, deleted, cut short."""

    url: str
    spelled: str
    endpoint: str | None = None

    def snapshot(self) -> dict[str, bytes]:
        raise NotImplementedError

    def restore(self, snap: dict[str, bytes]) -> None:
        raise NotImplementedError

    def delete(self, name: str) -> None:
        raise NotImplementedError

    def put(self, name: str, data: bytes) -> None:
        raise NotImplementedError


class FolderOutside(Outside):
    def __init__(self, root: Path) -> None:
        root.mkdir()
        self.root, self.url, self.spelled = root, str(root), f"file://{root}/"

    def snapshot(self) -> dict[str, bytes]:
        return {p.relative_to(self.root).as_posix(): p.read_bytes()
                for p in self.root.rglob("*") if p.is_file()}

    def restore(self, snap: dict[str, bytes]) -> None:
        shutil.rmtree(self.root)
        self.root.mkdir()
        for name, data in snap.items():
            self.put(name, data)

    def delete(self, name: str) -> None:
        (self.root / name).unlink()

    def put(self, name: str, data: bytes) -> None:
        (self.root / name).parent.mkdir(parents=True, exist_ok=True)
        (self.root / name).write_bytes(data)


class S3Outside(Outside):
    def __init__(self, endpoint: str, bucket: str) -> None:
        import boto3

        self.client: Any = boto3.client("s3", endpoint_url=endpoint)
        self.client.create_bucket(Bucket=bucket)
        self.bucket, self.endpoint = bucket, endpoint
        self.url, self.spelled = f"s3://{bucket}/mem", f"s3://{bucket}/mem/"

    def snapshot(self) -> dict[str, bytes]:
        out = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix="mem/"):
            for item in page.get("Contents", []):
                out[item["Key"][4:]] = self.client.get_object(
                    Bucket=self.bucket, Key=item["Key"])["Body"].read()
        return out

    def restore(self, snap: dict[str, bytes]) -> None:
        for name in self.snapshot():
            self.delete(name)
        for name, data in snap.items():
            self.put(name, data)

    def delete(self, name: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key="mem/" + name)

    def put(self, name: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key="mem/" + name, Body=data)


def opened(snap: dict[str, bytes]) -> tuple[dict[str, str], set[str]]:
    """The records (id -> content) and erased ids every object that opens holds, read by
    the independent decryptor from the format alone (a cut-short object is skipped)."""
    records: dict[str, str] = {}
    tombs: set[str] = set()
    for name, blob in sorted(snap.items()):
        parts = name.split("/")
        if len(parts) != 3 or parts[1] != "o":
            continue
        ns, kid_oid = parts[0], parts[2]
        kid, _, oid = kid_oid.partition("-")
        keys = _key_table(snap, ns)
        if kid not in keys:
            continue
        try:
            body = json.loads(_open(blob, keys[kid], ns, kid, oid))
        except Exception:  # noqa: BLE001 - a damaged object holds nothing readable
            continue
        if body["kind"] == "add":
            for item in body["records"]:
                records[item["r"]["memory_id"]] = item["r"]["content"]
        elif body["kind"] == "forget":
            tombs.update(body["ids"])
    return records, tombs


def _key_table(snap: dict[str, bytes], ns: str) -> dict[str, bytes]:
    """The remote's data keys for a namespace, unwrapped by the oracle from a copy of
    the snapshot laid out as a folder."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for name, data in snap.items():
            if name.startswith(f"{ns}/k/"):
                path = Path(tmp, name)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        found_ns, keys = _keys(Path(tmp), MASTER, "default", "alice")
    return keys if found_ns == ns else {}


# --- the scenario ------------------------------------------------------------------------


@dataclass
class World:
    tmp: Path
    outside: Outside
    machines: dict[str, Vault] = field(default_factory=dict)
    snapshots: list[dict[str, bytes]] = field(default_factory=list)
    erased: set[str] = field(default_factory=set)
    acknowledged: set[str] = field(default_factory=set)
    target: str = ""  # the record a forget by id takes

    def machine(self, name: str) -> Vault:
        self.machines[name] = machine(self.tmp, name)
        return self.machines[name]

    def sync(self, name: str, url: str | None = None) -> None:
        sync_ops.run(self.machines[name], url or self.outside.url, self.outside.endpoint)
        self.snapshots.append(self.outside.snapshot())

    def held(self, name: str) -> set[str]:
        return ids(self.machines[name])


def transcript(n: int, word: str) -> str:
    return "\n".join(json.dumps({"id": f"m{i}", "role": "user" if i % 2 else "assistant",
                                 "content": f"{word} {CANARY} turn {i}",
                                 "timestamp": f"2026-01-01T00:00:{i:02d}Z"})
                     for i in range(n))


def erase(world: World, kind: str) -> set[str]:
    """Machine a erases by `kind`; the ids erased (a destroy: everything stored before)."""
    a = world.machines["a"]
    before = world.held("a")
    if kind == "destroy":
        destroy(a, "alice")
        time.sleep(0.01)  # a record is timed by its id's millisecond: later than the destroy
        world.acknowledged.add(add(a, "Made again after the destroy", "fact").record.memory_id)
        return before
    if kind == "id":
        plan = forget_ops.select(a, [world.target])
    elif kind == "session":
        plan = forget_ops.select(a, [], session="doomed")
    elif kind == "query":
        plan = forget_ops.select(a, [], query="xylophone")
    elif kind == "date":
        plan = forget_ops.select(a, [], before=datetime(2026, 6, 1, tzinfo=UTC))
    else:  # now
        plan = forget_ops.select(a, [world.target])
    forget_ops.forget(a, plan, now=kind == "now")
    return before - world.held("a")


def fault(world: World, what: str) -> Iterator[str]:
    """Apply the fault; yields once per variant (a roll-back: to each earlier listing)."""
    outside = world.outside
    if what == "cache-removed":
        for v in world.machines.values():
            sync_ops.cache_path(v).unlink(missing_ok=True)
        yield what
    elif what == "spelling":
        world.sync("a", outside.spelled)
        yield what
    elif what == "rolled-back":
        for at, snap in enumerate(list(world.snapshots)):
            outside.restore(snap)
            yield f"{what} to listing {at}"
    elif what == "emptied":
        outside.restore({})
        yield what
    else:
        start = outside.snapshot()
        for name in sorted(n for n in start if "/o/" in n):
            outside.restore(start)  # each variant from the remote as the fault found it
            if what == "object-deleted":
                outside.delete(name)
            else:
                outside.put(name, start[name][:-20])
            yield f"{what} {name}"


def converge(world: World) -> None:
    for _ in range(3):
        for name in sorted(world.machines):
            world.sync(name)


def check(world: World, variant: str) -> None:
    records, _ = opened(world.outside.snapshot())
    assert not world.erased & set(records), variant
    assert not any(CANARY in c for i, c in records.items() if i in world.erased), variant
    for name, v in world.machines.items():
        held = world.held(name)
        assert not world.erased & held, (variant, name)
        assert world.acknowledged <= held, (variant, name, world.acknowledged - held)
        assert verify(v).ok, (variant, name)


def scenario(world: World, kind: str, what: str, order: str) -> None:
    a, b = world.machine("a"), world.machine("b")
    target = add(a, f"Divorce lawyer xylophone {CANARY}", "fact").record.memory_id
    world.target = target
    add(a, "Prefers tabs", "preference")
    ingest_text(a, transcript(4, "doomed"), None, "jsonl", session="doomed")
    add(b, "Uses fish shell", "fact")
    for name in ("a", "b", "a"):
        world.sync(name)
    world.acknowledged = world.held("a")
    world.erased = erase(world, kind)
    world.acknowledged -= world.erased
    assert world.erased, kind
    if order == "online":
        world.sync("b")
    else:  # b was away: it stores something of its own, after the erasure
        time.sleep(0.01)
        world.acknowledged.add(add(b, "Made away from the erasure", "fact").record.memory_id)
    world.sync("a")
    base = {n: sync_ops.cache_path(v).read_bytes() for n, v in world.machines.items()}
    for variant in fault(world, what):
        if "c" not in world.machines:
            world.machine("c")  # a new machine, after the erasure and the fault
        converge(world)
        check(world, variant)
        # Each variant of a fault starts from the same machines' knowledge of the remote.
        for n, data in base.items():
            sync_ops.cache_path(world.machines[n]).write_bytes(data)


def cases() -> Iterator[Any]:
    for kind, what, order in itertools.product(KINDS, FAULTS, ORDERS):
        marks = [] if (kind, what, order) in SAMPLE else [pytest.mark.faults]
        yield pytest.param(kind, what, order, marks=marks, id=f"{kind}-{what}-{order}")


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    pytest.importorskip("moto")
    with moto_server() as endpoint:
        yield endpoint


@pytest.mark.parametrize(("kind", "what", "order"), list(cases()))
def test_folder(tmp_path: Path, kind: str, what: str, order: str) -> None:
    scenario(World(tmp_path, FolderOutside(tmp_path / "remote")), kind, what, order)


@pytest.mark.faults
@pytest.mark.parametrize(("kind", "what", "order"), list(cases()))
def test_s3(tmp_path: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch,
            kind: str, what: str, order: str) -> None:
    for k, v in CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    bucket = f"faults-{kind}-{what}-{order}"[:63]
    scenario(World(tmp_path, S3Outside(s3_endpoint, bucket)), kind, what, order)
