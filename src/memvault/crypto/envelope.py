"""Byte formats and key derivations: the AEAD envelopes of docs/vault-format.md (format 1).

Pure functions over bytes. Reading and writing files is storage's job; what each key
is derived from is `keys.py`'s. Nothing outside this package touches AES-GCM. Heavy
imports (cryptography) stay inside the functions.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import os
import re
import struct
from binascii import b2a_base64
from collections.abc import Callable, Container
from typing import Any

from memvault.errors import DataError

FORMAT_VERSION = 1
NONCE_LEN = 12
KEY_LEN = 32
FILE_MAGIC = b"MEMF"
DEK_MAGIC = b"MEMK"
_HEADER = struct.Struct(">4sBI")  # magic, format version, key version / epoch

TAG_FILE = "mem/file/v1"
TAG_LINE = "mem/line/v1"
TAG_DEK = "mem/dek/v1"


class AuthError(Exception):
    """An envelope failed to open: wrong key, tampered or moved. Callers name the file."""


def lp(*fields: str | bytes) -> bytes:
    """Length-prefixed encoding: each field as a 4-byte big-endian length, then its bytes.

    Plain concatenation is ambiguous ("ab"+"c" == "a"+"bc"); this is not.
    """
    out = bytearray()
    for field in fields:
        raw = field.encode() if isinstance(field, str) else field
        out += len(raw).to_bytes(4, "big") + raw
    return bytes(out)


def hkdf(ikm: bytes, *info: str) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=KEY_LEN, salt=None, info=lp(*info)).derive(ikm)


def keyed_hash(key: bytes, data: bytes, size: int = 16) -> str:
    """HMAC-SHA256 truncated to `size` bytes, hex: the only hash of content allowed in clear."""
    return hmac.new(key, data, hashlib.sha256).digest()[:size].hex()


def content_hash(text: str) -> str:
    """The record field `content_hash`; it lives only inside envelopes."""
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def key_check_value(master: bytes) -> str:
    """A value stored in vault.json that tells a wrong master key from a corrupt file."""
    return hkdf(master, "mem/v1/check")[:16].hex()


_AEADS: dict[bytes, Any] = {}


def _aead(key: bytes) -> Any:
    """One AESGCM object per key: building it costs more than sealing a short line."""
    aead = _AEADS.get(key)
    if aead is None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if len(_AEADS) >= 64:
            _AEADS.clear()
        aead = _AEADS[key] = AESGCM(key)
    return aead


def _seal(key: bytes, plaintext: bytes, aad: bytes, nonce: bytes | None) -> tuple[bytes, bytes]:
    nonce = nonce if nonce is not None else os.urandom(NONCE_LEN)
    return nonce, _aead(key).encrypt(nonce, plaintext, aad)


def seal_raw(key: bytes, plaintext: bytes, aad: bytes) -> tuple[bytes, bytes]:
    """AES-256-GCM under a fresh random nonce: (nonce, ciphertext with tag)."""
    return _seal(key, plaintext, aad, None)


def token_sealer(key: bytes) -> Callable[[bytes, bytes], bytes]:
    """seal_raw under one key, its nonce and ciphertext joined, as a function of the
    plaintext and the AAD: the AES-GCM object looked up once (an index seals a record's
    location for each document it builds)."""
    encrypt, urandom = _aead(key).encrypt, os.urandom

    def seal(plaintext: bytes, aad: bytes) -> bytes:
        nonce = urandom(NONCE_LEN)
        sealed: bytes = encrypt(nonce, plaintext, aad)
        return nonce + sealed

    return seal


def open_raw(key: bytes, nonce: bytes, ciphertext: bytes | memoryview, aad: bytes) -> bytes:
    return _open(key, nonce, ciphertext, aad)


def seal_token(key: bytes, plaintext: bytes, aad: bytes) -> str:
    """A small sealed value as text (the index's record locations): nonce and ciphertext,
    URL-safe base64. `aad` binds it to what it belongs to."""
    nonce, ct = _seal(key, plaintext, aad, None)
    return base64.urlsafe_b64encode(nonce + ct).decode()


def open_token(key: bytes, token: str, aad: bytes) -> bytes:
    """AuthError when the token does not open under this key and `aad`."""
    try:
        raw = base64.urlsafe_b64decode(token)
    except (ValueError, TypeError) as exc:
        raise AuthError("bad base64") from exc
    return _open(key, raw[:NONCE_LEN], raw[NONCE_LEN:], aad)


def _open(key: bytes, nonce: bytes, ciphertext: bytes | memoryview, aad: bytes) -> bytes:
    from cryptography.exceptions import InvalidTag

    try:
        plain: bytes = _aead(key).decrypt(nonce, ciphertext, aad)
        return plain
    except (InvalidTag, ValueError) as exc:
        raise AuthError("authentication failed") from exc


# --- whole-file envelope (CLAUDE.md, preferences.json) -------------------------------


def file_aad(org: str, user: str, relpath: str, key_version: int) -> bytes:
    return lp(TAG_FILE, org, user, relpath, "", "", str(key_version))


def seal_file(
    key: bytes, key_version: int, org: str, user: str, relpath: str, plaintext: bytes,
    nonce: bytes | None = None,
) -> bytes:
    header = _HEADER.pack(FILE_MAGIC, FORMAT_VERSION, key_version)
    nonce, ct = _seal(key, plaintext, file_aad(org, user, relpath, key_version), nonce)
    return header + nonce + ct


def file_key_version(blob: bytes) -> int:
    """Read the key version from a whole-file envelope header (DataError when malformed)."""
    if len(blob) < _HEADER.size + NONCE_LEN + 16:
        raise DataError("truncated envelope")
    magic, version, key_version = _HEADER.unpack_from(blob)
    if magic != FILE_MAGIC:
        raise DataError("not a mem envelope")
    if version != FORMAT_VERSION:
        raise DataError(f"unsupported envelope format {version}")
    return int(key_version)


def open_file(key: bytes, org: str, user: str, relpath: str, blob: bytes) -> bytes:
    key_version = file_key_version(blob)
    start = _HEADER.size
    nonce, ct = blob[start : start + NONCE_LEN], blob[start + NONCE_LEN :]
    return _open(key, nonce, ct, file_aad(org, user, relpath, key_version))


# --- line envelope (sessions/*.jsonl, archive/*.jsonl) --------------------------------


@functools.lru_cache(maxsize=256)
def _line_prefix(org: str, user: str, relpath: str) -> bytes:
    return lp(TAG_LINE, org, user, relpath)


def line_aad(org: str, user: str, relpath: str, memory_id: str, ts: str, key_version: int) -> bytes:
    # lp() of several fields is the concatenation of each field's lp(): the fields shared
    # by every line of a file are encoded once.
    return _line_prefix(org, user, relpath) + lp(memory_id, ts, str(key_version))


def seal_line(
    key: bytes, key_version: int, org: str, user: str, relpath: str,
    memory_id: str, ts: str, plaintext: bytes, nonce: bytes | None = None,
) -> bytes:
    # The AAD as line_aad makes it, and the bytes json.dumps(separators=(",", ":"))
    # writes for these keys in this order, each formatted directly: an ingest seals a
    # line per message, a pull one per record it takes.
    id_b, ts_b, kv_b = memory_id.encode(), ts.encode(), b"%d" % key_version
    aad = b"".join((_line_prefix(org, user, relpath), len(id_b).to_bytes(4, "big"), id_b,
                    len(ts_b).to_bytes(4, "big"), ts_b, len(kv_b).to_bytes(4, "big"), kv_b))
    if nonce is None:
        nonce = os.urandom(NONCE_LEN)
    ct = _aead(key).encrypt(nonce, plaintext, aad)
    return b'{"v":%d,"kv":%b,"id":%b,"ts":%b,"n":"%b","ct":"%b"}\n' % (
        FORMAT_VERSION, kv_b, _json_literal(id_b, memory_id), _json_literal(ts_b, ts),
        b2a_base64(nonce, newline=False), b2a_base64(ct, newline=False))


_PLAIN_BYTES = re.compile(rb"[A-Za-z0-9:._+-]*")


def _json_literal(raw: bytes, value: str) -> bytes:
    """`value` as a JSON string, as bytes (`raw`: the value encoded), quoted as it is
    where no character needs escaping (an id, a time), else as json.dumps writes it."""
    return b'"%b"' % raw if _PLAIN_BYTES.fullmatch(raw) else json.dumps(value).encode()


# The line seal_line writes, field for field: read without a JSON parse (a sync or a
# scan reads every header). Anything else (escapes, another order) takes json.loads.
# The ciphertext, most of a line, is checked by deleting its alphabet (a C loop).
_HEAD = re.compile(rb'\{"v":1,"kv":(0|[1-9][0-9]{0,17}),"id":"([A-Za-z0-9:._+-]*)",'
                   rb'"ts":"([A-Za-z0-9:._+-]*)","n":"([A-Za-z0-9+/=]*)","ct":"')
_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


def _fast_line(raw: bytes) -> tuple[bytes, bytes, bytes, bytes, bytes] | None:
    """(kv, id, ts, nonce, ct) of a line exactly as seal_line writes one, else None."""
    m = _HEAD.match(raw)
    if m is None or not raw.endswith(b'"}'):
        return None
    ct = raw[m.end():-2]
    if ct.translate(None, _B64):
        return None
    kv, memory_id, ts, nonce = m.groups()
    return kv, memory_id, ts, nonce, ct


def line_id(raw: bytes) -> str:
    """The record id of a line envelope (parse_line's, without the other fields)."""
    fast = _fast_line(raw)
    return fast[1].decode() if fast is not None else str(parse_line(raw)["id"])


def parse_line(raw: bytes) -> dict[str, object]:
    """The clear fields of a line envelope; DataError when the line is not one."""
    fast = _fast_line(raw)
    if fast is not None:
        kv, memory_id, ts, nonce, ct = fast
        return {"v": FORMAT_VERSION, "kv": int(kv), "id": memory_id.decode(),
                "ts": ts.decode(), "n": nonce.decode(), "ct": ct.decode()}
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DataError("not a JSON line") from exc
    if not isinstance(doc, dict) or doc.get("v") != FORMAT_VERSION:
        raise DataError("not a format-1 line envelope")
    for field, kind in (("kv", int), ("id", str), ("ts", str), ("n", str), ("ct", str)):
        if not isinstance(doc.get(field), kind):
            raise DataError(f"line envelope field {field!r} missing or malformed")
    return doc


def open_line(key: bytes, org: str, user: str, relpath: str, doc: dict[str, object]) -> bytes:
    try:
        nonce = base64.b64decode(str(doc["n"]), validate=True)
        ct = base64.b64decode(str(doc["ct"]), validate=True)
    except ValueError as exc:
        raise AuthError("bad base64") from exc
    # b64decode ignores the unused bits of the last character, so "QUJ=" opens like "QUI=":
    # only the canonical encoding is accepted, or a flipped byte there would go unnoticed.
    canonical = base64.b64encode(nonce).decode(), base64.b64encode(ct).decode()
    if canonical != (doc["n"], doc["ct"]):
        raise AuthError("non-canonical base64")
    if len(nonce) != NONCE_LEN:
        raise AuthError("bad nonce length")
    kv = doc["kv"]
    assert isinstance(kv, int)
    aad = line_aad(org, user, relpath, str(doc["id"]), str(doc["ts"]), kv)
    return _open(key, nonce, ct, aad)


def open_lines(key_for: Callable[[int], bytes], org: str, user: str, relpath: str,
               lines: list[bytes], wanted: Container[str]
               ) -> list[tuple[int, str, str, bytes | None]]:
    """Open the lines of one file whose id is wanted, in one loop: (the line's index, its
    id and time, its plaintext, or None when it does not open or is not a line envelope; a line
    that is not one has the id ""). The checks are open_line's; the fields shared by
    a file are encoded once, and a line as seal_line writes it is read without JSON."""
    import binascii

    from cryptography.exceptions import InvalidTag

    prefix = _line_prefix(org, user, relpath)
    decode, encode = binascii.a2b_base64, binascii.b2a_base64
    aeads: dict[int, Any] = {}
    out: list[tuple[int, str, str, bytes | None]] = []
    for at, raw in enumerate(lines):
        if not raw:
            continue
        fast = _fast_line(raw)
        if fast is None:
            try:
                doc = parse_line(raw)
            except DataError:
                out.append((at, "", "", None))
                continue
            if doc["id"] not in wanted:
                continue
            try:
                plain: bytes | None = open_line(key_for(int(str(doc["kv"]))), org, user,
                                                relpath, doc)
            except AuthError:
                plain = None
            out.append((at, str(doc["id"]), str(doc["ts"]), plain))
            continue
        kv_b, id_b, ts_b, nonce_b, ct_b = fast
        memory_id = id_b.decode()
        if memory_id not in wanted:
            continue
        kv = int(kv_b)
        aead = aeads.get(kv)
        if aead is None:
            aead = aeads[kv] = _aead(key_for(kv))
        try:
            nonce, ct = decode(nonce_b), decode(ct_b)
            # Only the canonical base64 (see open_line), and a nonce of its size.
            if len(nonce) != NONCE_LEN or encode(nonce, newline=False) != nonce_b \
                    or encode(ct, newline=False) != ct_b:
                raise ValueError("not canonical")
            aad = b"".join((prefix, len(id_b).to_bytes(4, "big"), id_b,
                            len(ts_b).to_bytes(4, "big"), ts_b,
                            len(kv_b).to_bytes(4, "big"), kv_b))
            plain = aead.decrypt(nonce, ct, aad)
        except (ValueError, InvalidTag):
            plain = None
        out.append((at, memory_id, ts_b.decode(), plain))
    return out


# --- wrapped data keys (keys/<epoch>.dek) ---------------------------------------------


def wrap_dek(kek: bytes, epoch: int, org: str, user: str, dek: bytes,
             nonce: bytes | None = None) -> bytes:
    header = _HEADER.pack(DEK_MAGIC, FORMAT_VERSION, epoch)
    nonce, ct = _seal(kek, dek, lp(TAG_DEK, org, user, str(epoch)), nonce)
    return header + nonce + ct


def unwrap_dek(kek: bytes, epoch: int, org: str, user: str, blob: bytes) -> bytes:
    if len(blob) != _HEADER.size + NONCE_LEN + KEY_LEN + 16:
        raise DataError("wrapped key has the wrong size")
    magic, version, stored_epoch = _HEADER.unpack_from(blob)
    if magic != DEK_MAGIC or version != FORMAT_VERSION or stored_epoch != epoch:
        raise DataError("wrapped key header does not match its file name")
    start = _HEADER.size
    return _open(kek, blob[start : start + NONCE_LEN], blob[start + NONCE_LEN :],
                 lp(TAG_DEK, org, user, str(epoch)))
