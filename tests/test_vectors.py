"""The sealed vector store (index/vectors.py): nothing of a vector in clear, damage found by
verify, every forget path takes the vector and the ciphertext that held it, search finds
the nearest, and add/remove/reseal behave as a dict does. The store is read here by an
independent reader written from docs/vault-format.md, not by mem's code."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memvault.embed import builtin
from memvault.embed.base import ModelId
from memvault.errors import Refused, UsageError
from memvault.index import vectors as vec
from memvault.index.base import Entry
from memvault.index.vectors import VectorItem, VectorStore, embed_text, text_digest
from memvault.model.location import Location
from memvault.model.records import NewMessage, Record
from memvault.ops import admin, forget, ingest, keys, portability, remember
from memvault.ops import verify as verify_ops
from memvault.storage import fsio
from memvault.vault.vault import Vault
from tests.conftest import examples, open_as

MODEL = ModelId("test", "random", 32)

# --- an independent reader of docs/vault-format.md's "Vectors" -------------------------


def _lp(*fields: str | bytes) -> bytes:
    out = b""
    for field in fields:
        raw = field.encode() if isinstance(field, str) else field
        out += len(raw).to_bytes(4, "big") + raw
    return out


def _hkdf(ikm: bytes, *info: str) -> bytes:
    prk = hmac.new(b"\0" * 32, ikm, hashlib.sha256).digest()
    return hmac.new(prk, _lp(*info) + b"\x01", hashlib.sha256).digest()


def _open(key: bytes, body: bytes, aad: bytes) -> bytes:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(key).decrypt(body[:12], body[12:], aad)


def _frames(raw: bytes, magic: bytes) -> tuple[int, list[bytes]]:
    assert raw[:8] == magic
    epoch = int.from_bytes(raw[8:12], "big")
    frames, at = [], 12
    while at < len(raw):
        n = int.from_bytes(raw[at:at + 4], "big")
        frames.append(raw[at + 4:at + 4 + n])
        at += 4 + n
    assert at == len(raw)
    return epoch, frames


def read_store(directory: Path, dek: bytes, owner: str) -> dict[str, dict[str, Any]]:
    """Every stored vector by id: its int8 values, scale, sign code, digest, flags, file,
    and the segment file and frame bytes that hold it."""
    key = _hkdf(dek, "mem/v1/vectors")
    manifest = directory / "manifest"
    if not manifest.exists():
        return {}
    epoch, (body,) = _frames(manifest.read_bytes(), b"memvecm1")
    doc = json.loads(_open(key, body, _lp("mem/vectors/manifest/v1", owner, str(epoch))))
    dims = doc["model"]["dims"]
    out: dict[str, dict[str, Any]] = {}
    for seg in doc["segments"]:
        name, path = seg["name"], directory / f"{seg['name']}.seg"
        seg_epoch, frames = _frames(path.read_bytes(), b"memvecs1")
        assert seg_epoch == epoch and len(frames) == seg["frames"]

        def aad(i: int, name: str = name, frames: list[bytes] = frames) -> bytes:
            return _lp("mem/vectors/segment/v1", owner, str(epoch), name, str(i),
                       str(len(frames)))

        assert doc["format"] == 3 and doc["chunk"] == 64
        keys = _open(key, frames[0], aad(0))
        meta = _open(key, frames[1], aad(1))
        n, d, width, cb = struct.unpack_from("<IHHH", meta)
        assert d == dims
        at = 10
        flen = int.from_bytes(meta[at:at + 4], "big")
        table = json.loads(meta[at + 4:at + 4 + flen])
        at += 4 + flen
        ids = [meta[at + i * width:at + (i + 1) * width].rstrip(b"\0").decode()
               for i in range(n)]
        at += n * width
        digests = [meta[at + 8 * i:at + 8 * i + 8] for i in range(n)]
        at += 8 * n
        flags = list(meta[at:at + n])
        at += n
        where = struct.unpack_from(f"<{n}I", meta, at)
        at += 4 * n
        codes = [meta[at + cb * i:at + cb * (i + 1)] for i in range(n)]
        assert at + cb * n == len(meta)
        # frame 0: each id's key, 8 bytes of BLAKE2b (which segments may hold an id)
        assert keys == b"".join(hashlib.blake2b(i.encode(), digest_size=8).digest()
                                for i in ids)
        for j, frame in enumerate(frames[2:], start=2):
            plain = _open(key, frame, aad(j))
            m = min(64, n - (j - 2) * 64)
            scales = struct.unpack_from(f"<{m}f", plain)
            for r in range(m):
                i = (j - 2) * 64 + r
                q = plain[4 * m + r * dims:4 * m + (r + 1) * dims]
                out[ids[i]] = {"q": q, "scale": scales[r], "scales": plain[:4 * m],
                               "code": codes[i], "digest": digests[i], "flags": flags[i],
                               "file": table[where[i]], "segment": path, "frame": frame,
                               "vector": np.frombuffer(q, np.int8) * np.float32(scales[r])}
    return out


def stored(v: Vault) -> dict[str, dict[str, Any]]:
    epoch = v.state().key_version
    return read_store(v.layout.vectors_dir, v.store.dek(epoch), v.who)


# --- making real vectors -----------------------------------------------------------------


@pytest.fixture(scope="module")
def model() -> Any:
    return builtin.load()


def embed_all(v: Vault, model: Any) -> dict[str, Any]:
    """Embed every record of the user (as `mem embed` will), under the user's lock;
    returns each id's float32 vector."""
    with v.transaction() as tx:
        records: list[Record] = []
        files: list[str] = []
        for _, found, locations in tx.store.files(True):
            records += found
            files += [loc.file for loc in locations]
        made = model.embed([embed_text(r) for r in records])
        items = [VectorItem(r.memory_id, text_digest(embed_text(r)), r.archived, made[i], f)
                 for i, (r, f) in enumerate(zip(records, files, strict=True))]
        v.vector_store(tx.epoch).add(model.model, items)
    return {r.memory_id: made[i] for i, r in enumerate(records)}


