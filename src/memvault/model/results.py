"""What operations return: frozen dataclasses that a surface renders or serialises.

`to_dict()` is the JSON shape of SPEC §6 and docs/cli.md; the CLI prints it with
`--json`, and any other surface (an MCP server) returns the same document. The base class
and the results of add, show, list and search live in model/record_results.py (imported
here too), so that those commands do not define every other result at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from memvault.model.machine_results import ERROR as ERROR
from memvault.model.machine_results import OK as OK
from memvault.model.machine_results import WARNING as WARNING
from memvault.model.machine_results import AgentSetup as AgentSetup
from memvault.model.machine_results import DoctorResult as DoctorResult
from memvault.model.machine_results import Finding as Finding
from memvault.model.machine_results import HookInstallResult as HookInstallResult
from memvault.model.machine_results import KeyBackupResult as KeyBackupResult
from memvault.model.machine_results import KeyBackupStatus as KeyBackupStatus
from memvault.model.machine_results import KeyRestoreResult as KeyRestoreResult
from memvault.model.machine_results import SetupChange as SetupChange
from memvault.model.machine_results import SetupResult as SetupResult
from memvault.model.record_results import AddResult as AddResult
from memvault.model.record_results import RecordList as RecordList
from memvault.model.record_results import RecordResult as RecordResult
from memvault.model.record_results import Result
from memvault.model.record_results import SearchHit as SearchHit
from memvault.model.record_results import SearchResult as SearchResult
from memvault.model.records import Record


@dataclass(frozen=True)
class InitResult(Result):
    _internal: ClassVar[frozenset[str]] = frozenset({"created", "backup", "config_file"})
    vault: str
    org: str
    user: str
    key_source: str
    created: bool
    key_file: str | None = None  # the master key's file, when it is kept in one
    backup: KeyBackupStatus | None = None
    config_file: str | None = None  # the config file that now selects the keyring


@dataclass(frozen=True)
class Pref(Result):
    key: str
    value: str
    updated_at: str


@dataclass(frozen=True)
class PrefRemoved(Result):
    key: str
    removed: bool
    value: str | None


@dataclass(frozen=True)
class PrefList(Result):
    prefs: tuple[Pref, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"preferences": {p.key: p.value for p in self.prefs}}


@dataclass(frozen=True)
class Redactions(Result):
    rule: str
    count: int
    action: str = "redacted"  # or "withheld": the message holding it was not stored


@dataclass(frozen=True)
class Preview(Result):
    """A message as it would be stored (ingest --dry-run)."""

    role: str
    content: str
    message_id: str | None
    created_at: str | None


@dataclass(frozen=True)
class IngestResult(Result):
    session_id: str
    format: str
    messages_added: int
    messages_skipped: int
    lines_ignored: int
    withheld: int
    redactions: tuple[Redactions, ...]
    dry_run: bool = False
    messages: tuple[Preview, ...] = ()
    summaries: tuple[Preview, ...] = ()
    summaries_added: int = 0
    messages_updated: int = 0  # stored messages that had grown since (replaced)
    ignored: tuple[tuple[str, int], ...] = ()  # lines_ignored by reason

    @property
    def nothing_to_keep(self) -> bool:
        """The transcript held nothing to store, new or old (an agent's session opened and
        quit, the harness's own text, a hook's context): no error, and nothing written."""
        return not (self.messages_added or self.messages_updated or self.messages_skipped
                    or self.withheld or self.summaries_added or self.messages
                    or self.summaries)

    def to_dict(self) -> dict[str, Any]:
        doc = super().to_dict()
        doc["ignored"] = dict(self.ignored)
        if not self.dry_run:
            for key in ("dry_run", "messages", "summaries"):
                doc.pop(key)
        return doc


@dataclass(frozen=True)
class ScanError(Result):
    file: str
    error: str
    exit_code: int


@dataclass(frozen=True)
class ScanResult(Result):
    files_scanned: int
    files_ingested: int
    messages_added: int
    withheld: int
    errors: tuple[ScanError, ...]  # transcripts not stored: corrupt, or refused whole
    passed: tuple[ScanError, ...] = ()  # files that are not transcripts, or unreadable
    files_unchanged: int = 0  # as an earlier scan left them: not read again

    @property
    def exit_code(self) -> int:
        """0 when every transcript found was stored; else the first failure's code."""
        return self.errors[0].exit_code if self.errors else 0


