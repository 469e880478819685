"""What operations return: frozen dataclasses that a surface renders or serialises.

`to_dict()` is the JSON shape of SPEC §6 and docs/cli.md; the CLI prints it with
`--json`, and any other surface (an MCP server) returns the same document. The base class
and the results of add, show, list and search live in model/record_results.py (imported
here too), so that those commands do not define every other result at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from memvault.model.record_results import AddResult as AddResult
from memvault.model.record_results import RecordList as RecordList
from memvault.model.record_results import RecordResult as RecordResult
from memvault.model.record_results import Result
from memvault.model.record_results import SearchHit as SearchHit
from memvault.model.record_results import SearchResult as SearchResult
from memvault.model.records import Record


@dataclass(frozen=True)
class KeyBackupStatus(Result):
    """Whether the vault's master key was backed up (`mem key backup`), from vault.json:
    `state` is "backed-up" (at `backed_up_at`), "never", or "other-key" (the recorded
    backup is of a key that is not the vault's: it would not restore this vault)."""

    vault: str
    state: Literal["backed-up", "never", "other-key"]
    backed_up_at: str | None = None

    @property
    def backed_up(self) -> bool:
        return self.state == "backed-up"


@dataclass(frozen=True)
class KeyBackupResult(Result):
    _internal: ClassVar[frozenset[str]] = frozenset({"recorded"})
    output: str
    created_at: str
    kdf: str  # the passphrase KDF, its parameters in the file's header
    format: str
    recorded: bool  # noted in vault.json (false when the vault takes no writes)


@dataclass(frozen=True)
class KeyRestoreResult(Result):
    _internal: ClassVar[frozenset[str]] = frozenset({"config_file"})
    vault: str
    key_source: str  # where the key now is, in words
    key_file: str | None  # the key file written (or found holding the key already)
    written: bool  # false: the same key was there already
    config_file: str | None = None  # the config file that now selects the keyring


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


@dataclass(frozen=True)
class HookInstallResult(Result):
    settings: str
    changed: bool
    events: tuple[str, ...]
    backup: str | None
    # With `--mcp`, when the agent keeps its MCP servers in another file: that file's change.
    mcp: HookInstallResult | None = None


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


# --- mem setup and mem doctor -----------------------------------------------------------------


@dataclass(frozen=True)
class SetupChange(Result):
    """One file `mem setup` changes (or would): mem's entries added or brought up to
    date ("add"), or taken out ("remove")."""

    file: str
    action: str
    entries: tuple[str, ...]  # hook events, "mcp" (mem's MCP server), "features.codex_hooks"
    backup: str | None = None


@dataclass(frozen=True)
class AgentSetup(Result):
    """One agent as `mem setup` found it, and what it changed there (or would)."""

    _internal: ClassVar[frozenset[str]] = frozenset({"exit_code"})
    name: str  # as in `mem hook NAME`
    label: str
    found: bool
    version: str | None  # as the agent's `--version` printed it; None when unknown
    binary: str | None  # where it is on PATH
    config_dir: str
    changes: tuple[SetupChange, ...] = ()
    notes: tuple[str, ...] = ()  # what the user must do or know (trust, an upgrade)
    error: str | None = None  # why nothing was changed for this agent
    exit_code: int = 0


@dataclass(frozen=True)
class SetupResult(Result):
    agents: tuple[AgentSetup, ...]
    dry_run: bool
    undo: bool
    notes: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return any(a.changes for a in self.agents)

    @property
    def exit_code(self) -> int:
        """0, or the code of the first agent that could not be set up."""
        return next((a.exit_code for a in self.agents if a.exit_code), 0)


OK, WARNING, ERROR = "ok", "warning", "error"


@dataclass(frozen=True)
class Finding(Result):
    """One line of `mem doctor`: what a check found, and the step that sets it right.

    `fix` is symbolic, as an error's hint is (the CLI says "reindex" as `mem reindex`);
    `subject` is what it applies to (an agent, a file), for the surface's wording."""

    _internal: ClassVar[frozenset[str]] = frozenset({"subject", "exit_code"})
    check: str  # which check: "key", "vault", "index", "agent:codex", ...
    severity: str  # OK, WARNING or ERROR
    what: str
    fix: str | None = None
    subject: str | None = None
    exit_code: int = 0  # an error's sysexits code (errors.py)


@dataclass(frozen=True)
class DoctorResult(Result):
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        """Healthy: nothing to warn about, nothing wrong."""
        return all(f.severity == OK for f in self.findings)

    def exit_code(self, strict: bool = False) -> int:
        """The first error's code; else 1 for a warning when `strict`; else 0."""
        for finding in self.findings:
            if finding.severity == ERROR:
                return finding.exit_code or 1
        return 1 if strict and not self.ok else 0

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "findings": [f.to_dict() for f in self.findings]}
