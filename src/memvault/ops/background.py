"""Embedding after a write, out of the way of whoever waits on it (SPEC §11).

`mem add`, `mem ingest` and an agent's memory_add store first and answer; the records
they stored are then embedded by a detached `mem embed` child that outlives the command,
given their ids on its stdin (never the key, never the text), at low priority and for a
bounded time. A hook's ingest already runs detached: it embeds in its own process once
the transcript is stored (`embed_now`). Whatever is left (a child killed, a provider
down) is pending: `mem embed` (cron, beside compaction) finishes it.

This module is imported by `mem add`: it imports nothing heavy (no numpy, no model).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Collection
from pathlib import Path

from memvault.config import Settings

# The most ids handed to the child (they go through a pipe, at most its buffer); a write
# that stored more (a long transcript) leaves the child to find what it stored itself.
MAX_IDS = 1500
# How long a background child may embed before it stops (what is left stays pending).
TIME_LIMIT_S = 900
NICE = 10  # below the agent and whatever the user waits on
LOG_FILE = "hooks.log"  # the hook log: `mem doctor` reads the failures logged there
# What of mem's environment the child needs: where the config is (the embeddings
# provider, the key's source) and the key's source itself. Vault, org, user and a key
# file named on the command line go as options.
PASSED = ("MEM_CONFIG_DIR", "MEM_LOG_DIR", "MEM_MASTER_KEY", "MEM_KEY_FILE",
          "MEM_KEY_COMMAND", "MEM_KEY_COMMAND_TIMEOUT", "MEM_KEY_SOURCE", "MEM_LOCK_TIMEOUT")
PASSED_PREFIX = "MEM_EMBEDDINGS_"


def wanted(settings: Settings) -> bool:
    """Whether records are embedded after each write (`embeddings.background`, and a
    provider that is not none)."""
    cfg = settings.embeddings
    return bool(cfg.background) and cfg.provider != "none"


def mem_command() -> list[str]:
    """How to run this same mem again: the installed script, or the interpreter with
    `-m memvault` (with -P: the current folder is not searched for modules)."""
    script = Path(sys.argv[0])
    if script.name in ("mem", "memvault") and script.exists():
        return [str(script.resolve())]
    return [sys.executable, "-P", "-m", "memvault"]


def child_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The child's environment: ours without mem's settings (a key command may need the
    rest: an agent socket, a password store), but those it needs."""
    from memvault.process import without_mem

    env = dict(os.environ if environ is None else environ)
    kept = {k: v for k, v in env.items() if k in PASSED or k.startswith(PASSED_PREFIX)}
    return {**without_mem(env), **kept, "MEM_ACTOR": "embed:background"}


def start(settings: Settings, memory_ids: Collection[str]) -> bool:
    """Start a detached `mem embed` for the records with these ids, when embedding in the
    background is wanted and there is something to embed; whether one was started. A
    child that cannot be started is no error of the write that asked (its records stay
    pending)."""
    if not memory_ids or not wanted(settings):
        return False
    argv = [*mem_command(), "embed", "--background", "--json",
            f"--vault={settings.vault}", f"--org={settings.org}", f"--user={settings.user}"]
    if settings.key_file is not None and settings.sources.get("key_file", "").startswith("flag"):
        argv.append(f"--key-file={settings.key_file}")
    ids = sorted(memory_ids)
    stdin = b"" if len(ids) > MAX_IDS else "\n".join(ids).encode()
    try:
        from memvault.process import detach
        from memvault.storage import fsio

        fsio.ensure_dir(settings.log_dir)
        detach(argv, child_env(), stdin, settings.log_dir / LOG_FILE)
    except (OSError, ValueError):
        return False
    return True


def read_ids(data: str) -> list[str] | None:
    """The ids a child was given on its stdin; None when none were (the write stored
    more than MAX_IDS: the child embeds whatever is pending)."""
    ids = [line.strip() for line in data.splitlines()[:MAX_IDS] if line.strip()]
    return ids or None


def bound_this_process() -> None:
    """For a background child: a low priority, and an end after TIME_LIMIT_S (each batch
    added so far is kept; the rest stays pending)."""
    import contextlib
    import signal

    with contextlib.suppress(OSError, AttributeError):
        os.nice(NICE)
    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(TIME_LIMIT_S)