@dataclass(frozen=True)
class BriefEntry(Result):
    memory_id: str | None
    type: str
    section: str
    content: str
    importance: float
    created_at: str
    age: str
    tags: tuple[str, ...]
    inferred: bool = False  # proposed by a compaction summariser, not stated by the user


@dataclass(frozen=True)
class Brief(Result):
    entries: tuple[BriefEntry, ...]
    entry_count: int
    brief_count: int
    generated_at: str
    brief: str
    tokens: int = 0  # the brief's estimated tokens (text/tokens.py)
    # Which bound left entries out ("entries", "tokens", "chars"), or None: all fitted.
    limited_by: str | None = None


@dataclass(frozen=True)
class ForgetPlan(Result):
    """What a forget request names, before anything is erased (also `--dry-run`)."""

    targets: tuple[Record, ...]
    # Summaries that stay, made again without the records that go (forget --query).
    remade: tuple[str, ...] = ()
    held: int = 0  # how many records the user has (forget --query)
    # A query that would take a large share of them: confirmed again by count.
    broad: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"dry_run": True, "would_delete": len(self.targets),
                "memory_ids": [r.memory_id for r in self.targets],
                "summaries_rebuilt": list(self.remade)}


@dataclass(frozen=True)
class ForgetResult(Result):
    deleted_count: int
    memory_ids: tuple[str, ...]
    files_rewritten: tuple[str, ...]
    audit_id: str
    key_rotated: bool
    summaries_rebuilt: tuple[str, ...] = ()  # made again from what was not forgotten


@dataclass(frozen=True)
class ExportResult(Result):
    record_count: int
    path: str | None  # None: written to the stream the caller gave


@dataclass(frozen=True)
class ImportResult(Result):
    imported: int
    skipped: int
    preferences_imported: int


@dataclass(frozen=True)
class DestroyResult(Result):
    destroyed: str
    records_deleted: int
    files_deleted: int
    index_docs_deleted: int
    audit_id: str


@dataclass(frozen=True)
class FreezeResult(Result):
    frozen: bool


@dataclass(frozen=True)
class AuditProblem(Result):
    line: int | None
    problem: str


@dataclass(frozen=True)
class AuditResult(Result):
    entries: tuple[dict[str, Any], ...]
    chain_ok: bool
    problems: tuple[AuditProblem, ...]


@dataclass(frozen=True)
class Problem(Result):
    """One thing `verify` found. `repairable`: `verify --repair` sets it right."""

    file: str
    line: int | None
    problem: str
    severity: str = "error"
    repairable: bool = False


@dataclass(frozen=True)
class VerifyResult(Result):
    ok: bool
    files_checked: int
    records_checked: int
    problems: tuple[Problem, ...]
    repaired: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        doc = super().to_dict()
        if self.repaired is None:
            doc.pop("repaired")
        return doc


@dataclass(frozen=True)
class RepairResult(Result):
    repaired: tuple[str, ...]


@dataclass(frozen=True)
class RotateResult(Result):
    key_version: int
    files_reencrypted: int
    keys_deleted: tuple[int, ...]


@dataclass(frozen=True)
class ReindexResult(Result):
    documents: int


@dataclass(frozen=True)
class Stats(Result):
    org: str
    user: str
    exists: bool
    records: int
    active: int
    archived: int
    superseded: int
    by_type: dict[str, int]
    by_category: dict[str, int]
    sessions: int  # live or compacted
    pref_keys: int  # `mem pref` keys set (records of type preference are in by_type)
    key_version: int | None
    frozen: bool
    bytes_on_disk: int
    audit_entries: int
    vectors_pending: int = 0  # records that wait for a vector (`mem embed`)
    embeddings_model: str | None = None  # what the stored vectors were made by


