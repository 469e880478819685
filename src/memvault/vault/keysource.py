"""Where the master key comes from (SPEC §4), first set wins: --key-file / MEM_KEY_FILE,
MEM_KEY_COMMAND, MEM_MASTER_KEY, the OS keyring when `key_source: keyring` selects it (a
backend known to encrypt at rest, never another), a key_file set in the config file, the
default key file that only `mem init` creates.
Nothing but `init` ever creates a key; `mem key restore` puts a backed-up one back.

Nothing here asks anyone anything: a passphrase-protected key file without a
passphrase raises PassphraseNeeded, and a surface that can ask does.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memvault.config import DEFAULT_KEY_FILE, Settings, config_dir
from memvault.crypto import envelope
from memvault.crypto.keys import (
    MasterKey,
    decode_key,
    is_passphrase_file,
    open_with_passphrase,
    seal_with_passphrase,
)
from memvault.errors import ConfigError, DataError, MemError, PassphraseNeeded, Refused
from memvault.storage import fsio
from memvault.storage.layout import VAULT_FILE, holds_memory

KEY_COMMAND_TIMEOUT = 30.0  # the default of the key_command_timeout setting
KEY_OUTPUT_LIMIT = 64 * 1024  # a key is 44 characters of base64; a key file a few hundred
KEYRING_SERVICE = "memvault"  # the OS keyring's service name for every vault's master key


def default_key_path() -> Path:
    return config_dir() / DEFAULT_KEY_FILE


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
    text = _read_text(path)
    if is_passphrase_file(text):
        if passphrase is None:
            raise PassphraseNeeded(f"key file {path} is passphrase-protected",
                                   hint="passphrase", path=str(path))
        return open_with_passphrase(f"key file {path}", text, passphrase)
    return decode_key(text, f"key file {path}")


def _read_text(path: Path) -> str:
    check_private(path)
    try:
        # Never a FIFO (it would block) nor a device (/dev/zero never ends).
        text = fsio.read_regular(path, f"key file {path}", KEY_OUTPUT_LIMIT).decode()
    except IsADirectoryError:
        raise ConfigError(f"key file {path} is a folder, not a file") from None
    except DataError as exc:
        raise ConfigError(exc.message) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not text"
        raise ConfigError(f"cannot read key file {path}: {reason}") from None
    return text


def _run_key_command(command: str, timeout: float = KEY_COMMAND_TIMEOUT) -> bytes:
    """Run the key command (no shell) for at most `timeout` seconds and KEY_OUTPUT_LIMIT
    bytes of output; nothing it starts outlives it (memvault.process). It gets the
    user's environment (a password manager needs its agent, session and home) but none
    of mem's MEM_* variables: MEM_MASTER_KEY, when also set, is not the command's."""
    from memvault.process import run_bounded, without_mem

    try:
        argv = shlex.split(command)
    except ValueError as exc:  # an unbalanced quote
        raise ConfigError(f"MEM_KEY_COMMAND cannot be parsed: {exc}") from None
    if not argv:
        raise ConfigError("MEM_KEY_COMMAND is empty")
    try:
        done = run_bounded(argv, None, timeout, KEY_OUTPUT_LIMIT, without_mem())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"MEM_KEY_COMMAND failed to run: {exc}") from None
    if done.problem == "timeout":
        raise ConfigError(f"MEM_KEY_COMMAND did not answer within {timeout:g}s; it and "
                          "its child processes were stopped")
    if done.problem == "too long":
        raise ConfigError(f"MEM_KEY_COMMAND printed more than {KEY_OUTPUT_LIMIT} bytes; "
                          "that is not a key")
    if done.returncode != 0:
        raise ConfigError(f"MEM_KEY_COMMAND exited with status {done.returncode}")
    return decode_key(done.output.decode(errors="replace"), "MEM_KEY_COMMAND output")


@dataclass(frozen=True)
class KeySource:
    """Which master-key source wins, named without reading it: `kind` is "file" (at
    `path`), "command" (`command`), "env" (MEM_MASTER_KEY), "keyring" (the OS keyring's
    entry for the vault) or "none" (`path` is then the default key file)."""

    kind: str
    path: Path | None = None
    command: str | None = None
    where: str = ""


def key_source(settings: Settings, writable: bool = False) -> KeySource:
    """The source load_master_key reads, in SPEC §4's order. With `writable`, the first
    a key can be written to (where `mem key restore` puts one): a key command or
    MEM_MASTER_KEY is then passed over, and the default key file named even when it
    does not exist yet."""
    key_file = settings.key_file
    from_config = key_file is not None and settings.sources.get("key_file", "").startswith(
        "file")
    if key_file is not None and not from_config:
        return KeySource("file", key_file, where=settings.sources.get("key_file", "flag"))
    command = os.environ.get("MEM_KEY_COMMAND")
    if command and not writable:
        return KeySource("command", command=command)
    if os.environ.get("MEM_MASTER_KEY") and not writable:
        return KeySource("env")
    if settings.key_source == "keyring":
        return KeySource("keyring", where=settings.sources.get("key_source", ""))
    if key_file is not None:
        return KeySource("file", key_file, where="config file")
    path = default_key_path()
    return KeySource("file", path) if path.exists() or writable else KeySource("none", path)


def load_master_key(settings: Settings, passphrase: str | None = None,
                    key_check: str | None = None, *, move_out: bool = False) -> MasterKey:
    """Find the master key; never create one (ConfigError, exit 78, when there is none).
    `key_check` is the vault's (vault.json): the OS keyring's entry is named by it.
    `move_out` reads it from a keyring backend that does not encrypt it (`mem key backup`
    only, to move it out of there)."""
    source = key_source(settings)
    if source.kind == "file" and source.path is not None:
        where = f" ({source.where})" if source.where else ""
        return MasterKey(_read_key_file(source.path, passphrase),
                         f"key file {source.path}{where}")
    if source.kind == "command" and source.command:
        timeout = float(settings.values.get("key_command_timeout") or KEY_COMMAND_TIMEOUT)
        return MasterKey(_run_key_command(source.command, timeout), "MEM_KEY_COMMAND")
    if source.kind == "env":
        return MasterKey(decode_key(os.environ["MEM_MASTER_KEY"], "MEM_MASTER_KEY"),
                         "MEM_MASTER_KEY")
    if source.kind == "keyring":
        if key_check is None:  # no vault yet: nothing can be named in the keyring
            keyring_backend()  # but one that would never hold its key is said first
            raise missing_key(settings, "no master key found")
        try:
            key, backend = _keyring_read(key_check, move_out)
        except ConfigError as exc:
            if exc.hint != "keyring-unsafe":
                raise
            # The vault's key may be there (an earlier mem kept it): say how to get it out.
            raise ConfigError(f"{exc.message}; mem reads no master key from it",
                              hint="keyring-unsafe-key") from None
        if key is None:
            raise missing_key(settings, "the OS keyring holds no master key",
                              f" ({backend}: service {KEYRING_SERVICE}, account "
                              f"{keyring_account(key_check)})")
        return MasterKey(key, keyring_where(key_check, backend))
    raise missing_key(settings, "no master key found",
                      f" (no key file at {source.path}, no key variable set)")


def missing_key(settings: Settings, what: str, detail: str = "") -> ConfigError:
    """No key for the vault. One that holds memory must get its own key back (a backup, a
    key source): a new key would leave everything in it unreadable, so `init` is never
    what its hint suggests."""
    root = settings.vault
    if not (root / VAULT_FILE).exists():
        return ConfigError(f"{what}{detail}", hint="no-key")
    if holds_memory(root):
        return ConfigError(f"{what} for the vault at {root}, which holds memory{detail}",
                           hint="restore-key", vault=str(root))
    return ConfigError(f"{what} for the vault at {root}{detail}", hint="no-key-empty",
                       vault=str(root))


# --- the OS keyring -------------------------------------------------------------------

def keyring_account(key_check: str) -> str:
    """The keyring entry of a vault's master key, named by the vault's key check value
    (vault.json): two vaults never share an entry, and a vault moved or mounted elsewhere
    keeps its own. The check value reveals nothing usable about the key."""
    return f"master-key-{key_check}"


# The keyring package's backends that keep what they hold encrypted at rest, under the
# user's login, by class (as PYTHON_KEYRING_BACKEND names them) and as a user calls them.
# An allow-list: any other backend (keyrings.alt's files, a plugin) is not known to
# encrypt, and no master key is kept in it or read from it.
ENCRYPTING_BACKENDS = {
    "keyring.backends.macOS.Keyring": "macOS Keychain",
    "keyring.backends.Windows.WinVaultKeyring": "Windows Credential Locker",
    "keyring.backends.SecretService.Keyring": "Secret Service",
    "keyring.backends.libsecret.Keyring": "Secret Service (libsecret)",
    "keyring.backends.kwallet.DBusKeyring": "KWallet",
    "keyring.backends.kwallet.DBusKeyringKWallet4": "KWallet 4",
}
# keyring's stand-ins for "no backend here" (fail) and "keyring disabled" (null).
NO_BACKENDS = ("keyring.backends.fail.Keyring", "keyring.backends.null.Keyring")


def keyring_where(key_check: str, backend: str = "") -> str:
    """The entry of a vault's key, with the backend that holds it when known."""
    named = f", {backend}" if backend else ""
    return (f"the OS keyring{named} (service {KEYRING_SERVICE}, account "
            f"{keyring_account(key_check)})")


