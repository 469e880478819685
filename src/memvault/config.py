"""The one place that resolves configuration: flag > MEM_* environment > config file > default."""

from __future__ import annotations

import getpass
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memvault.errors import ConfigError, UsageError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
CONFIG_FILE = "config.yaml"
DEFAULT_KEY_FILE = "master.key"


def validate_name(kind: str, value: str) -> str:
    """Org, user and session names become path components: refuse anything but a plain name."""
    if not NAME_RE.fullmatch(value) or value in (".", ".."):  # `$` would allow a final "\n"
        raise UsageError(
            f"invalid {kind} name {value!r}: use 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit", field=kind)
    return value


def config_dir() -> Path:
    override = os.environ.get("MEM_CONFIG_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_config_dir("mem"))


def default_vault() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("mem"))


def _login_name() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name in some containers
        return "default"


@dataclass(frozen=True)
class Setting:
    name: str
    env: str
    kind: type
    default: Any
    help: str


# Every setting mem reads. A config-file key is the setting's name.
SETTINGS: tuple[Setting, ...] = (
    Setting("vault", "MEM_VAULT", Path, None, "vault root directory"),
    Setting("org", "MEM_ORG", str, "default", "organisation name"),
    Setting("user", "MEM_USER", str, None, "user name (default: the login name)"),
    Setting("key_file", "MEM_KEY_FILE", Path, None, "master key file"),
    Setting("lock_timeout", "MEM_LOCK_TIMEOUT", float, 10.0,
            "seconds to wait for the user's lock before exit 75"),
    Setting("brief_max_entries", "MEM_BRIEF_MAX_ENTRIES", int, 50,
            "most entries in a memory brief"),
    Setting("brief_max_chars", "MEM_BRIEF_MAX_CHARS", int, 8000,
            "longest memory brief, in characters"),
    Setting("redaction", "", dict, None,
            "redaction rules: disable (rule ids), rules (extra rules), phone_region"),
    Setting("log_dir", "MEM_LOG_DIR", Path, None, "where hooks log their failures"),
    Setting("actor", "MEM_ACTOR", str, None,
            "who the audit log names (default: the login name; hooks and cron set it)"),
)
_BY_NAME = {s.name: s for s in SETTINGS}


@dataclass
class Settings:
    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    config_path: Path = field(default_factory=lambda: config_dir() / CONFIG_FILE)

    @property
    def vault(self) -> Path:
        return Path(self.values["vault"])

    @property
    def org(self) -> str:
        return str(self.values["org"])

    @property
    def user(self) -> str:
        return str(self.values["user"])

    @property
    def key_file(self) -> Path | None:
        value = self.values.get("key_file")
        return Path(value) if value else None

    @property
    def lock_timeout(self) -> float:
        return float(self.values["lock_timeout"])

    @property
    def log_dir(self) -> Path:
        value = self.values.get("log_dir")
        if value:
            return Path(value)
        import platformdirs

        return Path(platformdirs.user_log_dir("mem"))

    @property
    def actor(self) -> str:
        return str(self.values.get("actor") or _login_name())[:64]

    @property
    def redaction(self) -> dict[str, Any]:
        """The `redaction:` mapping of the config file (ops/admission.py reads it)."""
        value = self.values.get("redaction")
        return value if isinstance(value, dict) else {}


def _read_config_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}".splitlines()[0]) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must be a mapping of setting: value")
    unknown = sorted(set(data) - set(_BY_NAME))
    if unknown:
        raise ConfigError(f"unknown setting {unknown[0]!r} in {path}")
    return data


def _coerce(setting: Setting, raw: Any, origin: str) -> Any:
    try:
        if setting.kind is Path:
            return Path(os.path.expanduser(str(raw)))
        if setting.kind in (float, int):
            value = setting.kind(raw)
            if value < 0:
                raise ValueError("negative")
            return value
        if setting.kind is dict:
            if not isinstance(raw, dict):
                raise ValueError("not a mapping")
            return raw
        return str(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"invalid value {raw!r} for {setting.name} ({origin})") from None


def resolve(**flags: Any) -> Settings:
    """Resolve every setting; `flags` holds command-line values (None = not given)."""
    path = config_dir() / CONFIG_FILE
    file_values = _read_config_file(path)
    settings = Settings(config_path=path)
    for s in SETTINGS:
        if flags.get(s.name) is not None:
            value, source = _coerce(s, flags[s.name], "flag"), f"flag --{s.name.replace('_', '-')}"
        elif s.env and os.environ.get(s.env):
            value, source = _coerce(s, os.environ[s.env], s.env), f"env {s.env}"
        elif file_values.get(s.name) is not None:
            value, source = _coerce(s, file_values[s.name], str(path)), f"file {path}"
        else:
            value, source = s.default, "default"
        settings.values[s.name] = value
        settings.sources[s.name] = source
    if settings.values["vault"] is None:
        settings.values["vault"] = default_vault()
    if settings.values["user"] is None:
        settings.values["user"] = _login_name()
        settings.sources["user"] = "default (login name)"
    validate_name("org", settings.org)
    validate_name("user", settings.user)
    return settings
