"""How the CLI words the core's errors: the flag behind a `field`, the command behind a
`hint`. The core's messages name neither (an MCP client has no flags to pass)."""

from __future__ import annotations

from memvault.errors import MemError

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