def populate(v: Vault) -> dict[str, str]:
    ids = {
        "fact": remember.add(v, "Lives in Lisbon near the river", "fact",
                             tags=["home"]).record.memory_id,
        "pref": remember.add(v, "Prefers green tea over coffee", "preference").record.memory_id,
        "query": remember.add(v, "Ordered gut violin strings from Vienna",
                              "fact").record.memory_id,
        "old": remember.add(v, "Used to commute by tram in 2019", "fact",
                            created_at="2020-01-02T03:04:05Z").record.memory_id,
    }
    ingest.add_messages(v, "s1", [NewMessage("Can you book the ferry to Porto", "user", "m1"),
                                  NewMessage("The ferry leaves at nine", "assistant", "m2")])
    ingest.add_messages(v, "s2", [NewMessage("Which cheese goes with quince", "user", "x1")])
    found = {r.memory_id: r for _, rs, _ in v.store.files(True) for r in rs}
    ids["session"] = next(i for i, r in found.items() if r.session_id == "s1")
    return ids


def all_files(root: Path) -> Iterator[tuple[Path, bytes]]:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            yield path, path.read_bytes()


# --- sealed at rest ---------------------------------------------------------------------


def test_no_vector_norm_or_code_is_stored_in_clear(vault: Vault, vault_dir: Path,
                                                  model: Any) -> None:
    populate(vault)
    made = embed_all(vault, model)
    held = stored(vault)
    assert set(held) == set(made) and len(held) >= 6
    needles: list[bytes] = []
    for memory_id, f32 in made.items():
        s = held[memory_id]
        needles += [f32.astype("<f4").tobytes(), f32.astype("<f2").tobytes(),
                    f32.astype(">f4").tobytes(), s["q"], s["code"], s["scales"],
                    s["vector"].astype("<f4").tobytes(),
                    np.float32(np.linalg.norm(f32)).tobytes()]
        # the stored int8 really is the vector (so the scan looks for the right bytes)
        assert float(s["vector"] @ f32) > 0.99
    for path, data in all_files(vault_dir):
        for needle in needles:
            assert needle not in data, f"{path} holds a vector's bytes in clear"


