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


def key_source_configured(settings: Settings) -> bool:
    """Whether any master-key source is set (then `init` must use it, never make one)."""
    return (settings.key_file is not None or bool(os.environ.get("MEM_KEY_COMMAND"))
            or bool(os.environ.get("MEM_MASTER_KEY")) or default_key_path().exists())


def load_master_key(settings: Settings, passphrase: str | None = None) -> MasterKey:
    """Find the master key; never create one (ConfigError, exit 78, when there is none)."""
    key_file = settings.key_file
    from_config = key_file is not None and settings.sources.get("key_file", "").startswith(
        "file")
    if key_file is not None and not from_config:
        where = settings.sources.get("key_file", "flag")
        return MasterKey(_read_key_file(key_file, passphrase), f"key file {key_file} ({where})")
    command = os.environ.get("MEM_KEY_COMMAND")
    if command:
        timeout = float(settings.values.get("key_command_timeout") or KEY_COMMAND_TIMEOUT)
        return MasterKey(_run_key_command(command, timeout), "MEM_KEY_COMMAND")
    env_key = os.environ.get("MEM_MASTER_KEY")
    if env_key:
        return MasterKey(decode_key(env_key, "MEM_MASTER_KEY"), "MEM_MASTER_KEY")
    if key_file is not None:
        return MasterKey(_read_key_file(key_file, passphrase),
                         f"key file {key_file} (config file)")
    path = default_key_path()
    if path.exists():
        return MasterKey(_read_key_file(path, passphrase), f"key file {path}")
    raise ConfigError("no master key found", hint="no-key")


def create_default_key(passphrase: str | None = None) -> MasterKey:
    """Write a new random master key to the default key file (only `init` calls this)."""
    import base64

    path = default_key_path()
    fsio.ensure_dir(path.parent)
    key = os.urandom(envelope.KEY_LEN)
    if passphrase is None:
        data = base64.b64encode(key).decode() + "\n"
    else:
        data = seal_with_passphrase(key, passphrase)
    fsio.create_new(path, data.encode())
    return MasterKey(key, f"key file {path}")