def _class_name(backend: object) -> str:
    return f"{type(backend).__module__}.{type(backend).__qualname__}"


def _judge(kr: Any, move_out: bool = False) -> tuple[Any, str]:
    """The backend keyring chose and its name, when it is one that encrypts at rest
    (ENCRYPTING_BACKENDS), viable here and recommended by its own priority; else a
    ConfigError that names it. With `move_out`, one that does not encrypt is taken too
    (its name then says so), to read a key mem kept there before."""
    from keyring.backends.chainer import ChainerBackend

    backend = kr.get_keyring()
    if isinstance(backend, ChainerBackend):
        # A chain writes to its first backend and reads through all of them: mem takes
        # the first alone and judges it, so nothing lower in the chain (a plaintext
        # file) ever holds or yields the key.
        chained = list(backend.backends)
        if not chained:
            raise kr.errors.NoKeyringError()
        backend = chained[0]
    name = _class_name(backend)
    if name in NO_BACKENDS:
        raise kr.errors.NoKeyringError()
    label = ENCRYPTING_BACKENDS.get(name)
    if label is None:
        if move_out:
            return backend, f"{name}, which does not encrypt it"
        stored = getattr(backend, "file_path", None)
        where = f" (it keeps its entries in {stored})" if isinstance(stored, str) else ""
        raise ConfigError(f"the OS keyring backend {name} is not one known to encrypt at "
                          f"rest{where}", hint="keyring-unsafe")
    try:
        priority = float(type(backend).priority)
    except Exception as exc:  # noqa: BLE001 - how a backend says it cannot work here
        detail = " ".join(str(exc).split())[:200].rstrip(".") or type(exc).__name__
        raise ConfigError(f"the OS keyring backend {label} ({name}) cannot be used here: "
                          f"{detail}", hint="keyring-none") from None
    if priority < 1 and not move_out:  # keyring's word for one it does not recommend
        raise ConfigError(f"the OS keyring backend {label} ({name}) reports itself not "
                          f"recommended here (priority {priority:g})", hint="keyring-unsafe")
    return backend, label


