"""How the CLI words the core's errors: the flag behind a `field`, the command behind a
`hint`. The core's messages name neither (an MCP client has no flags to pass)."""

from __future__ import annotations

from memvault.errors import (
    EX_CONFIG,
    EX_DATAERR,
    EX_FAILURE,
    EX_INTERRUPTED,
    EX_IOERR,
    EX_NOINPUT,
    EX_NOPERM,
    EX_OK,
    EX_TEMPFAIL,
    EX_USAGE,
    MemError,
)

# What each exit code means, for people (the reference in docs/cli.md is made from it).
EXIT_CODES = (
    (EX_OK, "success"),
    (EX_FAILURE, "unexpected failure (a bug: MEM_DEBUG=1 shows the traceback)"),
    (EX_USAGE, "usage error: an unknown option, an invalid name, date, tag or value"),
    (EX_DATAERR, "data error: a vault file fails authentication or is corrupt; a malformed "
                 "transcript or import file; `verify` or `audit` found an error"),
    (EX_NOINPUT, "not found: a memory id, session, user, vault or input file"),
    (EX_IOERR, "cannot write: a full disk, a vault mounted read-only; nothing was changed"),
    (EX_TEMPFAIL, "retry later: a user's lock was not obtained in time; a compaction unit "
                  "whose summariser failed on it"),
    (EX_NOPERM, "refused: a wrong key or passphrase, a secret, a frozen user, an "
                "unconfirmed destroy"),
    (EX_CONFIG, "configuration: no key, an unsafe key file, a failing key command, a bad "
                "config file, a summariser that cannot be started or fails before it "
                "answers"),
    (EX_INTERRUPTED, "interrupted (Ctrl-C): one line says what was kept; every write is "
                     "atomic or journalled, and the same command run again resumes"),
)

FLAGS = {
    "importance": "--importance", "session": "--session", "limit": "--limit",
    "query": "--query", "confirm": "--confirm", "strict": "--strict",
    "passphrase": "--passphrase", "type": "--type", "category": "--category",
    "tag": "--tag", "format": "--format", "org": "--org", "user": "--user",
}
HINTS = {
    "init": "run `mem init` (or set --vault / MEM_VAULT)",
    "no-key": "run `mem init`, or set MEM_KEY_FILE, MEM_KEY_COMMAND or MEM_MASTER_KEY",
    "unfreeze": "`mem unfreeze` allows them again",
    "ingest": "store long transcripts with `mem ingest`",
    "verify": "run `mem verify`",
    "destroy-again": "run `mem destroy` again",
    "scan": "use --scan to ingest a folder",
    "passphrase": "there is no terminal to ask for it; use MEM_KEY_FILE or "
                  "MEM_KEY_COMMAND for unattended runs",
    "repair": "`mem verify --repair` sets it right",
    "rebuild-state": "run `mem verify --repair` to rebuild the state from the files",
    "summarizer": "check --summarizer or compaction.summarizer in the config file",
}


def word(exc: MemError) -> str:
    """The one line the CLI prints for a known error."""
    message = exc.message
    flag = FLAGS.get(exc.field or "")
    if flag:
        field = exc.field or ""
        if message.startswith(field + " "):
            message = flag + message[len(field):]
        elif flag not in message:
            message = f"{message} ({flag})"
    if exc.hint in HINTS:
        message = f"{message}; {HINTS[exc.hint]}"
    return message
