"""`mem doctor`, the vault's side: where the key comes from, the vault, the user, the
index, compaction and disk, each one line (a Finding) with the step that sets it right.

The vault is opened once (the Probe); each check is then a small function of the probe
that yields its findings, listed in CHECKS. A surface adds its own the same way (the
agents' wiring and the hook log: integrations/wiring.py). Nothing here prompts, decrypts
a record or writes to the vault beyond what a normal read writes (opening applies a
pending migration, reading the state finishes an interrupted compaction step): a
passphrase-protected key file is reported, not opened.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from memvault.config import Settings
from memvault.errors import EX_CONFIG, EX_FAILURE, DataError, MemError, NotFound, PassphraseNeeded
from memvault.model.machine_results import ERROR, OK, WARNING, DoctorResult, Finding
from memvault.model.records import DOC_FILES, now_iso, parse_time
from memvault.storage.layout import VAULT_FILE
from memvault.storage.state import UserState
from memvault.vault.vault import Vault

if TYPE_CHECKING:
    from memvault.crypto.keys import MasterKey
    from memvault.vault.keysource import KeySource

# A line of a session file beside its sealed record: its clear header (id, time, key
# version, nonce) and newline, measured on real vaults. Compaction's own estimate counts
# the sealed part (ops/compact.py `tokens`); the doctor has only file sizes.
LINE_HEADER_BYTES = 125
STALE_COMPACTION = timedelta(days=7)  # work waiting longer than this is worth a warning
LOW_DISK = 100 << 20  # free bytes under which writes are about to fail


@dataclass
class Probe:
    """What every check reads, opened once: None where opening stopped (its finding
    says why)."""

    settings: Settings | None = None
    key_source: KeySource | None = None  # where the key comes from (not read)
    vault: Vault | None = None
    state: UserState | None = None
    now: datetime = field(default_factory=lambda: parse_time(now_iso()))


Check = Callable[[Probe], Iterable[Finding]]


def diagnose(settings: Callable[[], Settings], extra: Sequence[Check] = ()) -> DoctorResult:
    """Open what can be opened, then run every check (CHECKS, then `extra`). A check that
    fails is one error line, never the end of the others."""
    findings, probe = _open(settings)
    for check in (*CHECKS, *extra):
        try:
            findings.extend(check(probe))
        except MemError as exc:
            findings.append(_failed(_name(check), exc))
        except Exception as exc:  # noqa: BLE001 - one check must not hide the others
            if os.environ.get("MEM_DEBUG"):
                raise
            findings.append(Finding(_name(check), ERROR, f"{_name(check)}: the check failed "
                                    f"unexpectedly ({type(exc).__name__})",
                                    exit_code=EX_FAILURE))
    return DoctorResult(tuple(findings))


def _name(check: Check) -> str:
    return getattr(check, "__name__", "check").strip("_").replace("_", "-")


def _failed(check: str, exc: MemError, fix: str | None = None) -> Finding:
    return Finding(check, ERROR, f"{check}: {exc.message}", fix or exc.hint,
                   exit_code=exc.exit_code)


# --- opening: configuration, key, vault, user (each needs the one before) ----------------------


def _open(make_settings: Callable[[], Settings]) -> tuple[list[Finding], Probe]:
    """The configuration, the key, the vault, the user's state: each step needs the one
    before, and says in a finding why it stopped."""
    probe, findings = Probe(), list[Finding]()
    try:
        probe.settings = make_settings()
    except MemError as exc:  # a bad config file or name: nothing else can be looked at
        return [_failed("config", exc)], probe
    master = _key(probe, probe.settings, findings)
    if master is not None and _vault(probe, probe.settings, master, findings):
        _user(probe, findings)
    return findings, probe


def _vault(probe: Probe, settings: Settings, master: MasterKey,
           findings: list[Finding]) -> bool:
    try:
        probe.vault = Vault(settings, master=master)
    except MemError as exc:  # none there, damaged, or another key's
        findings.append(_failed("vault", exc, "init" if isinstance(exc, NotFound) else None))
        return False
    findings.append(Finding("vault", OK, f"vault: {probe.vault.root}, org {probe.vault.org}"))
    return True


def _user(probe: Probe, findings: list[Finding]) -> None:
    vault = probe.vault
    assert vault is not None
    if not vault.exists():
        findings.append(Finding("user", OK, f"user {vault.user}: no memory yet (made by the "
                                "first write)"))
        return
    try:
        state = probe.state = vault.state()
    except MemError as exc:  # damaged (verify --repair rebuilds it), or the lock is held
        findings.append(_failed("user", exc, "repair" if isinstance(exc, DataError) else None))
        return
    records = sum(state.live.values()) + sum(state.archived.values())
    if state.frozen:
        findings.append(Finding("user", WARNING, f"user {vault.user} is frozen: reads work, "
                                "writes are refused (the hooks' transcripts too)",
                                "unfreeze"))
    else:
        findings.append(Finding("user", OK, f"user {vault.user}: {_count(records, 'record')}"
                                f", key epoch {state.key_version}"))


def _key(probe: Probe, settings: Settings, findings: list[Finding]) -> MasterKey | None:
    """The master key, from the source that wins (SPEC §4); None when there is none to
    use here. A key command is run, as every command and hook runs it."""
    from memvault.vault.keysource import key_source, load_master_key

    source = probe.key_source = key_source(settings)
    if source.kind == "none":
        # A vault that is there opens with its own key only: a new one never helps.
        fix = "restore-key" if (settings.vault / VAULT_FILE).exists() else "init"
        findings.append(Finding("key", ERROR, f"key: none (no key source is set, and "
                                f"there is no key file at {source.path})", fix,
                                exit_code=EX_CONFIG))
        return None
    where = {"file": f"key file {source.path}" + (f" ({source.where})" if source.where
                                                   else ""),
             "command": "MEM_KEY_COMMAND",
             "keyring": "the OS keyring",
             "env": "MEM_MASTER_KEY (the weakest source: every process started from this "
                    "environment inherits it)"}[source.kind]
    key_check = None
    if source.kind == "keyring":
        # The keyring's entry is named by the vault (vault.json), as when it is opened.
        key_check = _keyring_entry(settings, findings)
        if key_check is None:
            return None
    try:
        master = load_master_key(settings, key_check=key_check)
    except PassphraseNeeded:
        findings.append(Finding("key", WARNING, f"key: {where} is passphrase-protected: not "
                                "opened here (it would ask), and hooks, the MCP server and "
                                "cron cannot open it", "key-source"))
        return None
    except MemError as exc:
        loose = source.path is not None and source.kind == "file" and _loose(source.path)
        findings.append(Finding("key", ERROR, f"key: {exc.message}",
                                "chmod" if loose else exc.hint,
                                str(source.path) if loose else None, exc.exit_code))
        return None
    # The keyring's entry, with the backend that holds it.
    findings.append(Finding("key", OK, f"key: {master.source if key_check else where}"))
    return master


def _keyring_entry(settings: Settings, findings: list[Finding]) -> str | None:
    """The key check value that names the vault's entry in the OS keyring; None, with
    findings, when there is no vault to name one (the backend is judged all the same:
    one that does not encrypt is an error before any vault is made)."""
    from memvault.vault.keysource import keyring_backend
    from memvault.vault.vault import read_meta

    try:
        return str(read_meta(settings.vault)["key_check"])
    except MemError as exc:
        missing = exc
    try:
        backend = keyring_backend()
    except MemError as exc:
        findings.append(_failed("key", exc))
    else:
        findings.append(Finding("key", OK, f"key: the OS keyring, {backend} (the vault "
                                "names its entry)"))
    findings.append(_failed("vault", missing, "init" if isinstance(missing, NotFound)
                            else None))
    return None


def _loose(path: os.PathLike[str]) -> bool:
    """Whether a key file is readable or writable by others than its owner."""
    try:
        return bool(os.stat(path).st_mode & (stat.S_IRWXG | stat.S_IRWXO))
    except OSError:
        return False


# --- the checks, in the order they are shown ---------------------------------------------------


def _opened(probe: Probe) -> tuple[Settings, Vault, UserState] | None:
    if probe.settings is None or probe.vault is None or probe.state is None:
        return None
    return probe.settings, probe.vault, probe.state


def index(probe: Probe) -> Iterator[Finding]:
    """The keyed-term index: there, current (its stamp), opening, holding every record."""
    from memvault.index.base import IndexUnavailable

    opened = _opened(probe)
    if opened is None:
        return
    _, vault, state = opened
    search = vault.search_index(state.key_version)
    rebuilt = "the next search rebuilds it, or now"
    if not search.path.is_dir():
        yield Finding("index", WARNING, f"index: missing; {rebuilt}", "reindex")
        return
    try:
        search.open()
    except IndexUnavailable as exc:
        yield Finding("index", WARNING, f"index: cannot be opened ({exc}); {rebuilt}",
                      "reindex")
        return
    if not search.stamp.present():
        yield Finding("index", WARNING, "index: stale (a write stopped before it was brought "
                      f"up to date); {rebuilt}", "reindex")
        return
    documents = int(search.searcher().num_docs)
    records = sum(state.live.values()) + sum(state.archived.values())
    if state.counted and documents != records:
        yield Finding("index", WARNING, f"index: {_count(documents, 'document')} for "
                      f"{_count(records, 'record')}; {rebuilt}", "reindex")
        return
    yield Finding("index", OK, f"index: current, {_count(documents, 'document')}")


def compaction(probe: Probe) -> Iterator[Finding]:
    """About how many messages the next compaction would summarise and archive, from
    the counters, file sizes and times, and the thresholds (nothing is read or
    decrypted; `mem compact --dry-run` lists exactly)."""
    opened = _opened(probe)
    if opened is None:
        return
    settings, vault, state = opened
    waiting, sessions, tokens = _backlog(settings, vault, state, probe.now)
    limit = settings.compaction.max_active_tokens
    active = f"about {tokens:,} of {limit:,} tokens active"
    if not waiting:
        yield Finding("compaction", OK, f"compaction: nothing waiting ({active})")
        return
    what = (f"about {_count(waiting, 'message')} in {_count(sessions, 'session')} wait "
            f"({active})")
    last = state.last_compaction
    ran = _when(last)
    if ran is not None and probe.now - ran < STALE_COMPACTION:
        yield Finding("compaction", OK, f"compaction: {what}")
    else:
        yield Finding("compaction", WARNING, f"compaction: {what}", "compact")


def last_compaction(probe: Probe) -> Iterator[Finding]:
    """When compaction last ran for this user, and how it went (compaction notes it in
    the state)."""
    opened = _opened(probe)
    if opened is None:
        return
    last = opened[2].last_compaction
    ran = _when(last)
    if last is None or ran is None:
        yield Finding("last-compaction", OK, "last compaction: never run for this user")
        return
    from memvault.ops.brief import age

    done = (f"{_count(int(last.get('summaries_added') or 0), 'summary', 'summaries')} "
            f"added, {_count(int(last.get('archived') or 0), 'message')} archived")
    problems = int(last.get("problems") or 0)
    ago = age(str(last["at"]), probe.now)
    ago = "just now" if ago == "now" else f"{ago} ago"
    when = f"last compaction: {ago} ({str(last['at'])[:10]})"
    if problems:
        yield Finding("last-compaction", WARNING, f"{when}, {done}, {problems} left for the "
                      "next run (busy, or the summariser failed)", "compact")
    else:
        yield Finding("last-compaction", OK, f"{when}, {done}")


def last_sync(probe: Probe) -> Iterator[Finding]:
    """With a sync remote set: when this user last synced, and how many records wait to
    go (ids held here that the last sync did not see: clear line headers and the two
    small documents, nothing else decrypted)."""
    opened = _opened(probe)
    if opened is None:
        return
    settings, vault, _ = opened
    remote = settings.sync["remote"]
    if not remote:
        return
    from memvault.errors import MemError
    from memvault.ops import sync
    from memvault.storage.remote import canonical, folder_of

    try:
        folder = folder_of(remote)  # a folder is looked at; a service is not called
        remote = canonical(remote)
    except MemError as exc:
        yield Finding("sync", WARNING, f"sync: {exc.message}: `mem sync` fails until "
                      "sync.remote (config.yaml or MEM_SYNC_REMOTE) names a folder or "
                      "s3://bucket/prefix")
        return
    there = folder is None or folder.is_dir()
    if not there:
        yield Finding("sync", WARNING, f"sync: the sync folder {folder} is not there (a "
                      "disk not mounted?): `mem sync` fails until it is")
    last = sync.last_sync(vault)
    if last is None or not last.get("at"):
        yield Finding("sync", WARNING, f"sync: never synced with {remote}", "sync")
        return
    if sync.same_remote(str(last.get("remote") or "")) != remote:
        # The remote a plain `mem sync` uses is the one named, not the last one used.
        yield Finding("sync", WARNING, f"sync: never synced with {remote}, which `mem "
                      f"sync` uses (the last sync was with {last.get('remote')})",
                      "sync" if there else None)
        return
    from memvault.ops.brief import age

    waiting = sync.waiting(vault)
    ago = age(str(last["at"]), probe.now)
    ago = "just now" if ago == "now" else f"{ago} ago"
    what = f"sync: last {ago} with {last.get('remote')}, " \
        f"{_count(waiting, 'record')} waiting to go"
    yield Finding("sync", WARNING if waiting else OK, what,
                  "sync" if waiting and there else None)


def disk(probe: Probe) -> Iterator[Finding]:
    """What the user's memory takes on disk, and the room left beside it."""
    import shutil

    opened = _opened(probe)
    if opened is None:
        return
    vault = opened[1]
    used = sum(p.stat().st_size for p in vault.layout.dir.rglob("*") if p.is_file())
    free = shutil.disk_usage(vault.root).free
    what = f"disk: {_bytes(used)} in {vault.layout.dir}, {_bytes(free)} free"
    if free < LOW_DISK:
        yield Finding("disk", WARNING, f"{what}: a write fails once it is full")
    else:
        yield Finding("disk", OK, what)


