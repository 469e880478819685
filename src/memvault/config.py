"""The one place that resolves configuration: flag > MEM_* environment > config file > default."""

from __future__ import annotations

import getpass
import json
import math
import os
import re
import shlex
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from memvault.errors import ConfigError, UsageError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
CONFIG_FILE = "config.yaml"
DEFAULT_KEY_FILE = "master.key"
KEY_SOURCES = ("default", "keyring")  # the values of the key_source setting


# Names of the vault's own files beside org and user directories (<vault>/vault.json,
# <vault>/<org>/audit.jsonl): an org or user named so would take their path. Names that
# start with "." (.locks, .migrate.lock, temp files) are refused by NAME_RE already.
# Compared case-folded: on a case-insensitive filesystem "Audit.jsonl" is the same file.
RESERVED_NAMES = frozenset({"vault.json", "audit.jsonl"})


def validate_name(kind: str, value: str) -> str:
    """Org, user and session names become path components: refuse anything but a plain name,
    and an org or user name that is the name of a vault file."""
    if not NAME_RE.fullmatch(value) or value in (".", ".."):  # `$` would allow a final "\n"
        raise UsageError(
            f"invalid {kind} name {value!r}: use 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit", field=kind)
    if kind in ("org", "user") and value.casefold() in RESERVED_NAMES:
        raise UsageError(f"invalid {kind} name {value!r}: it is the name of a file of the "
                         "vault itself", field=kind)
    return value