@dataclass(frozen=True)
class CompactProblem(Result):
    """A user compaction skipped or could not finish (no content, only what went wrong)."""

    org: str
    user: str
    problem: str  # "busy", "failed", "summarizer", "changed"
    message: str
    exit_code: int


@dataclass(frozen=True)
class CompactPreview(Result):
    """One summary a dry run would write (or a run wrote, with --json --verbose)."""

    org: str
    user: str
    reason: str  # "session", "long", "old", "budget", "week"
    sessions: tuple[str, ...]
    messages: int
    span: tuple[str, str]
    summary: str | None  # None when the summariser is an external command (not run)


@dataclass(frozen=True)
class CompactResult(Result):
    """What `mem compact` did, for one user or a whole vault (SPEC §6)."""

    _internal: ClassVar[frozenset[str]] = frozenset({"exit_code"})
    users: int
    sessions_compacted: int
    summaries_added: int
    facts_added: int
    facts_capped: int  # behavioural facts a summariser proposed over the caps: dropped
    archived: int
    deduplicated: int
    rekeyed: int
    skipped_busy: int
    skipped_changed: int
    summarizer_failed: int
    failed: int
    dry_run: bool
    problems: tuple[CompactProblem, ...]
    previews: tuple[CompactPreview, ...]
    exit_code: int


@dataclass(frozen=True)
class UserProblem(Result):
    """A user a run over many skipped or stopped (`mem embed`, `mem sync`): no content,
    only what went wrong."""

    _internal: ClassVar[frozenset[str]] = frozenset({"hint"})
    org: str
    user: str
    problem: str  # "busy", "failed", "frozen" (embed only)
    message: str
    exit_code: int
    hint: str | None = None  # the next step, worded by the surface


@dataclass(frozen=True)
class EmbedResult(Result):
    """What `mem embed` did, for one user or many (SPEC §6): vectors added, records
    still waiting for one, and the model (`provider:model:dims`)."""

    _internal: ClassVar[frozenset[str]] = frozenset({"exit_code"})
    users: int
    embedded: int
    pending: int
    model: str | None
    problems: tuple[UserProblem, ...] = ()
    exit_code: int = 0


@dataclass(frozen=True)
class SyncResult(Result):
    """What `mem sync` moved for one user (SPEC §6): records pushed to the remote and
    pulled from it, records forgotten here because another machine forgot them."""

    pushed: int
    pulled: int
    forgotten: int
    remote: str
    damaged: int = 0  # remote objects that did not open (retried by the next sync)
    erasures_pushed: int = 0  # ids this machine forgot, now forgotten everywhere
    prefs_pushed: int = 0  # preference changes (sets and unsets) sent
    prefs_pulled: int = 0  # another machine's preference changes that won here
    updates_pushed: int = 0  # records held there in an older version (a grown message)
    updates_pulled: int = 0  # records replaced here by another machine's later version
    # When this user holds nothing here or at the remote: the users (org/user) the
    # remote's directory names (another machine's login name, say).
    others: tuple[str, ...] = ()
    destroy_pushed: bool = False  # this machine's destroy, which the remote lacked
    # Records and erasures the remote held at the last sync and lacks now, though
    # nothing erased them (rolled back, emptied, an object deleted): sent again.
    went_back: int = 0


@dataclass(frozen=True)
class SyncAllResult(Result):
    """`mem sync --all-users`: the sums, the users synced, and those that were not
    (`failed`, each with its reason in `problems`: the next run retries them)."""

    _internal: ClassVar[frozenset[str]] = frozenset({"exit_code"})
    pushed: int
    pulled: int
    forgotten: int
    remote: str
    users: tuple[str, ...]
    failed: tuple[str, ...]
    damaged: int = 0  # entries of the remote's directory of users that did not open
    problems: tuple[UserProblem, ...] = ()
    exit_code: int = 0  # 75 when every failure was a busy user, else the first one's