def key_backup(probe: Probe) -> Iterator[Finding]:
    """Whether the master key was backed up (`mem key backup`, noted in vault.json): a
    key that lives only on this machine is lost with it, and the vault with the key. A
    key command's keeper (a password manager) is taken to hold its own copy."""
    from memvault.ops.keys import backup_status

    if probe.settings is None or probe.vault is None or probe.key_source is None:
        return
    if probe.key_source.kind == "command":
        yield Finding("key-backup", OK, "key backup: the key command's store keeps the key")
        return
    status = backup_status(probe.settings)
    if status.backed_up:
        yield Finding("key-backup", OK, f"key backup: made {str(status.backed_up_at)[:10]}")
    elif status.state == "other-key":
        yield Finding("key-backup", WARNING, "key backup: the one on record is of another "
                      "key and would not open this vault", "key-backup")
    else:
        yield Finding("key-backup", WARNING, "key backup: none on record; losing the key "
                      "loses every memory in the vault", "key-backup")


# The order they are shown in. A new finding is one function of the probe, added here.
def embeddings(probe: Probe) -> Iterator[Finding]:
    """The vectors: made by the configured model, and how many records wait for one
    (from the counters and the store's count: nothing decrypted, no model loaded)."""
    from memvault.ops.embed import configured_model, pending_count, stored_model

    opened = _opened(probe)
    if opened is None:
        return
    settings, vault, _ = opened
    if settings.embeddings.provider == "none":
        yield Finding("embeddings", OK, "embeddings: off (provider none); search is lexical")
        return
    stored, configured = stored_model(vault), configured_model(settings)
    if stored is not None and configured is not None and stored != configured:
        yield Finding("embeddings", WARNING, f"embeddings: the vectors were made by "
                      f"{stored.key()}, the configured model is {configured.key()}; search "
                      "by meaning is off until they are made again", "embed-rebuild")
        return
    pending = pending_count(vault)
    known = stored or configured
    model = known.key() if known is not None else "the configured model"
    if pending > BACKLOG:
        yield Finding("embeddings", WARNING, f"embeddings: {_count(pending, 'record')} "
                      f"wait for a vector ({model}); search ranks them by words only",
                      "embed")
    else:
        waiting = f", {pending} waiting" if pending else ""
        yield Finding("embeddings", OK, f"embeddings: {model}{waiting}")


