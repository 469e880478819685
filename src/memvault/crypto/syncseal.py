"""The byte formats of a sync remote (docs/sync.md): the sync key-encryption key, the
opaque namespace of a user, wrapped remote data keys, and sealed, padded operations.

Nothing here knows what an operation means: it seals and opens JSON.
"""

from __future__ import annotations

import functools
import json
import os
import zlib
from typing import Any

from memvault.crypto import envelope
from memvault.model.records import MAX_CONTENT

OBJECT_MAGIC = b"MEMS"
KEY_MAGIC = b"MEMR"
FORMAT = 1  # of keys and directory entries
# Operations: format 2 is compressed with zstd, format 1 (still read) with zlib. Each
# has its own AAD label, so an object's format byte cannot be changed undetected.
OBJECT_FORMAT = 2
OBJECT_TAGS = {1: "mem/sync/op/v1", 2: "mem/sync/op/v2"}
TAG_KEY = "mem/sync/key/v1"
TAG_DIR = "mem/sync/dir/v1"
DIR_MAGIC = b"MEMU"
PAD = 4096  # sizes are rounded up to this, so a small forget looks like a small add
PAD_LARGE = 1 << 16  # past this, to the next eighth of the next power of two
# zstd's level. On 100,000 records' JSON (64 MB): level 1 gives 12.9 MB in 0.13 s, 3
# gives 12.3 MB in 0.25 s, where zlib's level 3 gave 14.8 MB in 0.65 s (a first sync
# compresses every record).
LEVEL = 1

# The largest each kind of remote object can be: a remote is read only up to it, so a
# file of any size put in a sync folder (or a bucket) costs at most that much.
PAGE = 2000  # records per add object (ops/sync.py pages by it)
# A record's JSON beside its content (ids, times, tags, its role, a summary's span).
RECORD_FIELDS = 4096
# A key object: magic, format, nonce, the JSON of 32 bytes in hex and of a time as
# now_iso writes it (27 characters), the tag.
KEY_SIZE = 5 + envelope.NONCE_LEN + len(json.dumps({"key": "00" * 32, "at": "0" * 27})) + 16
ENTRY_SIZE = PAD  # a directory entry: one PAD whatever the names (of at most 64 characters)
HEAD = 5  # magic and format: how an operation object begins


class SyncAuthError(Exception):
    """An object or key that does not open: another key, or damaged."""


class SyncForeignError(SyncAuthError):
    """A directory entry sealed under another master key (its key check differs)."""


def sync_kek(master: bytes) -> bytes:
    """The key that wraps remote data keys: its own label, unrelated to the local KEKs."""
    return envelope.hkdf(master, "mem/sync/kek/v1")


def namespace(kek: bytes, org: str, user: str) -> str:
    """The opaque name under which one user's objects live (no name, no org in it)."""
    return envelope.keyed_hash(kek, envelope.lp("namespace", org, user))


def new_key_id() -> str:
    return os.urandom(8).hex()


def new_object_id() -> str:
    return os.urandom(16).hex()


def wrap_key(kek: bytes, ns: str, kid: str, key: bytes, at: str) -> bytes:
    body = json.dumps({"key": key.hex(), "at": at}).encode()
    nonce, ct = envelope.seal_raw(kek, body, envelope.lp(TAG_KEY, ns, kid))
    return KEY_MAGIC + bytes([FORMAT]) + nonce + ct


def unwrap_key(kek: bytes, ns: str, kid: str, blob: bytes) -> tuple[bytes, str]:
    """(the data key, when it was made); SyncAuthError if it is not ours or damaged."""
    if blob[:4] != KEY_MAGIC or blob[4:5] != bytes([FORMAT]):
        raise SyncAuthError("not a mem sync key")
    nonce, ct = blob[5:5 + envelope.NONCE_LEN], blob[5 + envelope.NONCE_LEN:]
    try:
        body = json.loads(envelope.open_raw(kek, nonce, ct, envelope.lp(TAG_KEY, ns, kid)))
        return bytes.fromhex(body["key"]), str(body["at"])
    except envelope.AuthError as exc:
        raise SyncAuthError("the key does not open under this master key") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise SyncAuthError("a malformed key") from exc


