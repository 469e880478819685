"""An independent reader of a folder sync remote, written from docs/sync.md alone (it
shares no code with mem): what the remote holds, for the sync tests and the crash
enumeration."""

from __future__ import annotations

import hashlib
import hmac
import json
import zlib
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

MASTER = bytes(range(32))


def lp(*fields: str) -> bytes:
    return b"".join(len(f.encode()).to_bytes(4, "big") + f.encode() for f in fields)


def hkdf(key: bytes, *info: str) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=lp(*info)).derive(key)


def read_remote(root: Path, key: bytes = MASTER, org: str = "default",
                user: str = "alice") -> dict[str, Any]:
    """Every operation on a folder remote, opened from the format alone: the live record
    ids, and every id any object names."""
    kek = hkdf(key, "mem/sync/kek/v1")
    ns = hmac.new(kek, lp("namespace", org, user), hashlib.sha256).digest()[:16].hex()
    keys = {}
    if not (root / ns / "k").is_dir():
        return {"records": {}, "tombs": set(), "named": set()}
    for f in sorted((root / ns / "k").glob("[!.]*")):  # not a temp file a kill left
        blob = f.read_bytes()
        assert blob[:5] == b"MEMR\x01"
        body = json.loads(AESGCM(kek).decrypt(blob[5:17], blob[17:], lp("mem/sync/key/v1",
                                                                          ns, f.name)))
        keys[f.name] = bytes.fromhex(body["key"])
    named: set[str] = set()
    records: dict[str, str] = {}
    tombs: set[str] = set()
    for f in sorted((root / ns / "o").glob("[!.]*")):
        kid, _, oid = f.name.partition("-")
        blob = f.read_bytes()
        assert blob[:5] == b"MEMS\x01" and len(blob) % 4096 == 0
        plain = AESGCM(keys[kid]).decrypt(blob[5:17], blob[17:],
                                          lp("mem/sync/op/v1", ns, kid, oid))
        body = json.loads(zlib.decompress(plain[4:4 + int.from_bytes(plain[:4], "big")]))
        if body["kind"] == "add":
            for item in body["records"]:
                records[item["r"]["memory_id"]] = item["r"]["content"]
        elif body["kind"] == "forget":
            tombs.update(body["ids"])
        named.update(body.get("ids", []))
    return {"records": records, "tombs": tombs, "named": named | set(records)}
