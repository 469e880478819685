"""Where the master key comes from (SPEC §4), first set wins: --key-file / MEM_KEY_FILE,
MEM_KEY_COMMAND, MEM_MASTER_KEY, a key_file set in the config file, the default key file
that only `mem init` creates. Nothing but `init` ever creates a key.

Nothing here asks anyone anything: a passphrase-protected key file without a
passphrase raises PassphraseNeeded, and a surface that can ask does.
"""

from __future__ import annotations

import os
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path

from memvault.config import DEFAULT_KEY_FILE, Settings, config_dir
from memvault.crypto import envelope
from memvault.crypto.keys import (
    MasterKey,
    decode_key,
    is_passphrase_file,
    open_with_passphrase,
    seal_with_passphrase,
)
from memvault.errors import ConfigError, DataError, PassphraseNeeded
from memvault.storage import fsio

KEY_COMMAND_TIMEOUT = 30.0  # the default of the key_command_timeout setting
KEY_OUTPUT_LIMIT = 64 * 1024  # a key is 44 characters of base64; a key file a few hundred


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
    if is_passphrase_file(text):
        if passphrase is None:
            raise PassphraseNeeded(f"key file {path} is passphrase-protected",
                                   hint="passphrase", path=str(path))
        return open_with_passphrase(f"key file {path}", text, passphrase)
    return decode_key(text, f"key file {path}")


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
    `path`), "command" (`command`), "env" (MEM_MASTER_KEY) or "none"."""

    kind: str
    path: Path | None = None
    command: str | None = None
    where: str = ""


def key_source(settings: Settings) -> KeySource:
    """The source load_master_key reads, in SPEC §4's order."""
    key_file = settings.key_file
    from_config = key_file is not None and settings.sources.get("key_file", "").startswith(
        "file")
    if key_file is not None and not from_config:
        return KeySource("file", key_file, where=settings.sources.get("key_file", "flag"))
    command = os.environ.get("MEM_KEY_COMMAND")
    if command:
        return KeySource("command", command=command)
    if os.environ.get("MEM_MASTER_KEY"):
        return KeySource("env")
    if key_file is not None:
        return KeySource("file", key_file, where="config file")
    path = default_key_path()
    return KeySource("file", path) if path.exists() else KeySource("none", path)


def load_master_key(settings: Settings, passphrase: str | None = None) -> MasterKey:
    """Find the master key; never create one (ConfigError, exit 78, when there is none)."""
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
    raise ConfigError("no master key found", hint="no-key")


def create_key_file(source: KeySource, passphrase: str | None = None) -> MasterKey:
    """Write a new random master key where `source` names a key file that does not exist
    yet (the default one, or one named by --key-file, MEM_KEY_FILE or the config file):
    0600, in a 0700 directory when mem makes it. Only `init` calls this."""
    import base64

    path = source.path if source.path is not None else default_key_path()
    fsio.ensure_dir(path.parent)
    key = os.urandom(envelope.KEY_LEN)
    if passphrase is None:
        data = base64.b64encode(key).decode() + "\n"
    else:
        data = seal_with_passphrase(key, passphrase)
    fsio.create_new(path, data.encode())
    where = f" ({source.where})" if source.where else ""
    return MasterKey(key, f"key file {path}{where}")