def keyring_backend() -> str:
    """The name of the OS keyring backend the master key would be kept in; ConfigError
    (exit 78) when there is none, or one that is not known to encrypt at rest."""
    return str(_keyring_call("open", lambda kr: _judge(kr)[1]))


def _keyring_call(what: str, call: Callable[[Any], Any]) -> Any:
    """Call the keyring library (imported here only: it finds its backends at import)
    and turn its failures into one-line configuration errors (exit 78)."""
    try:
        import keyring
        import keyring.errors
    except ImportError:
        raise ConfigError("the OS keyring needs the Python package keyring") from None
    try:
        return call(keyring)
    except MemError:
        raise
    except keyring.errors.NoKeyringError:
        raise ConfigError("no OS keyring is available here", hint="keyring-none") from None
    except keyring.errors.KeyringLocked:
        raise ConfigError("the OS keyring is locked", hint="keyring-locked") from None
    except Exception as exc:  # noqa: BLE001 - a backend's own errors (D-Bus, Keychain)
        detail = " ".join(str(exc).split())[:200].rstrip(".") or type(exc).__name__
        raise ConfigError(f"the OS keyring failed to {what}: {detail}",
                          hint="keyring-failed") from None


def _keyring_read(key_check: str, move_out: bool = False) -> tuple[bytes | None, str]:
    """The master key the OS keyring holds for the vault (None when it has no entry),
    and the backend's name. A backend not known to encrypt is never read (ConfigError,
    hint keyring-unsafe), but with `move_out`."""
    def read(kr: Any) -> tuple[Any, str]:
        backend, label = _judge(kr, move_out)
        return backend.get_password(KEYRING_SERVICE, keyring_account(key_check)), label

    value, label = _keyring_call("read the key", read)
    if value is None:
        return None, label
    return decode_key(str(value), keyring_where(key_check, label)), label


