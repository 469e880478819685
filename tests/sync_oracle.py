"""An independent reader of a folder sync remote, written from docs/sync.md alone (it
shares no code with mem): what the remote holds, for the sync tests and the crash
enumeration."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import zlib
from pathlib import Path
from typing import Any

import zstandard
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

MASTER = bytes(range(32))


def lp(*fields: str) -> bytes:
    return b"".join(len(f.encode()).to_bytes(4, "big") + f.encode() for f in fields)


def hkdf(key: bytes, *info: str) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=lp(*info)).derive(key)


def _keys(root: Path, key: bytes, org: str, user: str) -> tuple[str, dict[str, bytes]]:
    """A user's namespace on the remote, and its data keys unwrapped."""
    kek = hkdf(key, "mem/sync/kek/v1")
    ns = hmac.new(kek, lp("namespace", org, user), hashlib.sha256).digest()[:16].hex()
    keys = {}
    if not (root / ns / "k").is_dir():
        return ns, keys
    for f in sorted((root / ns / "k").glob("[!.]*")):  # not a temp file a kill left
        blob = f.read_bytes()
        assert blob[:5] == b"MEMR\x01"
        body = json.loads(AESGCM(kek).decrypt(blob[5:17], blob[17:], lp("mem/sync/key/v1",
                                                                          ns, f.name)))
        keys[f.name] = bytes.fromhex(body["key"])
    return ns, keys


def _open(blob: bytes, key: bytes, ns: str, kid: str, oid: str) -> bytes:
    """An operation's JSON. Format 1 is zlib, format 2 zstd; each has its own label in
    the AAD."""
    assert blob[:4] == b"MEMS" and blob[4] in (1, 2) and len(blob) % 4096 == 0
    plain = AESGCM(key).decrypt(blob[5:17], blob[17:], lp(f"mem/sync/op/v{blob[4]}", ns,
                                                           kid, oid))
    packed = plain[4:4 + int.from_bytes(plain[:4], "big")]
    return (zstandard.ZstdDecompressor().decompress(packed) if blob[4] == 2
            else zlib.decompress(packed))


def as_format_1(root: Path, path: Path, key: bytes = MASTER, org: str = "default",
                user: str = "alice") -> None:
    """Seal an operation again as mem's first object format did (zlib, the v1 label), as
    a machine with an earlier version would have written it."""
    ns, keys = _keys(root, key, org, user)
    kid, _, oid = path.name.partition("-")
    packed = zlib.compress(_open(path.read_bytes(), keys[kid], ns, kid, oid), 3)
    framed = len(packed).to_bytes(4, "big") + packed
    plain = framed + bytes(-(-(len(framed) + 33) // 4096) * 4096 - 33 - len(framed))
    nonce = os.urandom(12)
    path.write_bytes(b"MEMS\x01" + nonce + AESGCM(keys[kid]).encrypt(
        nonce, plain, lp("mem/sync/op/v1", ns, kid, oid)))


def read_remote(root: Path, key: bytes = MASTER, org: str = "default",
                user: str = "alice") -> dict[str, Any]:
    """Every operation on a folder remote, opened from the format alone: the live record
    ids, and every id any object names."""
    ns, keys = _keys(root, key, org, user)
    if not (root / ns / "k").is_dir():
        return {"records": {}, "tombs": set(), "named": set()}
    named: set[str] = set()
    records: dict[str, str] = {}
    tombs: set[str] = set()
    for f in sorted((root / ns / "o").glob("[!.]*")):
        kid, _, oid = f.name.partition("-")
        body = json.loads(_open(f.read_bytes(), keys[kid], ns, kid, oid))
        if body["kind"] == "add":
            for item in body["records"]:
                records[item["r"]["memory_id"]] = item["r"]["content"]
        elif body["kind"] == "forget":
            tombs.update(body["ids"])
        named.update(body.get("ids", []))
    return {"records": records, "tombs": tombs, "named": named | set(records)}
