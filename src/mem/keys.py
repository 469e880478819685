"""The master key: where it comes from (SPEC §4), how it is stored, and what is derived from it.

Sources, first set wins: --key-file / MEM_KEY_FILE, MEM_KEY_COMMAND, MEM_MASTER_KEY, the
default key file that only `mem init` creates. Nothing but `init` ever creates a key.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import shlex
import stat
import subprocess  # noqa: S404 - MEM_KEY_COMMAND runs without a shell
import sys
from dataclasses import dataclass
from pathlib import Path

from mem import crypto, fsio
from mem.config import DEFAULT_KEY_FILE, Settings, config_dir
from mem.errors import ConfigError, Refused

PASSPHRASE_FORMAT = "mem-passphrase-key/1"  # noqa: S105 - a format tag, not a secret
KEY_COMMAND_TIMEOUT = 30.0


@dataclass(frozen=True)
class MasterKey:
    key: bytes
    source: str  # human description, never the key

    def kek(self, org: str, user: str, epoch: int) -> bytes:
        return crypto.hkdf(self.key, "mem/v1/kek", org, user, str(epoch))

    def meta_key(self, org: str, user: str) -> bytes:
        """Keys the user's audit chain and the MAC of state.json; stable across epochs."""
        return crypto.hkdf(self.key, "mem/v1/meta", org, user)

    def org_audit_key(self, org: str) -> bytes:
        return crypto.hkdf(self.key, "mem/v1/org-audit", org)

    def check_value(self) -> str:
        return crypto.key_check_value(self.key)


def record_key(dek: bytes) -> bytes:
    return crypto.hkdf(dek, "mem/v1/record")


def index_key(dek: bytes) -> bytes:
    return crypto.hkdf(dek, "mem/v1/index")


def default_key_path() -> Path:
    return config_dir() / DEFAULT_KEY_FILE


def _decode_key(text: str, where: str) -> bytes:
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{where} is not a base64-encoded key") from None
    if len(key) != crypto.KEY_LEN:
        raise ConfigError(f"{where} holds {len(key)} bytes; a master key has 32")
    return key


def check_private(path: Path) -> None:
    """Refuse a key file that others can read or that belongs to someone else."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"key file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read key file {path}: {exc.strerror}") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"key file {path} is readable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
            f"run `chmod 600 {path}`"
        )
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise ConfigError(f"key file {path} is not owned by you; refusing to use it")


def _read_key_file(path: Path, passphrase: str | None = None) -> bytes:
    check_private(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read key file {path}: {exc}") from None
    if text.lstrip().startswith("{"):
        return _open_passphrase_file(path, text, passphrase)
    return _decode_key(text, f"key file {path}")


def _run_key_command(command: str) -> bytes:
    argv = shlex.split(command)
    if not argv:
        raise ConfigError("MEM_KEY_COMMAND is empty")
    try:
        proc = subprocess.run(  # noqa: S603 - the user's own command, no shell
            argv, capture_output=True, timeout=KEY_COMMAND_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"MEM_KEY_COMMAND failed to run: {exc}") from None
    if proc.returncode != 0:
        raise ConfigError(f"MEM_KEY_COMMAND exited with status {proc.returncode}")
    return _decode_key(proc.stdout.decode(errors="replace"), "MEM_KEY_COMMAND output")


def key_source_configured(settings: Settings) -> bool:
    """Whether any master-key source is set (then `init` must use it, never make one)."""
    return (settings.key_file is not None or bool(os.environ.get("MEM_KEY_COMMAND"))
            or bool(os.environ.get("MEM_MASTER_KEY")) or default_key_path().exists())


def load_master_key(settings: Settings, passphrase: str | None = None) -> MasterKey:
    """Find the master key; never create one (exit 78 when there is none).

    Order: --key-file or MEM_KEY_FILE, MEM_KEY_COMMAND, MEM_MASTER_KEY, a key_file set in
    the config file, the default key file."""
    key_file = settings.key_file
    from_config = key_file is not None and settings.sources.get("key_file", "").startswith(
        "file")
    if key_file is not None and not from_config:
        where = settings.sources.get("key_file", "flag")
        return MasterKey(_read_key_file(key_file, passphrase), f"key file {key_file} ({where})")
    command = os.environ.get("MEM_KEY_COMMAND")
    if command:
        return MasterKey(_run_key_command(command), "MEM_KEY_COMMAND")
    env_key = os.environ.get("MEM_MASTER_KEY")
    if env_key:
        return MasterKey(_decode_key(env_key, "MEM_MASTER_KEY"), "MEM_MASTER_KEY")
    if key_file is not None:
        return MasterKey(_read_key_file(key_file, passphrase),
                         f"key file {key_file} (config file)")
    path = default_key_path()
    if path.exists():
        return MasterKey(_read_key_file(path, passphrase), f"key file {path}")
    raise ConfigError(
        "no master key found: run `mem init`, or set MEM_KEY_FILE, MEM_KEY_COMMAND "
        "or MEM_MASTER_KEY"
    )


def create_default_key(passphrase: str | None = None) -> MasterKey:
    """Write a new random master key to the default key file (only `mem init` calls this)."""
    path = default_key_path()
    fsio.ensure_dir(path.parent)
    key = os.urandom(crypto.KEY_LEN)
    if passphrase is None:
        data = base64.b64encode(key).decode() + "\n"
    else:
        data = seal_with_passphrase(key, passphrase)
    fsio.atomic_write(path, data.encode())
    return MasterKey(key, f"key file {path}")


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


def seal_with_passphrase(key: bytes, passphrase: str,
                         params: dict[str, object] | None = None) -> str:
    params = dict(params or default_kdf_params())
    salt = os.urandom(16)
    header = {"format": PASSPHRASE_FORMAT, "params": params,
              "salt": base64.b64encode(salt).decode()}
    aad = json.dumps(header, sort_keys=True).encode()
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = os.urandom(crypto.NONCE_LEN)
    ct = AESGCM(_kdf(passphrase, params, salt)).encrypt(nonce, key, aad)
    doc = dict(header, nonce=base64.b64encode(nonce).decode(), ct=base64.b64encode(ct).decode())
    return json.dumps(doc, indent=1) + "\n"


def _open_passphrase_file(path: Path, text: str, passphrase: str | None) -> bytes:
    try:
        doc = json.loads(text)
        header = {"format": doc["format"], "params": doc["params"], "salt": doc["salt"]}
        salt = base64.b64decode(doc["salt"])
        nonce = base64.b64decode(doc["nonce"])
        ct = base64.b64decode(doc["ct"])
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"key file {path} is malformed") from None
    if header["format"] != PASSPHRASE_FORMAT:
        raise ConfigError(f"key file {path} has unknown format {header['format']!r}")
    if passphrase is None:
        if not sys.stdin.isatty():
            raise ConfigError(
                f"key file {path} is passphrase-protected and there is no terminal to ask; "
                "use MEM_KEY_FILE or MEM_KEY_COMMAND for unattended runs"
            )
        import getpass

        passphrase = getpass.getpass(f"Passphrase for {path}: ")
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    try:
        kek = _kdf(passphrase, header["params"], salt)
    except (KeyError, ValueError, TypeError):
        raise ConfigError(f"key file {path} has malformed key-derivation parameters") from None
    try:
        return AESGCM(kek).decrypt(nonce, ct, json.dumps(header, sort_keys=True).encode())
    except (InvalidTag, ValueError):
        raise Refused(f"wrong passphrase for key file {path}") from None
