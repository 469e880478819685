"""An independent reader of one user's vault, written from docs/vault-format.md alone.

It unwraps every data key it finds (and any it is given: the keys a backup taken earlier
holds), opens every envelope in the user's folder, the temp files a killed writer left
included, and looks the keyed terms of a word up in every search index there (`index`,
and the `index.new-*` / `index.old-*` a killed rebuild leaves). It shares no code with
mem's reading: only AES-GCM and HMAC from their libraries, and Tantivy's reader for the
index. So a fault in mem's reader cannot hide a fault in its writer.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TMP_PREFIX = ".tmp-"  # `.tmp-<name>.<pid>.<monotonic_ns>`, beside the file it replaces
DOCS = ("CLAUDE.md", "preferences.json")


def lp(*fields: str | bytes) -> bytes:
    out = b""
    for item in fields:
        raw = item.encode() if isinstance(item, str) else item
        out += len(raw).to_bytes(4, "big") + raw
    return out


def hkdf(ikm: bytes, *info: str) -> bytes:
    """HKDF-SHA256, no salt, 32 bytes: a single expand block."""
    prk = hmac.new(b"\0" * 32, ikm, hashlib.sha256).digest()
    return hmac.new(prk, lp(*info) + b"\x01", hashlib.sha256).digest()


def keyed_hash(key: bytes, data: bytes, size: int = 16) -> str:
    return hmac.new(key, data, hashlib.sha256).digest()[:size].hex()


def _open(key: bytes, nonce: bytes, sealed: bytes, aad: bytes) -> bytes | None:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    try:
        return AESGCM(key).decrypt(nonce, sealed, aad)
    except (InvalidTag, ValueError):
        return None


def unwrap(master: bytes, org: str, user: str, epoch: int, blob: bytes) -> bytes | None:
    """keys/<epoch>.dek: MEMK, version 1, epoch, nonce, sealed DEK (69 bytes)."""
    if len(blob) != 69 or blob[:5] != b"MEMK\x01" or int.from_bytes(blob[5:9], "big") != epoch:
        return None
    kek = hkdf(master, "mem/v1/kek", org, user, str(epoch))
    return _open(kek, blob[9:21], blob[21:], lp("mem/dek/v1", org, user, str(epoch)))


def target_of(path: Path) -> str:
    """The file a temp file was to replace (its name without prefix, pid and time)."""
    name = path.name
    if name.startswith(TMP_PREFIX):
        name = name[len(TMP_PREFIX):].rsplit(".", 2)[0]
    return name


@dataclass
class Found:
    """What the oracle read from one user's folder."""

    places: dict[str, list[str]] = field(default_factory=dict)  # memory id → live files
    contents: dict[str, str] = field(default_factory=dict)  # memory id → content
    types: dict[str, str] = field(default_factory=dict)  # memory id → record type
    settings: dict[str, str] = field(default_factory=dict)  # pref key → value
    texts: list[str] = field(default_factory=list)  # every plaintext, temp files included
    deks: dict[int, bytes] = field(default_factory=dict)  # every key file that unwraps
    sealed_under: set[int] = field(default_factory=set)  # epochs of the live envelopes
    unopened: list[str] = field(default_factory=list)  # live envelopes no key opens
    raw: list[bytes] = field(default_factory=list)  # every file's bytes, as on disk

    def count(self, word: str, but: frozenset[str] = frozenset()) -> int:
        """How many live records hold the word (but records of the types in `but`: a
        compaction summary repeats the words of what it summarises)."""
        return sum(len(self.places[i]) for i, text in self.contents.items()
                   if word in text and self.types.get(i) not in but)

    def anywhere(self, word: str) -> bool:
        """Whether the word is in any plaintext any known key opens, or in clear."""
        raw = word.encode()
        return any(word in t for t in self.texts) or any(raw in b for b in self.raw)


def read_user(root: Path, master: bytes, org: str, user: str,
              known: dict[int, bytes] | None = None) -> Found:
    found = Found()
    if not root.is_dir():
        return found
    keys = root / "keys"
    for path in sorted(keys.iterdir()) if keys.is_dir() else []:
        stem = target_of(path).removesuffix(".dek")
        if stem.isdigit():
            dek = unwrap(master, org, user, int(stem), path.read_bytes())
            if dek is not None:
                found.deks[int(stem)] = dek
    deks = {**(known or {}), **found.deks}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root)
        found.raw.append(path.read_bytes())
        if rel.parts[0].startswith("index") or rel.parts[0] == "keys" or \
                rel.name in ("state.json", "audit.jsonl"):
            continue
        live = not path.name.startswith(TMP_PREFIX)
        relpath = "/".join([*rel.parts[:-1], target_of(path)])
        if relpath in DOCS:
            _read_doc(found, path.read_bytes(), relpath, org, user, deks, live)
        elif relpath.endswith(".jsonl"):
            _read_lines(found, path.read_bytes(), relpath, org, user, deks, live)
    return found