def keyring_key(key_check: str) -> bytes | None:
    """The master key the OS keyring holds for the vault, or None when it has no entry."""
    return _keyring_read(key_check)[0]


def store_in_keyring(key: bytes) -> MasterKey:
    """Put a master key in the OS keyring under its vault's entry, in a backend that
    encrypts at rest only (ConfigError else, nothing written). An entry that holds
    another key is never replaced (Refused); the same key is left as it is."""
    import base64

    check = envelope.key_check_value(key)
    try:
        label = keyring_backend()
    except ConfigError as exc:
        raise ConfigError(f"{exc.message}; nothing was written", hint=exc.hint) from None
    where = keyring_where(check, label)
    held = keyring_key(check)
    if held is not None and held != key:
        raise Refused(f"{where} holds another key already; it is never replaced; nothing "
                      "was written")
    if held is None:
        value = base64.b64encode(key).decode()
        _keyring_call("store the key", lambda kr: _judge(kr)[0].set_password(
            KEYRING_SERVICE, keyring_account(check), value))
        # Read back: a backend that accepts a write and keeps nothing must not pass.
        if keyring_key(check) != key:
            raise ConfigError(f"{where} did not keep the key")
    return MasterKey(key, where)


def create_key_file(source: KeySource, passphrase: str | None = None) -> MasterKey:
    """Write a new random master key where `source` names a key file that does not exist
    yet (the default one, or one named by --key-file, MEM_KEY_FILE or the config file),
    or, for the keyring source, into the OS keyring. Only `init` calls this."""
    key = os.urandom(envelope.KEY_LEN)
    if source.kind == "keyring":
        return store_in_keyring(key)
    path = source.path if source.path is not None else default_key_path()
    write_key_file(path, key, passphrase)
    where = f" ({source.where})" if source.where else ""
    return MasterKey(key, f"key file {path}{where}")


def write_key_file(path: Path, key: bytes, passphrase: str | None = None) -> None:
    """A new key file (never one that exists: StorageError): 0600, written whole before it
    appears, in a 0700 directory when mem makes it."""
    import base64

    fsio.ensure_dir(path.parent)
    if passphrase is None:
        data = base64.b64encode(key).decode() + "\n"
    else:
        data = seal_with_passphrase(key, passphrase)
    fsio.create_new(path, data.encode())


def read_key_file(path: Path) -> bytes | None:
    """The key a plain key file holds, or None when it is passphrase-protected (what it
    holds is then unknown without asking)."""
    text = _read_text(path)
    return None if is_passphrase_file(text) else decode_key(text, f"key file {path}")