def config_dir() -> Path:
    override = os.environ.get("MEM_CONFIG_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_config_dir("mem"))


def cache_dir() -> Path:
    """Where mem keeps what it derives from its own installed files (never user data)."""
    if sys.platform.startswith("linux"):
        # platformdirs' answer, without its import (tempfile and more: a cold search's).
        base = os.environ.get("XDG_CACHE_HOME", "")
        return Path(base if base.strip() else os.path.expanduser("~/.cache")) / "mem"
    import platformdirs

    return Path(platformdirs.user_cache_dir("mem"))


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
    low: float = 0  # a number's bounds: whatever is outside (NaN, infinities) is refused
    high: float = 0
    choices: tuple[str, ...] = ()  # text that must be one of these, when given


CONFIG_MAX_DEPTH = 32  # the deepest setting is three levels down
CONFIG_MAX_BYTES = 1 << 20  # a config file is a few lines: more is not one


# Every setting mem reads. A config-file key is the setting's name.
SETTINGS: tuple[Setting, ...] = (
    Setting("vault", "MEM_VAULT", Path, None, "vault root directory"),
    Setting("org", "MEM_ORG", str, "default", "organisation name"),
    Setting("user", "MEM_USER", str, None, "user name (default: the login name)"),
    Setting("key_file", "MEM_KEY_FILE", Path, None, "master key file"),
    Setting("key_source", "MEM_KEY_SOURCE", str, "default",
            "where the master key is kept: 'keyring' for the OS keyring, or 'default' (a key "
            "file, MEM_KEY_COMMAND or MEM_MASTER_KEY)", choices=KEY_SOURCES),
    Setting("lock_timeout", "MEM_LOCK_TIMEOUT", float, 10.0,
            "seconds to wait for the user's lock before exit 75", 0, 86400),
    Setting("key_command_timeout", "MEM_KEY_COMMAND_TIMEOUT", float, 30.0,
            "seconds MEM_KEY_COMMAND may take (a hook allows it at most 5)", 0.1, 600),
    Setting("brief_max_entries", "MEM_BRIEF_MAX_ENTRIES", int, 50,
            "most entries in a memory brief", 1, 10_000),
    Setting("brief_max_chars", "MEM_BRIEF_MAX_CHARS", int, 8000,
            "longest memory brief, in characters", 100, 1_000_000),
    Setting("brief", "", dict, None,
            "the memory brief's cost: max_tokens (see BRIEF)"),
    Setting("redaction", "", dict, None,
            "redaction rules: disable (rule ids), rules (extra rules), phone_region, "
            "private_tags (tags whose text is never stored, besides <private>)"),
    Setting("compaction", "", dict, None,
            "compaction triggers and summariser (see COMPACTION and docs/compaction.md)"),
    Setting("sync", "", dict, None,
            "the sync remote: remote (a folder or s3://bucket/prefix), endpoint_url, auto "
            "(see SYNC and docs/sync.md)"),
    Setting("mcp", "", dict, None,
            "the MCP server's limits per session: max_stores, max_supersedes, max_deletes, "
            "max_result_chars"),
    Setting("embeddings", "", dict, None,
            "the embeddings provider that recall by meaning uses (see EMBEDDINGS)"),
    Setting("log_dir", "MEM_LOG_DIR", Path, None, "where hooks log their failures"),
    Setting("actor", "MEM_ACTOR", str, None,
            "who the audit log names (default: the login name; hooks and cron set it)"),
)
_BY_NAME = {s.name: s for s in SETTINGS}

BUILTIN_SUMMARIZER = "builtin"

# The `compaction:` mapping of config.yaml (SPEC §9). These names are a contract.
COMPACTION: tuple[Setting, ...] = (
    Setting("max_active_tokens", "", int, 150_000,
            "active memory (estimated tokens) above which the oldest sessions are compacted",
            1_000, 1e9),
    Setting("compact_fraction", "", float, 0.7,
            "share of the active memory compacted once over the limit", 0.05, 1),
    Setting("session_max_messages", "", int, 200,
            "a session with more messages is summarised", 2, 1e7),
    Setting("session_keep_raw", "", int, 20,
            "messages a summarised long session keeps raw (its newest)", 0, 1e6),
    Setting("archive_after_days", "", int, 90,
            "sessions not accessed for this many days are compacted (0: never)", 0, 36_500),
    Setting("short_session_messages", "", int, 10,
            "sessions with fewer messages are summarised together, one summary per week",
            0, 1e6),
    Setting("summarizer", "MEM_SUMMARIZER", str, BUILTIN_SUMMARIZER,
            "'builtin', or a command run without a shell (session text on stdin)"),
    Setting("summarizer_timeout", "", float, 300.0,
            "seconds one summariser call may take", 1, 86_400),
    Setting("summarizer_max_chars", "", int, 200_000,
            "most characters of session text sent in one summariser call", 1_000, 1e8),
    Setting("summarizer_prompt", "", str, None,
            "the instructions sent before the session text (default: mem's own)"),
    Setting("summarizer_env", "", str, "",
            "environment variables an external summariser is given besides PATH, HOME, "
            "the language and the temporary folder (e.g. [OPENAI_API_KEY]); never MEM_*"),
    Setting("lock_wait", "", float, 2.0,
            "seconds compaction waits for a busy user's lock before skipping them", 0, 600),
    Setting("max_behavioral_facts_per_summary", "", int, 3,
            "preferences, instructions and corrections one summary may add", 0, 10_000),
    Setting("max_behavioral_facts_per_run", "", int, 20,
            "preferences, instructions and corrections summaries may add to one user in "
            "one run", 0, 10_000),
)


@dataclass(frozen=True)
class CompactionConfig:
    max_active_tokens: int = 150_000
    compact_fraction: float = 0.7
    session_max_messages: int = 200
    session_keep_raw: int = 20
    archive_after_days: int = 90
    short_session_messages: int = 10
    summarizer: str = BUILTIN_SUMMARIZER
    summarizer_timeout: float = 300.0
    summarizer_max_chars: int = 200_000
    summarizer_prompt: str | None = None
    summarizer_env: str = ""  # names, separated by spaces
    lock_wait: float = 2.0
    max_behavioral_facts_per_summary: int = 3
    max_behavioral_facts_per_run: int = 20


# The `mcp:` mapping: write limits per MCP server session (ops/budget.py).
# The `sync:` mapping of config.yaml (docs/sync.md): `mem sync --remote` writes it.
SYNC: tuple[Setting, ...] = (
    Setting("remote", "MEM_SYNC_REMOTE", str, None,
            "where memory syncs: a folder (a path or file://) or s3://bucket/prefix"),
    Setting("endpoint_url", "MEM_SYNC_ENDPOINT_URL", str, None,
            "an S3-compatible service's address (MinIO, R2, B2); AWS S3 needs none"),
    Setting("auto", "MEM_SYNC_AUTO", bool, False,
            "sync in the background after a hook's ingest"),
)


MCP: tuple[Setting, ...] = (
    Setting("max_stores", "", int, 20, "memories an agent may store per session", 0, 10_000),
    Setting("max_supersedes", "", int, 5, "memories it may replace per session", 0, 10_000),
    Setting("max_deletes", "", int, 5, "memories it may delete per session", 0, 10_000),
    Setting("max_result_chars", "", int, 8000,
            "the largest tool result, in characters of JSON", 1000, 20_000),
)


# The `brief:` mapping (SPEC §8): what a brief may cost an agent, in estimated tokens
# (text/tokens.py). Its entry and character limits are the older top-level settings.
BRIEF_MIN_TOKENS = 300  # the frame alone costs about 210 (integrations/hookbase.py)
BRIEF: tuple[Setting, ...] = (
    Setting("max_tokens", "MEM_BRIEF_MAX_TOKENS", int, 1500,
            "most estimated tokens of the brief an agent receives (its frame included)",
            BRIEF_MIN_TOKENS, 1_000_000),
)


ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# The `embeddings:` mapping: which model turns texts into vectors (memvault.embed).
EMBEDDING_PROVIDERS = ("builtin", "openai", "none")
EMBEDDINGS: tuple[Setting, ...] = (
    Setting("provider", "MEM_EMBEDDINGS_PROVIDER", str, "builtin",
            "'builtin' (offline, shipped with mem), 'openai' (any OpenAI-compatible "
            "/v1/embeddings endpoint) or 'none' (search by words only)",
            choices=EMBEDDING_PROVIDERS),
    Setting("url", "MEM_EMBEDDINGS_URL", str, None,
            "the endpoint's base URL, e.g. http://localhost:11434/v1 (openai only)"),
    Setting("model", "MEM_EMBEDDINGS_MODEL", str, None,
            "the endpoint's model name (openai only)"),
    Setting("dimensions", "MEM_EMBEDDINGS_DIMENSIONS", int, None,
            "the vectors' length: sent to the endpoint and checked in its answers "
            "(default: whatever the model gives)", 1, 65_536),
    Setting("key_command", "MEM_EMBEDDINGS_KEY_COMMAND", str, None,
            "a command (run without a shell) that prints the endpoint's API key"),
    Setting("key_env", "MEM_EMBEDDINGS_KEY_ENV", str, None,
            "the name of an environment variable that holds the endpoint's API key"),
    Setting("batch_size", "MEM_EMBEDDINGS_BATCH_SIZE", int, 64,
            "texts sent in one request", 1, 2048),
    Setting("timeout", "MEM_EMBEDDINGS_TIMEOUT", float, 30.0,
            "seconds one request (or the key command) may take", 0.05, 600),
    Setting("retries", "MEM_EMBEDDINGS_RETRIES", int, 4,
            "retries of a request refused for load (429), failed on the server (5xx), "
            "timed out or not connected", 0, 20),
    Setting("backoff", "", float, 0.5,
            "seconds before the first retry, doubled at each (with jitter)", 0, 60),
    Setting("max_wait", "", float, 120.0,
            "the most seconds one batch may take, retries and waits included", 0.1, 3600),
    Setting("background", "MEM_EMBEDDINGS_BACKGROUND", bool, True,
            "embed what ingest, add and the hooks store in the background"),
)


@dataclass(frozen=True)
class EmbeddingsConfig:
    """The resolved `embeddings:` settings. The API key itself is never here: only where
    to get it (`key_command`, `key_env`)."""

    provider: str = "builtin"
    url: str | None = None
    model: str | None = None
    dimensions: int | None = None
    key_command: str | None = None
    key_env: str | None = None
    batch_size: int = 64
    timeout: float = 30.0
    retries: int = 4
    backoff: float = 0.5
    max_wait: float = 120.0
    background: bool = True


def _embeddings(raw: Any, origin: str) -> dict[str, Any]:
    if isinstance(raw, dict) and any(str(k).lower() in ("key", "api_key", "token")
                                     for k in raw):
        raise ConfigError(f"embeddings ({origin}) must not hold the API key itself: name a "
                          "command that prints it (key_command) or an environment variable "
                          "that holds it (key_env)")
    out = _section("embeddings", EMBEDDINGS, raw, origin)
    if out["provider"] == "openai":
        for name in ("url", "model"):
            if not str(out[name] or "").strip():
                raise ConfigError(f"embeddings.{name} is needed for the openai provider "
                                  f"({origin})")
    if out["url"] is not None:
        _endpoint_url(str(out["url"]),
                      "env MEM_EMBEDDINGS_URL" if os.environ.get("MEM_EMBEDDINGS_URL")
                      else origin)
    if out["key_command"] is not None and out["key_env"] is not None:
        raise ConfigError(f"embeddings sets both key_command and key_env ({origin}): "
                          "keep one")
    if out["key_command"] is not None and not str(out["key_command"]).strip():
        raise ConfigError(f"embeddings.key_command is empty ({origin})")
    if out["key_env"] is not None and not ENV_NAME_RE.fullmatch(str(out["key_env"])):
        raise ConfigError(f"embeddings.key_env must be the name of an environment variable "
                          f"({origin})")
    return out


# A host name's labels (letters, digits, '-' inside, '_' as container names have them).
HOST_LABEL_RE = re.compile(r"^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)$")
# Query parameters that carry credentials (?api_key=, ?token=, ?sig=): a URL is shown in
# errors and by `mem config show`, so the key has no place in it.
SECRET_PARAM_RE = re.compile(r"key|token|secret|pass|auth|sig|credential", re.IGNORECASE)


def _endpoint_url(url: str, origin: str) -> None:
    """ConfigError unless `url` is one a request can be made to: http or https, printable
    ASCII, a host name or IP address, a port from 1 to 65535, no credentials (in the
    user part or the query), no fragment. The value is never repeated: it may hold a
    secret."""
    import ipaddress
    from urllib.parse import parse_qsl, urlsplit

    def bad(why: str) -> ConfigError:
        return ConfigError(f"embeddings.url {why} ({origin})")

    if not re.fullmatch(r"[\x21-\x7e]+", url):
        raise bad("must be printable ASCII without spaces (a host name in its xn-- form, "
                  "other characters percent-encoded)")
    try:
        parts = urlsplit(url)
    except ValueError:  # an [IPv6] address not closed, or not IPv6
        raise bad("is not a well-formed URL (an [IPv6] address not closed, or not one)"
                  ) from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise bad("must be an http:// or https:// URL")
    if parts.username is not None or parts.password is not None or any(
            SECRET_PARAM_RE.search(name)
            for name, _ in parse_qsl(parts.query, keep_blank_values=True)):
        raise bad("must not hold credentials: name the key's source with key_command or "
                  "key_env")
    if parts.fragment or "#" in url:
        raise bad("must not have a #fragment (it is never sent)")
    host = parts.hostname or ""
    if parts.netloc.rpartition("@")[2].startswith("["):
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if not isinstance(literal, ipaddress.IPv6Address):
            raise bad("has an [address] that is not an IPv6 address")
    else:
        labels = host.removesuffix(".").split(".")
        if not host or len(host) > 253 or not all(HOST_LABEL_RE.match(x) for x in labels):
            raise bad("names no valid host")
        if all(x.isdigit() for x in labels):
            try:
                ipaddress.IPv4Address(host)
            except ValueError:
                raise bad("names no valid host: an IPv4 address is four numbers from 0 "
                          "to 255") from None
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise bad("has a port that is not a number from 1 to 65535")


def _section(name: str, table: tuple[Setting, ...], raw: Any, origin: str) -> dict[str, Any]:
    """A mapping setting (`compaction:`, `mcp:`) with every key resolved: the file's
    value, else the key's environment variable, else its default (ConfigError when
    malformed). Its keys take the same checks as top-level settings."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{name} ({origin}) must be a mapping of setting: value")
    known = {s.name for s in table}
    unknown = sorted(str(k) for k in raw if k not in known)
    if unknown:
        raise ConfigError(f"unknown {name} setting {unknown[0]!r} ({origin})"
                          f"{did_you_mean(unknown[0], known)}")
    out: dict[str, Any] = {}
    for s in table:
        qualified = replace(s, name=f"{name}.{s.name}")
        if s.env and os.environ.get(s.env):
            out[s.name] = _coerce(qualified, os.environ[s.env], s.env)
        elif isinstance(raw.get(s.name), list) and s.kind is str:
            out[s.name] = shlex.join(str(a) for a in raw[s.name])  # a command as argv
        elif raw.get(s.name) is not None:
            out[s.name] = _coerce(qualified, raw[s.name], origin)
        else:
            out[s.name] = s.default
    return out


def _compaction(raw: Any, origin: str) -> dict[str, Any]:
    out = _section("compaction", COMPACTION, raw, origin)
    if out["session_keep_raw"] >= out["session_max_messages"]:
        raise ConfigError(f"compaction.session_keep_raw must be below "
                          f"compaction.session_max_messages ({origin})")
    if not str(out["summarizer"]).strip():
        raise ConfigError(f"compaction.summarizer is empty ({origin})")
    if any(name.startswith("MEM_") for name in str(out["summarizer_env"]).split()):
        raise ConfigError(f"compaction.summarizer_env must not pass mem's own MEM_* "
                          f"variables to the summariser ({origin})")
    return out


@dataclass
class Settings:
    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    config_path: Path = field(default_factory=lambda: config_dir() / CONFIG_FILE)
    # Why the `embeddings:` settings are not used: a malformed section, taken as provider
    # none where embeddings are optional (resolve(embeddings_optional=True): a hook).
    embeddings_problem: str | None = None

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
    def key_source(self) -> str:
        """"keyring" when the master key is kept in the OS keyring, else "default"."""
        return str(self.values.get("key_source") or "default")

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
    def compaction(self) -> CompactionConfig:
        """The resolved `compaction:` settings (every key present: see resolve())."""
        return CompactionConfig(**self.values["compaction"])

    @property
    def sync(self) -> dict[str, Any]:
        """The resolved `sync:` settings: remote, endpoint_url, auto."""
        return dict(self.values["sync"])

    @property
    def mcp(self) -> dict[str, int]:
        """The resolved `mcp:` limits (every key of MCP present: see resolve())."""
        return dict(self.values["mcp"])

    @property
    def brief_max_tokens(self) -> int:
        """The resolved `brief.max_tokens` (present: see resolve())."""
        return int(self.values["brief"]["max_tokens"])

    @property
    def embeddings(self) -> EmbeddingsConfig:
        """The resolved `embeddings:` settings (every key present: see resolve())."""
        return EmbeddingsConfig(**(self.values.get("embeddings") or {}))

    @property
    def redaction(self) -> dict[str, Any]:
        """The `redaction:` mapping of the config file (ops/admission.py reads it)."""
        value = self.values.get("redaction")
        return value if isinstance(value, dict) else {}


def _read_text(path: Path) -> str:
    """The config file's text: a regular file (a FIFO would block, /dev/zero never end;
    opened without blocking and checked before reading) of at most CONFIG_MAX_BYTES."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"config file {path} is not a regular file")
        data = fh.read(CONFIG_MAX_BYTES + 1)
    if len(data) > CONFIG_MAX_BYTES:
        raise ConfigError(f"config file {path} is larger than {CONFIG_MAX_BYTES >> 20} MiB")
    return data.decode()