def _record_key(deks: dict[int, bytes], epoch: int) -> bytes | None:
    dek = deks.get(epoch)
    return hkdf(dek, "mem/v1/record") if dek is not None else None


def _read_doc(found: Found, blob: bytes, relpath: str, org: str, user: str,
              deks: dict[int, bytes], live: bool) -> None:
    if len(blob) < 37 or blob[:5] != b"MEMF\x01":
        if live:
            found.unopened.append(relpath)
        return
    epoch = int.from_bytes(blob[5:9], "big")
    key = _record_key(deks, epoch)
    plain = key and _open(key, blob[9:21], blob[21:],
                          lp("mem/file/v1", org, user, relpath, "", "", str(epoch)))
    if not plain:
        if live:
            found.unopened.append(relpath)
        return
    found.texts.append(plain.decode())
    if live:
        found.sealed_under.add(epoch)
        doc = json.loads(plain)
        for record in doc.get("records", []):
            _place(found, record, relpath)
        for name, entry in (doc.get("settings") or {}).items():
            found.settings[name] = entry["value"]


def _read_lines(found: Found, blob: bytes, relpath: str, org: str, user: str,
                deks: dict[int, bytes], live: bool) -> None:
    lines = blob.split(b"\n")
    for n, raw in enumerate(lines, 1):
        if not raw:
            continue
        torn = n == len(lines)  # no final newline: readers take it only if it opens
        try:
            line = json.loads(raw)
            nonce = base64.b64decode(line["n"], validate=True)
            sealed = base64.b64decode(line["ct"], validate=True)
            epoch, memory_id, ts = int(line["kv"]), str(line["id"]), str(line["ts"])
        except (ValueError, KeyError, TypeError, binascii.Error):
            if live and not torn:
                found.unopened.append(f"{relpath}:{n}")
            continue
        key = _record_key(deks, epoch)
        plain = key and _open(key, nonce, sealed,
                              lp("mem/line/v1", org, user, relpath, memory_id, ts, str(epoch)))
        if not plain:
            if live and not torn:
                found.unopened.append(f"{relpath}:{n}")
            continue
        found.texts.append(plain.decode())
        if live:
            found.sealed_under.add(epoch)
            _place(found, json.loads(plain), relpath)


def _place(found: Found, record: dict[str, Any], relpath: str) -> None:
    memory_id = record["memory_id"]
    found.places.setdefault(memory_id, []).append(relpath)
    found.contents[memory_id] = record["content"]
    found.types[memory_id] = str(record.get("type"))


# --- the search index -----------------------------------------------------------------------


def index_dirs(root: Path) -> list[Path]:
    """The index and what a killed rebuild left beside it."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and
                  (p.name == "index" or p.name.startswith(("index.new-", "index.old-"))))


def term_counts(root: Path, word: str, deks: dict[int, bytes]) -> dict[str, int]:
    """For each index folder, how many documents (deleted ones included: Tantivy keeps a
    deleted document's terms until a merge) hold the word's keyed token, under any of
    these data keys. A folder Tantivy cannot open counts -1."""
    import tantivy

    counts: dict[str, int] = {}
    tokens = [keyed_hash(hkdf(dek, "mem/v1/index"), word.encode()) for dek in deks.values()]
    for folder in index_dirs(root):
        # A copy: opening an index may write Tantivy's lock files into it, and its
        # threads may still do so while the copy is removed (hence ignore the errors).
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as scratch:
            copy = Path(scratch) / "index"
            shutil.copytree(folder, copy)
            try:
                index = tantivy.Index.open(str(copy))
                searcher = index.searcher()
                counts[folder.name] = sum(int(searcher.doc_freq(name, token))
                                          for token in tokens for name in ("body", "ctx"))
                del searcher, index
            except (ValueError, OSError):
                counts[folder.name] = -1
    return counts


def index_is_current(root: Path) -> bool:
    return (root / "index" / "stamp").exists()


def key_version(root: Path) -> int | None:
    """state.json is clear JSON: {"state": {..., "key_version": N}, "mac": ...}."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        return int(json.loads((root / "state.json").read_text())["state"]["key_version"])
    return None


def org_entries(vault: Path, org: str, op: str) -> list[dict[str, Any]]:
    path = vault / org / "audit.jsonl"
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if entry.get("op") == op:
                entries.append(entry)
    return entries