def padded_size(size: int) -> int:
    if size <= PAD_LARGE:
        return -(-size // PAD) * PAD
    step = (1 << (size - 1).bit_length()) // 8
    return -(-size // step) * step


def _compressed_bound(size: int) -> int:
    """The most zstd (ZSTD_compressBound) or zlib gives for `size` bytes: an input it
    cannot compress is stored in raw blocks, a few bytes per block more."""
    return size + (size >> 8) + (((128 << 10) - size) >> 11 if size < 128 << 10 else 0)


# An operation object: a page of PAGE records at the model's limits (MAX_CONTENT of
# content and RECORD_FIELDS of other fields each: 508 MiB of JSON; what JSON escapes in
# stored text, quotes, backslashes, newlines and tabs, compresses back), compressed,
# framed, sealed and padded: 512 MiB. Archive, forget and prefs objects name ids and
# settings only, and stay far below it.
OBJECT_MAX = padded_size(_compressed_bound(PAGE * (MAX_CONTENT + RECORD_FIELDS)) + 4
                         + 5 + envelope.NONCE_LEN + 16)


def kind(name: str) -> str | None:
    """What a remote name holds by the layout (docs/sync.md): "entry" (u/<oid>), "key"
    (<ns>/k/<kid>), "op" (<ns>/o/<kid>-<oid>), or None for a name of none of these."""
    parts = name.split("/")
    if len(parts) == 2 and parts[0] == "u":
        return "entry"
    if len(parts) == 3 and parts[1] in ("k", "o"):
        return "key" if parts[1] == "k" else "op"
    return None


def max_size(name: str) -> int:
    """The largest the object of this name can be; OBJECT_MAX for a name of no kind."""
    return {"entry": ENTRY_SIZE, "key": KEY_SIZE}.get(kind(name) or "", OBJECT_MAX)


def admits(name: str, size: int, head: bytes) -> bool:
    """Whether an object of `size` bytes that begins with `head` (its first HEAD bytes)
    can be what its name holds: within its kind's bound, and an operation that begins
    as one does (a large file that is not one is never read; one cut short still is,
    and its opener says so). A key or an entry within its bound is left to its opener
    (one of another master key is refused there, not skipped)."""
    if size > max_size(name):
        return False
    return kind(name) != "op" or of_known_format(head)


def seal_object(key: bytes, ns: str, kid: str, oid: str, body: dict[str, Any]) -> bytes:
    return seal_json(key, ns, kid, oid, json.dumps(body, separators=(",", ":")).encode())


def seal_json(key: bytes, ns: str, kid: str, oid: str, raw: bytes) -> bytes:
    """An operation's JSON, compressed, length-prefixed and padded (the whole object is a
    padded size), sealed in one AEAD call with its format and full name as AAD."""
    import zstandard  # releases the GIL: pages are sealed on the upload threads

    packed = zstandard.ZstdCompressor(level=LEVEL).compress(raw)  # one per call: not shared
    framed = len(packed).to_bytes(4, "big") + packed
    overhead = 5 + envelope.NONCE_LEN + 16  # magic, format, nonce; the tag
    plain = framed + bytes(padded_size(len(framed) + overhead) - len(framed) - overhead)
    nonce, ct = envelope.seal_raw(key, plain, envelope.lp(OBJECT_TAGS[OBJECT_FORMAT], ns,
                                                          kid, oid))
    return OBJECT_MAGIC + bytes([OBJECT_FORMAT]) + nonce + ct


def of_known_format(blob: bytes) -> bool:
    """Whether a blob begins as an object of a format this version reads: one of these
    that does not open under its key was cut short or altered (an object of a later
    format is left to the versions that read it)."""
    return blob[:4] == OBJECT_MAGIC and len(blob) > 4 and blob[4] in OBJECT_TAGS


def open_object(key: bytes, ns: str, kid: str, oid: str, blob: bytes) -> dict[str, Any]:
    import orjson  # the records of a first pull: several times the stdlib's speed
    import zstandard

    fmt = blob[4] if len(blob) > 4 else 0
    if blob[:4] != OBJECT_MAGIC or fmt not in OBJECT_TAGS:
        raise SyncAuthError("not a mem sync object")
    nonce, ct = blob[5:5 + envelope.NONCE_LEN], blob[5 + envelope.NONCE_LEN:]
    try:
        plain = envelope.open_raw(key, nonce, ct, envelope.lp(OBJECT_TAGS[fmt], ns, kid, oid))
        packed = plain[4:4 + int.from_bytes(plain[:4], "big")]
        # Sealed by a holder of the key: the size zstd's frame declares is trusted.
        body = orjson.loads(zstandard.ZstdDecompressor().decompress(packed) if fmt == 2
                            else zlib.decompress(packed))
    except envelope.AuthError as exc:
        raise SyncAuthError("the object does not open") from exc
    except (ValueError, zlib.error, zstandard.ZstdError) as exc:
        raise SyncAuthError("a malformed object") from exc
    if not isinstance(body, dict):
        raise SyncAuthError("a malformed object")
    return body


@functools.lru_cache(maxsize=8)
def _pref_key(kek: bytes) -> bytes:
    return envelope.hkdf(kek, "mem/sync/pref/v1")


def pref_tags(kek: bytes, key: str, value: str | None) -> tuple[str, str]:
    """Keyed tags of a preference's key and of its value (None: unset): the cache names
    a key only by its tag, and the value's tag breaks a tie of times the same way on
    every machine."""
    k = _pref_key(kek)
    what = envelope.lp("unset", key) if value is None else envelope.lp("value", key, value)
    return envelope.keyed_hash(k, envelope.lp("key", key)), envelope.keyed_hash(k, what)


def dir_key(master: bytes) -> bytes:
    """The key of the remote's directory of users: its own label, from the master key."""
    return envelope.hkdf(master, TAG_DIR)


def dir_key_check(key: bytes) -> bytes:
    """In clear at the head of an entry: tells an entry of another master key (refused,
    as its keys are) from one damaged here (skipped). The same on every entry."""
    return bytes.fromhex(envelope.keyed_hash(key, envelope.lp("check"), 8))


def seal_entry(key: bytes, oid: str, org: str, user: str) -> bytes:
    """A directory entry: org and user, sealed and padded to one PAD (its size says
    nothing of the names), its name bound in as AAD."""
    raw = json.dumps({"org": org, "user": user}, separators=(",", ":")).encode()
    framed = len(raw).to_bytes(4, "big") + raw
    overhead = 5 + 8 + envelope.NONCE_LEN + 16  # magic, format, check, nonce; the tag
    plain = framed + bytes(padded_size(len(framed) + overhead) - len(framed) - overhead)
    nonce, ct = envelope.seal_raw(key, plain, envelope.lp(TAG_DIR, oid))
    return DIR_MAGIC + bytes([FORMAT]) + dir_key_check(key) + nonce + ct


def open_entry(key: bytes, oid: str, blob: bytes) -> tuple[str, str]:
    """(org, user) of a directory entry. SyncForeignError when it was sealed under
    another master key; SyncAuthError when it is damaged."""
    if blob[:4] != DIR_MAGIC or blob[4:5] != bytes([FORMAT]):
        raise SyncAuthError("not a mem directory entry")
    if blob[5:13] != dir_key_check(key):
        raise SyncForeignError("an entry of another master key")
    nonce, ct = blob[13:13 + envelope.NONCE_LEN], blob[13 + envelope.NONCE_LEN:]
    try:
        plain = envelope.open_raw(key, nonce, ct, envelope.lp(TAG_DIR, oid))
        body = json.loads(plain[4:4 + int.from_bytes(plain[:4], "big")])
        return str(body["org"]), str(body["user"])
    except envelope.AuthError as exc:
        raise SyncAuthError("the entry does not open") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise SyncAuthError("a malformed entry") from exc


def cache_mac(kek: bytes, body: bytes) -> str:
    """The MAC of this machine's sync cache: a cache edited by hand must not make a sync
    push forgets of records it never saw go."""
    return envelope.keyed_hash(envelope.hkdf(kek, "mem/sync/cache/v1"), body, 32)


def cache_macer(kek: bytes) -> Any:
    """cache_mac fed part by part (an HMAC: `.update()`, then `.hexdigest()`), for a
    cache written and read as a stream."""
    import hashlib
    import hmac

    return hmac.new(envelope.hkdf(kek, "mem/sync/cache/v1"), digestmod=hashlib.sha256)