def _load_yaml(text: str) -> Any:
    """YAML without anchors or aliases: a few aliases nested ("billion laughs") expand to
    more nodes than memory holds once anything walks the result. A config file has no
    use for them, so they are refused before anything is built, and so is nesting deeper
    than any setting goes (the parser recurses per level: thousands of `[` cost seconds
    before they fail)."""
    import yaml

    depth = 0
    opens = (yaml.FlowSequenceStartToken, yaml.FlowMappingStartToken,
             yaml.BlockSequenceStartToken, yaml.BlockMappingStartToken)
    closes = (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken, yaml.BlockEndToken)
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        if isinstance(token, (yaml.AliasToken, yaml.AnchorToken)):
            mark = token.start_mark
            raise yaml.YAMLError(f"anchors and aliases (&, *) are not allowed (line "
                                 f"{mark.line + 1}, column {mark.column + 1})")
        depth += isinstance(token, opens) - isinstance(token, closes)
        if depth > CONFIG_MAX_DEPTH:
            mark = token.start_mark
            raise yaml.YAMLError(f"nested more than {CONFIG_MAX_DEPTH} levels deep (line "
                                 f"{mark.line + 1}, column {mark.column + 1})")
    return yaml.safe_load(text)


def _read_config_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    import yaml

    try:
        data = _load_yaml(_read_text(path))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else exc
        raise ConfigError(f"cannot read config file {path}: {reason}".splitlines()[0]
                          ) from None
    except RecursionError:  # nested thousands deep
        raise ConfigError(f"cannot read config file {path}: nested too deeply") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must be a mapping of setting: value")
    unknown = sorted(str(k) for k in set(data) - set(_BY_NAME))
    if unknown:
        raise ConfigError(f"unknown setting {unknown[0]!r} in {path}"
                          f"{did_you_mean(unknown[0], setting_names())}")
    return data