def test_at_rest_a_vector_takes_well_under_a_kilobyte(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    store = VectorStore(tmp_path / "v", b"k" * 32, 1, owner="o/u")
    model = ModelId("builtin", "m", 256)
    n = 2000
    rows = unit(rng, n, 256)
    store.add(model, [VectorItem(f"0190{i:032x}"[:36], text_digest(str(i)), False, rows[i],
                                 "sessions/s.jsonl") for i in range(n)])
    size = sum(p.stat().st_size for p in (tmp_path / "v").iterdir())
    assert size / n < 400  # int8 + scale + code + id + digest, sealed: ~330 bytes


# --- damage -----------------------------------------------------------------------------


def segment_files(v: Vault) -> list[Path]:
    return sorted(v.layout.vectors_dir.glob("*.seg"))


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x40
    path.write_bytes(bytes(data))


def damage_swap_chunks(v: Vault) -> None:
    path = segment_files(v)[0]
    epoch, frames = _frames(path.read_bytes(), b"memvecs1")
    assert len(frames) >= 4 and len(frames[2]) == len(frames[3])
    frames[2], frames[3] = frames[3], frames[2]
    path.write_bytes(path.read_bytes()[:12] + b"".join(
        len(f).to_bytes(4, "big") + f for f in frames))


def meta_at(v: Vault) -> int:
    """An offset inside the first segment's meta block (frame 1)."""
    _, frames = _frames(segment_files(v)[0].read_bytes(), b"memvecs1")
    return 12 + 4 + len(frames[0]) + 4 + 20


def damage_other_segment(v: Vault) -> None:
    a, b = segment_files(v)[:2]
    a.write_bytes(b.read_bytes())


DAMAGE = {
    "flipped byte in a chunk": lambda v: flip(segment_files(v)[0], -5),
    "flipped byte in the keys frame": lambda v: flip(segment_files(v)[0], 20),
    "flipped byte in a meta block": lambda v: flip(segment_files(v)[0], meta_at(v)),
    "flipped byte in the manifest": lambda v: flip(v.layout.vectors_dir / "manifest", 30),
    "truncated segment": lambda v: fsio.truncate_to(
        segment_files(v)[0], segment_files(v)[0].stat().st_size - 100),
    "chunks swapped": damage_swap_chunks,
    "a segment copied over another": damage_other_segment,
    "segment deleted": lambda v: segment_files(v)[0].unlink(),
}


QUICK_DAMAGE = ("flipped byte in a chunk", "truncated segment", "chunks swapped")


@pytest.mark.parametrize("damage", [
    d if d in QUICK_DAMAGE else pytest.param(d, marks=pytest.mark.long) for d in DAMAGE])
def test_verify_reports_a_damaged_store_and_repair_drops_it(vault: Vault, damage: str) -> None:
    rng = np.random.default_rng(2)
    remember.add(vault, "something to hold a user", "fact")
    with vault.transaction() as tx:
        store = vault.vector_store(tx.epoch)
        for part in range(2):  # two segments of three chunks each
            store.add(MODEL, [VectorItem(f"id-{part}-{i}", b"d" * 8, False, r, "CLAUDE.md")
                              for i, r in enumerate(unit(rng, 150, 32))])
    assert verify_ops.verify(vault).ok
    DAMAGE[damage](vault)
    report = verify_ops.verify(vault)
    assert not report.ok
    assert any("/vectors/" in p.file for p in report.problems)
    assert all(p.repairable for p in report.problems if "/vectors/" in p.file)
    actions = verify_ops.repair(vault).repaired
    assert any("vector store" in a for a in actions)
    assert verify_ops.verify(vault).ok
    assert vault.vector_store(vault.state().key_version).count() == 0


# --- the vector goes with its record ----------------------------------------------------

SELECTORS: dict[str, Any] = {
    "id": lambda ids: {"ids": [ids["fact"]]},
    "session": lambda ids: {"ids": [], "session": "s1"},
    "tag": lambda ids: {"ids": [], "tag": "home"},
    "before": lambda ids: {"ids": [], "before": datetime(2021, 1, 1, tzinfo=UTC)},
    "query": lambda ids: {"ids": [], "query": "violin"},
}
TARGET = {"id": "fact", "session": "session", "tag": "fact", "before": "old",
          "query": "query"}


@pytest.mark.parametrize("selector", [  # each selector in the long run
    s if s in ("id", "session") else pytest.param(s, marks=pytest.mark.long)
    for s in SELECTORS])
def test_forget_takes_the_vector_and_the_ciphertext_that_held_it(
        vault: Vault, vault_dir: Path, model: Any, selector: str) -> None:
    ids = populate(vault)
    embed_all(vault, model)
    before = stored(vault)
    target = ids[TARGET[selector]]
    old_frame, old_segment = before[target]["frame"], before[target]["segment"]
    plan = forget.select(vault, **SELECTORS[selector](ids))
    assert target in {r.memory_id for r in plan.targets}
    forget.forget(vault, plan)
    after = stored(vault)
    gone = {r.memory_id for r in plan.targets}
    assert set(after) == set(before) - gone
    for memory_id in after:  # the rest untouched
        assert after[memory_id]["q"] == before[memory_id]["q"]
    assert not old_segment.exists()
    for _, data in all_files(vault_dir):
        assert old_frame not in data
    assert verify_ops.verify(vault).ok


def test_forget_now_and_rotation_reseal_the_vectors_before_the_old_key_goes(
        vault: Vault, model: Any) -> None:
    ids = populate(vault)
    embed_all(vault, model)
    before = stored(vault)
    keys.rotate_key(vault)  # no --now: files stay under the old key, vectors follow at once
    assert vault.state().key_version == 2
    assert {k: s["q"] for k, s in stored(vault).items()} == \
        {k: s["q"] for k, s in before.items()}
    forget.forget(vault, forget.select(vault, [ids["fact"]]), now=True)
    epoch = vault.state().key_version
    assert epoch == 3 and vault.store.deks_on_disk() == [3]
    after = stored(vault)
    assert set(after) == set(before) - {ids["fact"]}
    store = vault.vector_store(epoch)
    assert store.count() == len(after)
    hit = store.search(before[ids["pref"]]["vector"], 1)
    assert hit[0].memory_id == ids["pref"]
    keys.rotate_key(vault, now=True)
    assert set(stored(vault)) == set(after) and vault.store.deks_on_disk() == [4]
    assert verify_ops.verify(vault).ok


def test_destroy_freeze_reindex_import_and_supersede(vault: Vault, vault_dir: Path,
                                                      model: Any) -> None:
    import io

    ids = populate(vault)
    embed_all(vault, model)
    n = len(stored(vault))
    admin.reindex(vault)  # derived data is pruned to the records, never dropped
    assert len(stored(vault)) == n
    admin.set_frozen(vault, True)
    with pytest.raises(Refused):  # a frozen user takes no vectors either
        embed_all(vault, model)
    admin.set_frozen(vault, False)
    remember.add(vault, "Lives in Porto now", "fact", supersedes=ids["fact"])
    assert ids["fact"] in stored(vault)  # superseded, not changed: its vector stays
    # Imported records are pending: vectors are never imported, they are made again.
    out = io.StringIO()
    portability.export(vault, out)
    bob = open_as("bob")
    portability.import_text(bob, out.getvalue())
    assert bob.vector_store(bob.state().key_version).count() == 0
    assert not bob.layout.vectors_dir.exists()
    admin.destroy(vault, "alice")
    assert not (vault_dir / "default" / "alice").exists()
    assert vault.vector_store(1).count() == 0  # nothing cached outlives the files


def test_compaction_moves_the_vector_out_of_the_active_set(vault: Vault, model: Any) -> None:
    from tests.test_lifecycle import add_archived

    populate(vault)
    made_ids = set(embed_all(vault, model))
    archived = add_archived(vault, "old1", ["An archived note about tulips"])
    embed_all(vault, model)
    held = stored(vault)
    a = archived[0].memory_id
    assert held[a]["flags"] & 1 and held[a]["file"].startswith("archive/")
    store = vault.vector_store(vault.state().key_version)
    query = held[a]["vector"]
    assert a not in {h.memory_id for h in store.search(query, 50)}
    assert store.search(query, 1, include_archive=True)[0].memory_id == a
    assert made_ids <= set(held)
    # A record already embedded, moved to the archive as compaction moves it: the store
    # follows the move (apply), with no embedding.
    from memvault.index.base import file_entries
    from memvault.model.location import session_file

    with vault.transaction() as tx:
        live, archive = session_file("s2"), session_file("s2", archived=True)
        records = tx.store.read_lines(live)
        for r in records:
            r.archived = True
        tx.index(file_entries(records, tx.append(archive, records)))
        tx.rewrite(live, [])
    moved = records[0].memory_id
    after = stored(vault)
    assert after[moved]["flags"] & 1 and after[moved]["file"] == archive
    assert after[moved]["q"] == held[moved]["q"]
    assert moved not in {h.memory_id for h in store.search(held[moved]["vector"], 50)}


def test_a_forget_on_a_user_without_vectors_does_not_import_numpy(vault: Vault) -> None:
    memory_id = remember.add(vault, "a note", "fact").record.memory_id
    code = (
        "import sys\n"
        "from memvault.config import resolve\n"
        "from memvault.ops import forget, remember\n"
        "from memvault.vault.vault import Vault\n"
        "v = Vault(resolve())\n"
        "remember.add(v, 'another note', 'fact')\n"
        f"forget.forget(v, forget.select(v, ['{memory_id}']))\n"
        "print('numpy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=os.environ.copy())
    assert out.stdout.strip() == "False"


# --- search -----------------------------------------------------------------------------


def unit(rng: np.random.Generator, n: int, dims: int) -> Any:
    m = rng.standard_normal((n, dims)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_search_finds_the_nearest_as_brute_force_does(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    n, dims = 6000, 256  # more than the re-rank's pool: the Hamming pass chooses
    assert n * 6 // 7 > vec.POOL_MIN
    rows = unit(rng, n, dims)
    model = ModelId("builtin", "m", dims)
    store = VectorStore(tmp_path / "v", b"k" * 32, 1, owner="o/u")
    ids = [f"id-{i:05d}" for i in range(n)]
    for lo in range(0, n, 1000):  # several segments, merged or not
        store.add(model, [VectorItem(ids[i], b"d" * 8, i % 7 == 0, rows[i], "f")
                          for i in range(lo, lo + 1000)])
    found = 0
    for q in unit(rng, 20, dims):
        truth = set(np.argsort(-(rows @ q))[:10].tolist())
        hits = store.search(q, 10, include_archive=True)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        found += len(truth & {int(h.memory_id[3:]) for h in hits})
    assert found / 200 >= 0.95
    # a stored vector finds itself, scored as its cosine
    hit = store.search(rows[1], 1)[0]
    assert hit.memory_id == ids[1] and hit.score > 0.999
    # archived originals only with include_archive; `allowed` limits to those ids
    assert store.search(rows[7], 1)[0].memory_id != ids[7]
    assert store.search(rows[7], 1, include_archive=True)[0].memory_id == ids[7]
    allowed = [ids[5], ids[9]]
    assert {h.memory_id for h in store.search(rows[1], 10, allowed=allowed)} == set(allowed)
    # another model's vectors are refused, in and out
    other = ModelId("openai", "text-embedding-3-small", dims)
    with pytest.raises(UsageError):
        store.add(other, [VectorItem("x", b"d" * 8, False, rows[0])])
    with pytest.raises(UsageError):
        store.search(rows[0], 3, model=other)
    with pytest.raises(UsageError):
        store.search(rows[0][:100], 3)


def test_a_write_opens_only_the_segments_that_hold_its_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(4)
    model = ModelId("builtin", "m", 16)
    store = VectorStore(tmp_path / "v", b"k" * 32, 1, owner="o/u")
    for part in range(3):  # three segments, none merged
        store.add(model, [VectorItem(f"id-{part}-{i}", text_digest(f"{part}-{i}"), False, r,
                                     "sessions/s.jsonl")
                          for i, r in enumerate(unit(rng, 300, 16))])
    opened: list[str] = []
    real = VectorStore._read_meta

    def read_meta(self: VectorStore, seg: Any) -> Any:
        opened.append(str(seg["name"]))
        return real(self, seg)

    vec._CACHE.forget(str(store.dir))  # a fresh process: nothing decrypted yet
    monkeypatch.setattr(VectorStore, "_read_meta", read_meta)
    moved = Record("id-1-5", "o", "u", "message", "1-5", "", archived=True)
    store.apply([Entry(moved, Location("archive/s.jsonl"))], [], ())
    store.apply([], ["id-2-7"], ())
    assert len(set(opened)) == 2  # of three segments: the one each write touched
    monkeypatch.undo()
    assert store.count() == 899 and "id-2-7" not in store.has()
    hit = store.search(stored_vector(store, "id-1-5"), 1, include_archive=True)[0]
    assert hit.memory_id == "id-1-5"
    assert not store.search(stored_vector(store, "id-1-5"), 1)[0].memory_id == "id-1-5"


def stored_vector(store: VectorStore, memory_id: str) -> Any:
    return dict(vec.stored_vectors(store))[memory_id]


def test_a_store_of_the_earlier_format_is_stale_and_pruned_to_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = ModelId("builtin", "m", 16)
    store = VectorStore(tmp_path / "v", b"k" * 32, 1, owner="o/u")
    store.add(model, [VectorItem("a", b"d" * 8, False, unit(np.random.default_rng(5), 1, 16)[0],
                                 "CLAUDE.md")])
    assert store.is_current()
    monkeypatch.setattr(vec, "FORMAT", 1)
    store._write_manifest(model, list(store._manifest()["segments"]))  # as 0.x wrote it
    monkeypatch.undo()
    vec._CACHE.forget(str(store.dir))
    assert not store.is_current() and store.count() == 0
    store.rebuild([])
    assert not list((tmp_path / "v").glob("*.seg")) and store.is_current()


def test_a_kill_at_any_write_leaves_the_old_or_the_new_store(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    rng = np.random.default_rng(4)
    rows = unit(rng, 400, 32)
    store = VectorStore(tmp_path / "v", b"k" * 32, 1, owner="o/u")
    store.add(MODEL, [VectorItem(f"a{i}", b"d" * 8, False, rows[i], "f") for i in range(200)])
    old = set(store.has())
    real_write, real_remove = fsio.atomic_write, fsio.remove
    operations = {
        "add": lambda s: s.add(MODEL, [VectorItem(f"b{i}", b"d" * 8, False, rows[200 + i],
                                                  "f") for i in range(200)]),
        "remove": lambda s: s.remove([f"a{i}" for i in range(0, 200, 3)]),
        "reseal": lambda s: s.reseal(b"j" * 32, 2),
    }
    for name, operation in operations.items():
        for n in range(1, 12):
            copy = tmp_path / f"{name}-{n}"
            copy.mkdir()
            for p in (tmp_path / "v").iterdir():
                (copy / p.name).write_bytes(p.read_bytes())
            s = VectorStore(copy, b"k" * 32, 1, owner="o/u")
            calls = 0

            def dies(*args: Any, _real: Any = None, **kw: Any) -> Any:
                nonlocal calls
                calls += 1
                if calls == n:  # noqa: B023
                    raise KeyboardInterrupt
                return _real(*args, **kw)

            monkeypatch.setattr(fsio, "atomic_write", lambda *a, **k: dies(*a, _real=real_write))
            monkeypatch.setattr(fsio, "remove", lambda *a, **k: dies(*a, _real=real_remove))
            try:
                operation(s)
            except KeyboardInterrupt:
                pass
            monkeypatch.setattr(fsio, "atomic_write", real_write)
            monkeypatch.setattr(fsio, "remove", real_remove)
            for key, epoch in ((b"k" * 32, 1), (b"j" * 32, 2)):
                reopened = VectorStore(copy, key, epoch, owner="o/u")
                if reopened.stored_epoch() == epoch:
                    assert reopened.verify() == []
                    held = set(reopened.has())
                    assert held in (old, old | {f"b{i}" for i in range(200)},
                                    old - {f"a{i}" for i in range(0, 200, 3)})
            if calls < n:
                break


# --- a dict model --------------------------------------------------------------------

OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.lists(st.integers(0, 40), min_size=1, max_size=30)),
    st.tuples(st.just("remove"), st.lists(st.integers(0, 40), max_size=10)),
    st.tuples(st.just("reseal"), st.just([])),
    st.tuples(st.just("clear"), st.just([]))), max_size=12)


@settings(max_examples=examples(60), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPS)
def test_add_remove_reseal_behave_as_a_dict(tmp_path_factory: pytest.TempPathFactory,
                                            ops: list[tuple[str, list[int]]]) -> None:
    rows = unit(np.random.default_rng(5), 41, 32)
    directory = tmp_path_factory.mktemp("v")
    store = VectorStore(directory, b"k" * 32, 1, owner="o/u")
    model: dict[str, bytes] = {}
    saved = (vec.SMALL, vec.MERGE_AT, vec.SEGMENT_MAX)
    vec.SMALL, vec.MERGE_AT, vec.SEGMENT_MAX = 20, 3, 25  # merges and splits, small
    try:
        epoch = 1
        for op, args in ops:
            if op == "add":
                version = os.urandom(8)
                store.add(MODEL, [VectorItem(f"id{i}", version, i % 5 == 0, rows[i], "f")
                                  for i in args])
                model.update({f"id{i}": version for i in args})
            elif op == "remove":
                wanted = {f"id{i}" for i in args}
                assert store.remove(wanted) == len(wanted & set(model))
                for i in wanted:
                    model.pop(i, None)
            elif op == "reseal":
                epoch += 1
                store.reseal(bytes([epoch]) * 32, epoch)
            else:
                store.clear()
                model.clear()
            assert store.has() == model
            assert store.count() == len(model)
        assert store.verify() == []
        for memory_id in model:
            i = int(memory_id[2:])
            hit = store.search(rows[i], 1, include_archive=True)[0]
            assert hit.memory_id == memory_id
        names = {p.name for p in directory.iterdir()}
        assert all(n in ("manifest", "stamp") or n.endswith(".seg") for n in names)
    finally:
        vec.SMALL, vec.MERGE_AT, vec.SEGMENT_MAX = saved
