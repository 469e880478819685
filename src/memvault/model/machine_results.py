"""The results of `mem setup`, `mem doctor`, the key's backup and the hook installers,
apart from the rest (model/results.py imports them too), so that `mem doctor` does not
define the results of every other command at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from memvault.model.record_results import Result


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
    vault_created: bool = False  # no vault was there (a new machine): one was made


@dataclass(frozen=True)
class HookInstallResult(Result):
    settings: str
    changed: bool
    events: tuple[str, ...]
    backup: str | None
    # With `--mcp`, when the agent keeps its MCP servers in another file: that file's change.
    mcp: HookInstallResult | None = None


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