def file_with_setting(name: str, value: str) -> tuple[Path, bytes] | None:
    """The config file's path and its new contents with `name: value` added at the end,
    everything already there kept as it is (comments, order); None when the file sets
    `name` to `value` already. ConfigError when it sets another value (the user's choice
    stands) or when the line cannot be added to what the file holds. The caller writes
    it (atomically, at the link's target when the file is a symbolic link)."""
    path = config_dir() / CONFIG_FILE
    setting = _BY_NAME[name]
    _coerce(setting, value, "new value")
    text = _read_text(path) if path.exists() else ""
    data = _read_config_file(path)
    if data.get(name) == value:
        return None
    if name in data:
        raise ConfigError(f"config file {path} sets {name}: {data[name]}; set it to "
                          f"{value} to use it")
    new = text + ("" if not text or text.endswith("\n") else "\n") + f"{name}: {value}\n"
    try:
        ok = _load_yaml(new) == {**data, name: value}
    except Exception:  # noqa: BLE001 - whatever the parser makes of it, it is not ok
        ok = False
    if not ok:  # a file in YAML's flow style ({a: b}) takes no appended line
        raise ConfigError(f"cannot add `{name}: {value}` to config file {path}; add it "
                          "yourself")
    return Path(os.path.realpath(path)), new.encode()


