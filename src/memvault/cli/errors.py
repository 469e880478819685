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
                 "transcript or import file; `verify` or `audit` found an error; an embeddings "
                 "endpoint's answer that is not the embeddings asked for"),
    (EX_NOINPUT, "not found: a memory id, session, vault or input file; a user with no "
                 "memory in that org, or an org with no users; a sync folder or bucket"),
    (EX_IOERR, "cannot write: a full disk, a vault mounted read-only; nothing was changed"),
    (EX_TEMPFAIL, "retry later: a user's lock was not obtained in time; a compaction unit "
                  "whose summariser failed on it; an embeddings endpoint or a sync remote "
                  "overloaded, failing or not reachable"),
    (EX_NOPERM, "refused: a wrong key or passphrase, a secret, a frozen user, an "
                "unconfirmed destroy, a key backup of another vault"),
    (EX_CONFIG, "configuration: no key, an unsafe key file, a failing key command, an OS "
                "keyring missing or locked, a bad config file, a summariser that cannot be "
                "started or fails before it answers; an embeddings endpoint that refuses "
                "the key or has no such model; S3 credentials missing or refused"),
    (EX_INTERRUPTED, "interrupted (Ctrl-C): one line says what was kept; every write is "
                     "atomic or journalled, and the same command run again resumes"),
)

FLAGS = {
    "importance": "--importance", "session": "--session", "limit": "--limit",
    "query": "--query", "confirm": "--confirm", "strict": "--strict",
    "passphrase": "--passphrase", "type": "--type", "category": "--category",
    "tag": "--tag", "format": "--format", "org": "--org", "user": "--user",
    "force": "--force", "output": "--output", "passphrase_file": "--passphrase-file",
    "after": "--after", "before": "--before", "as_of": "--as-of", "mode": "--mode",
    "agent": "--agent",
}
# Where a vault's master key can come from, for the hints of a missing key.
KEY_SOURCES = ("--key-file / MEM_KEY_FILE, MEM_KEY_COMMAND, or the OS keyring "
               "(MEM_KEY_SOURCE=keyring)")
HINTS = {
    "init": "run `mem init` (or set --vault / MEM_VAULT)",
    "no-key": "run `mem init`, or set MEM_KEY_FILE, MEM_KEY_COMMAND or MEM_MASTER_KEY",
    # A vault that holds memory: only its own key opens it; a new one never helps.
    "restore-key": "restore it from its backup with `mem key restore FILE`, or point mem "
                   f"at it: {KEY_SOURCES}",
    "no-key-empty": "restore it with `mem key restore FILE` or point mem at it "
                    f"({KEY_SOURCES}); as the vault holds no memory yet, you may instead "
                    "remove its vault.json and run `mem init` for a new key",
    "keyring-none": "install or start one (macOS Keychain, Windows Credential Locker, a "
                    "Secret Service such as GNOME Keyring or KWallet), or keep the key in "
                    "a file: unset MEM_KEY_SOURCE / key_source and use MEM_KEY_FILE",
    "keyring-locked": "unlock it (log in to the desktop session) and try again; where it "
                      "cannot be reached (cron, ssh), use MEM_KEY_FILE or MEM_KEY_COMMAND",
    "keyring-failed": "check that it runs and is unlocked; where it cannot be reached "
                      "(cron, ssh), use MEM_KEY_FILE or MEM_KEY_COMMAND",
    # A backend that does not encrypt at rest (keyrings.alt's files): never used.
    "keyring-unsafe": "select one that encrypts (macOS Keychain, Windows Credential Locker, "
                      "a Secret Service such as GNOME Keyring or KWallet) with "
                      "PYTHON_KEYRING_BACKEND, or keep the key in a file (`mem init` "
                      "without --keyring, MEM_KEY_FILE) or behind MEM_KEY_COMMAND",
    "keyring-unsafe-key": "move the key out: `mem key backup --output FILE` still reads it "
                          "there; then remove key_source: keyring from the config file (and "
                          "MEM_KEY_SOURCE) and `mem key restore FILE` puts it in a key file",
    "unfreeze": "`mem unfreeze` allows them again",
    "ingest": "store long transcripts with `mem ingest`",
    "ingest-formats": "`mem ingest --help` lists the formats it reads",
    "verify": "run `mem verify`",
    "destroy-again": "run `mem destroy` again",
    "scan": "use --scan to ingest a folder",
    "passphrase": "there is no terminal to ask for it; use MEM_KEY_FILE or "
                  "MEM_KEY_COMMAND for unattended runs",
    "repair": "`mem verify --repair` sets it right",
    "rebuild-state": "run `mem verify --repair` to rebuild the state from the files",
    "first-write": "a first `mem add`, `mem ingest`, `mem pref set` or `mem import` "
                   "creates it",
    "summarizer": "check --summarizer or compaction.summarizer in the config file",
    "embed": "run `mem embed` (or let cron run it beside `mem compact`)",
    "embed-rebuild": "run `mem embed --rebuild` to embed everything again with the "
                     "configured model (or configure the model the vectors were made by)",
    "embeddings-none": "set embeddings.provider in the config file (or "
                       "MEM_EMBEDDINGS_PROVIDER) to builtin or openai",
    "embeddings": "check the embeddings: settings (`mem config show`), or set "
                  "MEM_EMBEDDINGS_PROVIDER=none to search by words only",
    "embeddings-key": "check embeddings.key_command or embeddings.key_env in the config file",
    "reinstall": "reinstall mem",
    "import-json": "`mem import` takes the JSON export (`mem export -o FILE`, whose "
                   "default --format is json)",
}


def word(exc: MemError) -> str:
    """The one line the CLI prints for a known error."""
    message = exc.message
    flag = FLAGS.get(exc.field or "")
    source = str(exc.details.get("source") or "")
    if flag and source and not source.startswith("flag"):
        # A name the user did not type here (MEM_USER, the config file): say where from.
        message = f"{message} ({_source(exc.field or '', source)})"
    elif flag:
        field = exc.field or ""
        if message.startswith(field + " "):
            message = flag + message[len(field):]
        elif flag not in message:
            message = f"{message} ({flag})"
    if exc.hint in HINTS:
        message = f"{message}; {HINTS[exc.hint]}"
    return message


def _source(name: str, source: str) -> str:
    """Where a setting came from, as config.resolve records it, in the CLI's words."""
    kind, _, rest = source.partition(" ")
    if kind == "env":
        return f"{name} from {rest}"
    if kind == "file":
        return f"{name} from the config file {rest}"
    return f"{name}: the login name" if "login" in rest else f"{name}: the default"