BACKLOG = 100  # records without a vector that the background is still expected to embed

CHECKS: tuple[Check, ...] = (key_backup, index, compaction, last_compaction, last_sync,
                             embeddings,
                             disk)


# --- helpers ---------------------------------------------------------------------------------


def _backlog(settings: Settings, vault: Vault, state: UserState, now: datetime
             ) -> tuple[int, int, int]:
    """(messages waiting, sessions they are in, estimated active tokens), by compaction's
    triggers applied to what the counters and the files' sizes and times say."""
    from memvault.model.location import session_of
    from memvault.model.records import BYTES_PER_TOKEN, LINE_OVERHEAD

    cfg = settings.compaction
    messages = state.live.get("message", 0)
    layout = vault.layout
    files = {}
    for relpath in layout.line_files():
        name = session_of(relpath)
        try:
            st = layout.path(relpath).stat()
        except OSError:
            continue
        if name is not None and st.st_size:
            files[name] = st
    total = sum(st.st_size for st in files.values())
    docs = 0
    for name in DOC_FILES:
        try:
            docs += layout.path(name).stat().st_size
        except OSError:
            pass
    sealed = max(0, total - messages * LINE_HEADER_BYTES) * 3 // 4
    tokens = (max(0, sealed - messages * (16 + LINE_OVERHEAD)) + docs) // BYTES_PER_TOKEN
    if not messages or not total:
        return 0, 0, tokens
    per_line = total / messages
    cutoff = now - timedelta(days=cfg.archive_after_days)
    read = vault.sessions_read_since(cutoff.date().isoformat()) if cfg.archive_after_days \
        else set()
    waiting, sessions = 0, 0
    for name, st in files.items():
        count = max(1, round(st.st_size / per_line))
        last = datetime.fromtimestamp(st.st_mtime, now.tzinfo)
        if cfg.archive_after_days and last < cutoff and vault.session_mark(name) not in read:
            waiting, sessions = waiting + count, sessions + 1
        elif count > cfg.session_max_messages:
            waiting, sessions = waiting + count - cfg.session_keep_raw, sessions + 1
    if tokens > cfg.max_active_tokens:  # the oldest sessions go until the fraction is met
        budget = int(cfg.compact_fraction * messages)
        if budget > waiting:
            waiting, sessions = budget, max(sessions, 1)
    return waiting, sessions, tokens


def _when(last: dict[str, object] | None) -> datetime | None:
    try:
        return parse_time(str(last["at"])) if last else None
    except (KeyError, ValueError, MemError):
        return None


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{int(size)} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} bytes"