def file_with_sync(remote: str, endpoint_url: str | None) -> tuple[Path, bytes] | None:
    """The config file with its `sync:` section naming this remote (and endpoint), as
    `file_with_setting` does for a top-level setting: None when it already says so. A
    file whose `sync:` says otherwise, or is not a plain mapping, is left to the user
    (ConfigError, naming what it says)."""
    path = config_dir() / CONFIG_FILE
    text = _read_text(path) if path.exists() else ""
    data = _read_config_file(path)
    wanted = {"remote": remote, **({"endpoint_url": endpoint_url} if endpoint_url else {})}
    old = data.get("sync")
    if isinstance(old, dict):
        differs = [k for k, v in wanted.items() if old.get(k) != v]
        if not differs:
            return None
        k = differs[0]
        raise ConfigError(f"config file {path} names another {k} in its sync: section "
                          f"({old.get(k)!r}, not {wanted[k]!r}); edit it there to make "
                          "this one the default")
    if old is not None:
        raise ConfigError(f"config file {path} has a sync: section that is not a mapping; "
                          "set its remote there")
    lines = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in wanted.items())
    new = text + ("" if not text or text.endswith("\n") else "\n") + "sync:\n" + lines
    try:
        ok = _load_yaml(new) == {**data, "sync": wanted}
    except Exception:  # noqa: BLE001 - whatever the parser makes of it, it is not ok
        ok = False
    if not ok:
        raise ConfigError(f"cannot add a sync: section to config file {path}; add it "
                          "yourself")
    return Path(os.path.realpath(path)), new.encode()


