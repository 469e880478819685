"""The key hierarchy (SPEC §4): what each key is derived from, and the passphrase-wrapped
key file format. No file is read here: where the master key comes from is the vault's
business (vault/keysource.py).

    master ─HKDF(org, user, epoch)→ KEK ─wraps→ DEK (random, per user and epoch)
    DEK ─HKDF→ record key, vector key, index key ─HKDF→ location key
    master ─HKDF(org, user)→ meta key (audit chain, state MAC, marks)
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass

from memvault.crypto import envelope
from memvault.errors import ConfigError, Refused, UsageError

PASSPHRASE_FORMAT = "mem-passphrase-key/1"  # noqa: S105 - a format tag, not a secret


@dataclass(frozen=True)
class MasterKey:
    key: bytes
    source: str  # human description, never the key

    def __repr__(self) -> str:  # never the key, in a traceback or a log
        return f"MasterKey(source={self.source!r})"

    def kek(self, org: str, user: str, epoch: int) -> bytes:
        return envelope.hkdf(self.key, "mem/v1/kek", org, user, str(epoch))

    def meta_key(self, org: str, user: str) -> bytes:
        """Keys the user's audit chain and the MAC of state.json; stable across epochs."""
        return envelope.hkdf(self.key, "mem/v1/meta", org, user)

    def org_audit_key(self, org: str) -> bytes:
        return envelope.hkdf(self.key, "mem/v1/org-audit", org)

    def check_value(self) -> str:
        return envelope.key_check_value(self.key)


def record_key(dek: bytes) -> bytes:
    return envelope.hkdf(dek, "mem/v1/record")


def index_key(dek: bytes) -> bytes:
    return envelope.hkdf(dek, "mem/v1/index")


def vector_key(dek: bytes) -> bytes:
    """Seals the vector store (vectors can be inverted back to text: sealed like records)."""
    return envelope.hkdf(dek, "mem/v1/vectors")


def location_key(index_key: bytes) -> bytes:
    """Seals each record's location in the index (it names the session)."""
    return envelope.hkdf(index_key, "mem/v1/index-loc")


def decode_key(text: str, where: str) -> bytes:
    import binascii

    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{where} is not a base64-encoded key") from None
    if len(key) != envelope.KEY_LEN:
        raise ConfigError(f"{where} holds {len(key)} bytes; a master key has 32")
    return key


# --- passphrase-wrapped key file ------------------------------------------------------

def _kdf(passphrase: str, params: dict[str, object], salt: bytes) -> bytes:
    secret = passphrase.encode()
    if params["kdf"] == "argon2id":
        from cryptography.hazmat.primitives.kdf.argon2 import Argon2id

        return Argon2id(
            salt=salt, length=32, iterations=int(str(params["t"])),
            lanes=int(str(params["p"])), memory_cost=int(str(params["m"])),
        ).derive(secret)
    if params["kdf"] == "scrypt":
        from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

        return Scrypt(salt=salt, length=32, n=int(str(params["n"])), r=int(str(params["r"])),
                      p=int(str(params["p"]))).derive(secret)
    raise ConfigError(f"unknown key-derivation function {params['kdf']!r}")


def default_kdf_params() -> dict[str, object]:
    try:
        from cryptography.hazmat.primitives.kdf.argon2 import Argon2id  # noqa: F401

        # RFC 9106's second recommended option: 64 MiB, 3 passes, 4 lanes.
        return {"kdf": "argon2id", "m": 65536, "t": 3, "p": 4}
    except ImportError:  # OpenSSL without Argon2
        return {"kdf": "scrypt", "n": 2**17, "r": 8, "p": 1}


def is_passphrase_file(text: str) -> bool:
    return text.lstrip().startswith("{")


MAX_PASSPHRASE = 4096  # bytes: a passphrase is a line, never a file's worth


def check_passphrase(passphrase: str, what: str = "the passphrase",
                     field: str | None = None) -> str:
    """A passphrase is one line of text: refuse one that is not UTF-8, holds a control
    character (NUL, escape, a newline: what /dev/zero or a binary file gives; a tab is
    text) or is longer than MAX_PASSPHRASE bytes (UsageError, naming no character)."""
    import unicodedata

    for c in passphrase:
        kind = unicodedata.category(c)
        if kind == "Cs":  # a byte that was not UTF-8, kept as a lone surrogate
            raise UsageError(f"{what} is not UTF-8 text", field=field)
        if kind == "Cc" and c != "\t":
            raise UsageError(f"{what} holds a control character (U+{ord(c):04X}); a "
                             "passphrase is one line of text", field=field)
    if len(passphrase.encode()) > MAX_PASSPHRASE:
        raise UsageError(f"{what} is longer than {MAX_PASSPHRASE} bytes", field=field)
    return passphrase


def seal_with_passphrase(key: bytes, passphrase: str,
                         params: dict[str, object] | None = None) -> str:
    check_passphrase(passphrase)  # never a key wrapped under what no one can type again
    params = dict(params or default_kdf_params())
    salt = os.urandom(16)
    header = {"format": PASSPHRASE_FORMAT, "params": params,
              "salt": base64.b64encode(salt).decode()}
    aad = json.dumps(header, sort_keys=True).encode()
    nonce, ct = envelope.seal_raw(_kdf(passphrase, params, salt), key, aad)
    doc = dict(header, nonce=base64.b64encode(nonce).decode(), ct=base64.b64encode(ct).decode())
    return json.dumps(doc, indent=1) + "\n"


def open_with_passphrase(where: str, text: str, passphrase: str) -> bytes:
    """The master key in a passphrase-wrapped key file (Refused: wrong passphrase)."""
    try:
        doc = json.loads(text)
        header = {"format": doc["format"], "params": doc["params"], "salt": doc["salt"]}
        salt = base64.b64decode(doc["salt"])
        nonce = base64.b64decode(doc["nonce"])
        ct = base64.b64decode(doc["ct"])
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"{where} is malformed") from None
    if header["format"] != PASSPHRASE_FORMAT:
        raise ConfigError(f"{where} has unknown format {header['format']!r}")
    try:
        kek = _kdf(passphrase, header["params"], salt)
    except (KeyError, ValueError, TypeError):
        raise ConfigError(f"{where} has malformed key-derivation parameters") from None
    try:
        return envelope.open_raw(kek, nonce, ct, json.dumps(header, sort_keys=True).encode())
    except envelope.AuthError:
        raise Refused(f"wrong passphrase for {where}") from None