# The mappings' settings, by the mapping's name (compaction.summarizer, sync.remote, ...).
SECTIONS: dict[str, tuple[Setting, ...]] = {
    "compaction": COMPACTION, "sync": SYNC, "mcp": MCP, "brief": BRIEF,
    "embeddings": EMBEDDINGS}


def setting_names() -> list[str]:
    """Every name a setting answers to: the top-level ones, and each mapping's keys as
    `mapping.key`."""
    return [s.name for s in SETTINGS] + [f"{section}.{s.name}"
                                         for section, table in SECTIONS.items()
                                         for s in table]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """"; did you mean X?" for a misspelled name close to a known one, else "". A
    mapping's key is matched without its mapping too (`summariser` → compaction.summarizer)."""
    import difflib

    names = sorted(known)
    short = {n.rpartition(".")[2]: n for n in names if "." in n}
    close = difflib.get_close_matches(name, names, n=1) or \
        [short[m] for m in difflib.get_close_matches(name.rpartition(".")[2], short, n=1)]
    return f"; did you mean {close[0]}?" if close else ""


def _coerce(setting: Setting, raw: Any, origin: str) -> Any:
    try:
        if setting.kind is Path:
            return Path(os.path.expanduser(str(raw)))
        if setting.kind in (float, int):
            return _number(setting, raw)
        if setting.kind is bool:
            return _boolean(raw)
        if setting.kind is dict:
            if not isinstance(raw, dict):
                raise ValueError("not a mapping")
            return raw
        if setting.choices and str(raw) not in setting.choices:
            raise ValueError("not one of the choices")
        return str(raw)
    except (TypeError, ValueError, OverflowError):
        shown = repr(raw) if len(repr(raw)) <= 40 else repr(raw)[:39] + "…"
        raise ConfigError(f"invalid value {shown} for {setting.name} ({origin}): "
                          f"{_expected(setting)}") from None


def _boolean(raw: Any) -> bool:
    """YAML's true/false, or their usual spellings in an environment variable."""
    if isinstance(raw, bool):
        return raw
    word = str(raw).strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise ValueError("not true or false")


def _number(setting: Setting, raw: Any) -> float | int:
    """A finite number within the setting's bounds (ValueError otherwise): `.nan`, `.inf`,
    1e400, true and 2.5 entries are refused, not waited on or overflowed later."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise ValueError("not a number")
    value = float(raw)  # "1e3", 1000, 1000.0 alike; a huge int raises OverflowError
    if not math.isfinite(value) or not setting.low <= value <= setting.high:
        raise ValueError("out of range")
    if setting.kind is int:
        if not value.is_integer():
            raise ValueError("not a whole number")
        return int(value)
    return value


def _expected(setting: Setting) -> str:
    if setting.choices:
        return f"expected one of {', '.join(setting.choices)}"
    if setting.kind in (float, int):
        kind = "a whole number" if setting.kind is int else "a number"
        return f"expected {kind} from {setting.low:g} to {setting.high:g}"
    if setting.kind is bool:
        return "expected true or false"
    return f"expected {'a mapping' if setting.kind is dict else 'text'}"


def resolve(*, embeddings_optional: bool = False, **flags: Any) -> Settings:
    """Resolve every setting; `flags` holds command-line values (None = not given).
    With `embeddings_optional` (a hook: its brief and its ingest need no vectors), a
    malformed `embeddings:` section is no error: embeddings are off, and
    `embeddings_problem` says why."""
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
    settings.values["compaction"] = _compaction(settings.values["compaction"],
                                                settings.sources["compaction"])
    settings.values["sync"] = _section("sync", SYNC, settings.values["sync"],
                                       settings.sources["sync"])
    settings.values["mcp"] = _section("mcp", MCP, settings.values["mcp"],
                                      settings.sources["mcp"])
    settings.values["brief"] = _section("brief", BRIEF, settings.values["brief"],
                                        settings.sources["brief"])
    try:
        settings.values["embeddings"] = _embeddings(settings.values["embeddings"],
                                                    settings.sources["embeddings"])
    except ConfigError as exc:
        if not embeddings_optional:
            raise
        settings.values["embeddings"] = {**{s.name: s.default for s in EMBEDDINGS},
                                         "provider": "none"}
        settings.embeddings_problem = exc.message
    for name, table in (("compaction", COMPACTION), ("sync", SYNC), ("mcp", MCP),
                        ("brief", BRIEF), ("embeddings", EMBEDDINGS)):
        # A mapping's key set by its own variable: say so where the mapping's source is.
        given = [f"env {s.env}" for s in table if s.env and os.environ.get(s.env)]
        if given:
            shown = [] if settings.sources[name] == "default" else [settings.sources[name]]
            settings.sources[name] = ", ".join(given + shown)
    if settings.values["vault"] is None:
        settings.values["vault"] = default_vault()
    if settings.values["user"] is None:
        settings.values["user"] = _login_name()
        settings.sources["user"] = "default (login name)"
    validate_name("org", settings.org)
    validate_name("user", settings.user)
    return settings
