"""Crash enumeration: run a mutating `mem` command under strace, kill it (SIGKILL, from
the kernel's side of a system call) at the n-th call of one file-changing system call,
then check what is left with the independent oracle (tests/crash_oracle.py), run
`mem verify` (and `--repair` when it finds anything), run the command again, and check
the end state.

The commands are a table: adding one is one `Command` entry. Each names the records it
stores and the seed records it erases by their marker word (a word no other record
holds, which the analyzer keeps as it is), so that the oracle can find them in every
plaintext, in clear in any file, and as a keyed term in every index.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.crash_oracle import (
    Found,
    index_dirs,
    index_is_current,
    key_version,
    org_entries,
    read_user,
    term_counts,
)
from tests.sync_oracle import read_remote

STRACE = shutil.which("strace") or "/usr/bin/strace"
MEM = str(Path(sys.executable).parent / "mem")
MASTER = bytes(range(32))  # a fixed master key: the oracle needs it
ORG, USER = "default", "alice"
INSTALL_STRACE = ("strace is not installed: install it (Debian/Ubuntu: `sudo apt-get "
                  "install strace`; Fedora: `sudo dnf install strace`) to run the crash "
                  "enumeration")

# The system calls that change files, as mem, Python and Tantivy make them here
# (`strace -f -c` of each command): writes and syncs, renames, unlinks, truncation, the
# link of create_new, and the directories a rebuild and a destroy make and remove.
SYSCALLS = ("write", "fsync", "fdatasync", "rename", "renameat", "renameat2", "unlink",
            "unlinkat", "ftruncate", "link", "linkat", "mkdir", "rmdir")

# Seed records, by marker word: (type, session or None, tags, created_at or None).
SEED: dict[str, tuple[str, str | None, list[str], str | None]] = {
    "okapi": ("fact", None, [], None),
    "tapir": ("preference", None, ["drink"], None),
    "gecko": ("fact", None, ["trip"], None),
    "axolotl": ("fact", None, [], None),
    "kiwi": ("message", "s1", [], None),
    "quokka": ("message", "s1", [], None),
    "pangolin": ("message", "s1", [], None),
    "dugong": ("message", "s3", [], None),
    "ibis": ("message", "s2", [], "2020-03-01T10:00:00Z"),
}
SEED_FORGOTTEN = ("wombat",)  # forgotten before the template was taken: never back
SEED_SETTINGS = {"editor": "vim"}
IMPORTED = ("marmot", "lemur")  # in the export file `import` reads (user carol's)
SYNCED = "vicuna"  # pushed to the template's sync remote by another machine


def text_of(word: str) -> str:
    return f"The {word} note is kept here"


@dataclass(frozen=True)
class Command:
    name: str
    argv: tuple[str, ...]  # `{id:WORD}` is the seed record's id, `{import}` the export
    stdin: str = ""
    adds: tuple[str, ...] = ()  # marker words of the records it stores
    forgets: tuple[str, ...] = ()  # marker words of the seed records it erases
    settings: dict[str, str | None] = field(default_factory=dict)  # after it: None = gone
    retires: bool = False  # every key the seed was sealed under is deleted
    destroys: bool = False
    rerun: tuple[int, ...] = (0,)  # what running it again after a kill may exit with
    summarises: bool = False  # it adds summaries that repeat the seed's words
    summary_of: tuple[str, ...] = ("kiwi", "quokka", "pangolin")  # ...these, in one
    syncs: bool = False  # it syncs with the folder remote beside the vault


# What the external summariser of `compact-facts` proposes, by marker word: a fact of
# each behavioural type (kept in preferences.json) and one kept in CLAUDE.md.
FACTS = {"narwhal": "preference", "caracal": "instruction", "meerkat": "correction",
         "tamarin": "fact"}
# It makes none of the system calls the enumeration kills at (it answers with writev, not
# write), so every kill point is one of mem's own; -I -B: no environment, no bytecode.
SUMMARIZER = f"""#!{sys.executable} -IB
import json, os, re, sys
said = re.findall(r"The (\\w+) note", sys.stdin.read())
facts = [{{"type": kind, "content": "The " + word + " note is kept here"}}
         for word, kind in {FACTS!r}.items()]
answer = {{"summary": "Talked about " + ", ".join(said), "facts": facts}}
os.writev(1, [json.dumps(answer).encode()])
"""

INGESTED = "\n".join(json.dumps({"id": f"i{n}", "role": "user", "content": text_of(word),
                                 "timestamp": "2026-01-02T03:04:05Z"})
                     for n, word in enumerate(("civet", "yak"))) + "\n"

COMMANDS = (
    Command("add", ("add", text_of("bison")), adds=("bison",)),
    Command("ingest", ("ingest", "-", "--format", "jsonl", "--session", "s5"),
            stdin=INGESTED, adds=("civet", "yak")),
    Command("pref-set", ("pref", "set", "theme", "dark"), settings={"theme": "dark"}),
    Command("pref-unset", ("pref", "unset", "editor"), settings={"editor": None},
            rerun=(0, 66)),
    Command("forget-id", ("forget", "{id:quokka}"), forgets=("quokka",), rerun=(0, 66)),
    Command("forget-session", ("forget", "--session", "s3"), forgets=("dugong",),
            rerun=(0, 66)),
    Command("forget-before", ("forget", "--before", "2021-01-01"), forgets=("ibis",),
            rerun=(0, 66)),
    Command("forget-tag", ("forget", "--tag", "trip"), forgets=("gecko",), rerun=(0, 66)),
    Command("forget-query", ("forget", "--query", "axolotl", "--yes"), forgets=("axolotl",),
            rerun=(0, 66)),
    Command("forget-now", ("forget", "{id:pangolin}", "--now"), forgets=("pangolin",),
            retires=True, rerun=(0, 66)),
    Command("rotate-key", ("rotate-key",)),
    Command("rotate-key-now", ("rotate-key", "--now"), retires=True),
    Command("import", ("import", "{import}"), adds=IMPORTED),
    Command("destroy", ("destroy", "--confirm", USER), destroys=True, rerun=(0, 66)),
    Command("verify-repair", ("verify", "--repair")),
    # Session s1 whole: its messages move to archive/, a summary joins CLAUDE.md.
    Command("compact", ("compact", "--session", "s1"), summarises=True, rerun=(0, 66)),
    # The same with an external summariser that proposes facts: each is stored once with
    # the summary, whatever the kill point.
    Command("compact-facts", ("compact", "--session", "s1", "--summarizer", "{summarizer}"),
            adds=tuple(FACTS), summarises=True, rerun=(0, 66)),
    # A folder remote that another machine pushed one record to: the sync pulls it and
    # pushes the seed. Its remote writes are file calls too, so each is a kill point.
    Command("sync", ("sync", "--remote", "{remote}"), adds=(SYNCED,), syncs=True),
)
BY_NAME = {c.name: c for c in COMMANDS}


@dataclass
class Template:
    """A seeded vault every kill point starts from (copied), and what it holds."""

    root: Path  # holds vault/ and import.json
    ids: dict[str, str]
    deks: dict[int, bytes]  # the seed's data keys: a backup taken before opens with them

    def argv(self, command: Command, vault: Path | None = None) -> list[str]:
        out = []
        for arg in command.argv:
            if arg.startswith("{id:"):
                arg = self.ids[arg[4:-1]]
            elif arg == "{import}":
                arg = str(self.root / "import.json")
            elif arg == "{summarizer}":
                arg = str(self.root / "summarizer")
            elif arg == "{remote}":
                assert vault is not None
                arg = str(vault.parent / "remote")
            out.append(arg)
        return out


def env_for(vault: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(base if base is not None else os.environ)
    env.update(MEM_VAULT=str(vault), MEM_MASTER_KEY=base64.b64encode(MASTER).decode(),
               MEM_USER=USER, MEM_LOCK_TIMEOUT="10", PYTHONDONTWRITEBYTECODE="1")
    return env


def build_template(root: Path) -> Template:
    """Seed a vault through mem's own library. The caller has sealed the environment
    and set it to `env_for(root / "vault")`."""
    from memvault.config import resolve
    from memvault.model.records import NewMessage
    from memvault.ops import admin, forget, ingest, portability, prefs, remember
    from memvault.vault.vault import Vault

    vault = root / "vault"
    admin.init(resolve())
    v = Vault(resolve())
    ids: dict[str, str] = {}
    for word, (kind, session, tags, created) in SEED.items():
        if kind == "message" and created:
            ingest.add_messages(v, session or "", [NewMessage(text_of(word), "user", word,
                                                              created)])
            continue
        ids[word] = remember.add(v, text_of(word), kind, tags=tags,
                                 session=session).record.memory_id
    for key, value in SEED_SETTINGS.items():
        prefs.set_(v, key, value)
    gone = remember.add(v, text_of("wombat"), "message", session="s1").record.memory_id
    forget.forget(v, forget.select(v, [gone]))
    carol = Vault(resolve(user="carol"))
    remember.add(carol, text_of("marmot"), "fact")
    remember.add(carol, text_of("lemur"), "message", session="d1")
    with (root / "import.json").open("w") as out:
        portability.export(carol, out, "json")
    other_meta = root / "other"
    other_meta.mkdir()
    shutil.copy(vault / "vault.json", other_meta / "vault.json")
    other = Vault(resolve(vault=other_meta), master=v.master)
    remember.add(other, text_of(SYNCED), "fact")
    (root / "remote").mkdir()
    from memvault.ops import sync
    from memvault.storage.remote import open_remote

    sync.sync(other, open_remote(str(root / "remote")))
    (root / "summarizer").write_text(SUMMARIZER)
    (root / "summarizer").chmod(0o755)
    found = read_user(vault / ORG / USER, MASTER, ORG, USER)
    assert all(found.count(word) == 1 for word in SEED), found.contents
    return Template(root, ids, dict(found.deks))


@dataclass
class Outcome:
    """What one kill point came to."""

    command: str
    syscall: str
    n: int
    killed: bool
    verify: str = ""  # "ok", "repaired" (verify found something, --repair fixed it), "-"
    rerun: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


Mem = Callable[..., Any]  # run `mem` in-process: mem(*args, **env) → result


def run_killed(template: Template, command: Command, vault: Path, syscall: str,
               n: int, signal: str = "KILL") -> subprocess.CompletedProcess[bytes]:
    argv = [STRACE, "-f", "-qq", "-o", os.devnull, "-e", f"trace={syscall}",
            "-e", f"inject={syscall}:signal={signal}:when={n}", MEM,
            *template.argv(command, vault)]
    # SIGINT as a terminal delivers it: not ignored, even when the suite was started in
    # the background (which hands its children SIGINT ignored).
    return subprocess.run(argv, input=command.stdin.encode(), capture_output=True,
                          env=env_for(vault), timeout=120, check=False,
                          preexec_fn=_default_sigint)  # noqa: PLW1509


def _default_sigint() -> None:
    import signal as signals

    signals.signal(signals.SIGINT, signals.SIG_DFL)


def check_kill_point(template: Template, command: Command, syscall: str, n: int,
                     work: Path, mem: Mem, signal: str = "KILL") -> Outcome:
    """With `signal` INT, Ctrl-C at that point (Python raises KeyboardInterrupt at the
    next instruction of the main thread): it must end with one line saying so and exit
    130, no traceback, and leave the vault as a kill would, or better."""
    vault = work / "vault"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(template.root / "vault", vault, symlinks=True)
    if command.syncs:
        shutil.copytree(template.root / "remote", work / "remote")
    done = run_killed(template, command, vault, syscall, n, signal)
    if signal == "INT":
        killed = done.returncode == 130
        stderr = done.stderr.decode(errors="replace")
        assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
        if killed:
            assert stderr.splitlines()[-1].startswith("mem: interrupted: "), stderr
    else:
        killed = done.returncode in (-9, 128 + 9)
    outcome = Outcome(command.name, syscall, n, killed)
    root = vault / ORG / USER
    if not killed:
        assert done.returncode == 0, (command.name, done.stderr.decode())
        final_checks(template, command, vault, mem)
        return outcome
    if not command.destroys:
        after_kill_checks(template, command, read_user(root, MASTER, ORG, USER,
                                                       template.deks), root)
        outcome.verify = verify_or_repair(vault, mem)
    else:
        outcome.verify = "-"  # a destroy under way is finished only by running it again
    again = mem(*template.argv(command, vault), stdin=command.stdin, MEM_VAULT=str(vault))
    assert again.returncode in command.rerun, (command.name, syscall, n, again.stderr)
    outcome.rerun = again.returncode
    final_checks(template, command, vault, mem)
    return outcome


def after_kill_checks(template: Template, command: Command, found: Found,
                      root: Path) -> None:
    """Right after the kill, before anything repairs: nothing acknowledged is lost or
    doubled (what the killed command was storing or erasing may be either way), nothing
    forgotten is back, nothing is in clear."""
    assert not found.unopened, found.unopened  # every live envelope opens
    moving_records(found, root)
    skip = frozenset({"summary"}) if command.summarises else frozenset()
    for word in SEED:
        if word not in command.forgets:
            assert found.count(word, skip) == 1, (word, found.places)
    for word in command.adds:
        assert found.count(word) <= 1, (word, found.places)
    for word in SEED_FORGOTTEN:
        assert not found.anywhere(word), word
        assert all(c <= 0 for c in term_counts(root, word, template.deks).values()), word
    for word in (*SEED, *command.adds):
        # The whole sentence for every word; the word alone only when it is long enough
        # that ciphertext cannot spell it by chance: "yak" turns up about once in 16 MB
        # of random bytes (once in 260 KB of base64), so a vault of a few hundred
        # kilobytes held it now and then.
        clear = [text_of(word).encode(), *([word.encode()] if len(word) >= 6 else [])]
        assert not any(c in raw for c in clear for raw in found.raw), f"{word} in clear"


def moving_records(found: Found, root: Path) -> None:
    """A compaction step a kill interrupted (vault-format.md, "Compaction journal"):
    the records its journal names may be both in their session file and, copied, in
    their archive file until the next command finishes or undoes the step. Such a pair
    is one record."""
    journal = json.loads((root / "state.json").read_text())["state"].get("compacting")
    for move in (journal or {}).get("moves", []):
        pair = {f"sessions/{move['session']}.jsonl", f"archive/{move['session']}.jsonl"}
        for memory_id in move["ids"]:
            if set(found.places.get(memory_id, [])) == pair:
                found.places[memory_id] = sorted(pair)[:1]


def verify_or_repair(vault: Path, mem: Mem) -> str:
    """`mem verify`; if it finds anything (warnings too), `mem verify --repair`, after
    which verify must find nothing."""
    report = mem_json(mem, vault, "verify")
    if report["ok"] and not report["problems"]:
        return "ok"
    mem_json(mem, vault, "verify", "--repair")
    report = mem_json(mem, vault, "verify")
    assert report["ok"] and report["problems"] == [], report
    return "repaired"


def mem_json(mem: Mem, vault: Path, *args: str) -> dict[str, Any]:
    result = mem(*args, "--json", MEM_VAULT=str(vault))
    assert result.returncode == 0, (args, result.stderr)
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def final_checks(template: Template, command: Command, vault: Path, mem: Mem) -> None:
    """Once the command has completed: what it stores is there exactly once, what it
    erases is in no file, under no key the oracle knows (the seed's included), and in no
    index; with --now no key the seed was sealed under is left; verify finds nothing."""
    root = vault / ORG / USER
    if command.destroys:
        assert not root.exists()
        assert not (vault / ORG / ".locks" / f"{USER}.destroy").exists()
        entries = org_entries(vault, ORG, "user.destroy")
        assert [e["detail"]["user"] for e in entries] == [USER], entries
        return
    found = read_user(root, MASTER, ORG, USER, template.deks)
    assert not found.unopened, found.unopened
    skip = frozenset({"summary"}) if command.summarises else frozenset()
    for word in (*SEED, *command.adds):
        if word not in command.forgets:
            assert found.count(word, skip) == 1, (word, found.places)
    if command.summarises:  # what was summarised is in exactly one summary
        summaries = [t for i, t in found.contents.items() if found.types.get(i) == "summary"]
        holding = [t for t in summaries if all(w in t for w in command.summary_of)]
        assert len(holding) == 1, summaries
    deks = {**template.deks, **found.deks}
    for word in (*SEED_FORGOTTEN, *command.forgets):
        assert not found.anywhere(word), word
        assert all(c == 0 for c in term_counts(root, word, deks).values()), word
    for key, value in {**SEED_SETTINGS, **command.settings}.items():
        assert found.settings.get(key) == value, (key, found.settings)
    if command.retires:
        assert not set(template.deks) & set(found.deks), (template.deks.keys(),
                                                          found.deks.keys())
    assert found.sealed_under <= set(found.deks)
    report = mem_json(mem, vault, "verify")
    assert report["ok"] and report["problems"] == [], report
    assert [p.name for p in index_dirs(root)] == ["index"]
    if command.syncs:  # the remote, read from the documented format, holds it all
        held = read_remote(vault.parent / "remote", MASTER, ORG, USER)["records"]
        assert set(held) == set(found.contents), (set(held) ^ set(found.contents))
        for raw in (p.read_bytes() for p in (vault.parent / "remote").rglob("*")
                    if p.is_file()):
            assert not any(text_of(w).encode() in raw for w in (*SEED, SYNCED))
    if index_is_current(root):  # control: the term lookup sees what is there
        epoch = key_version(root)
        assert epoch is not None
        present = "okapi" if "okapi" not in command.forgets else "kiwi"
        current = {epoch: found.deks[epoch]}
        assert term_counts(root, present, current)["index"] >= 1


def summary(lines: list[str]) -> str:
    """The figures of a full run (FAULTS_LOG): kill points per command and system
    call, and what verify and the re-run made of them."""
    from collections import Counter, defaultdict

    points: dict[str, Counter[str]] = defaultdict(Counter)
    verdicts: dict[str, Counter[str]] = defaultdict(Counter)
    for line in lines:
        o = json.loads(line)
        if "failed" in o:
            verdicts[o["command"]]["FAILED"] += 1
        elif o["killed"]:
            points[o["command"]][o["syscall"]] += 1  # the pool's: all its calls as one
            verdicts[o["command"]][f"verify {o['verify']}"] += 1
            verdicts[o["command"]][f"re-run exit {o['rerun']}"] += 1
    used = [s for s in SYSCALLS if any(points[c][s] for c in points)]
    out = ["| command | " + " | ".join(used) + " | kill points | after the kill |",
           "|---|" + "---:|" * (len(used) + 1) + "---|"]
    total: Counter[str] = Counter()
    names = [c.name for c in (*COMMANDS, POOL)]
    names += [f"{c.name} (Ctrl-C)" for c in COMMANDS if f"{c.name} (Ctrl-C)" in points]
    for command in names:
        row = points.get(command, Counter())
        total.update(row)
        seen = ", ".join(f"{k} {v}" for k, v in sorted(verdicts[command].items()))
        out.append(f"| {command} | " + " | ".join(str(row[s]) for s in used) +
                   f" | {sum(row.values())} | {seen} |")
    out.append("| all | " + " | ".join(str(total[s]) for s in used) +
               f" | {sum(total.values())} | |")
    return "\n".join(out)



# --- a compaction pool whose parent is killed -----------------------------------------------
#
# `mem compact --all-users --jobs 2`, as docs/cron.md runs it (under `flock -n`), is killed
# with SIGKILL (its parent process only: the kernel, not mem, must end the workers) right
# after the n-th file-changing call its workers make. Then: no worker is left (none holds
# the key, a user's lock or the flock lock), the next run under the same `flock -n`
# completes, and nothing acknowledged is lost.

FLOCK = shutil.which("flock") or "/usr/bin/flock"
# Session s2 is old: summarised and archived; the forgotten record's key is retired.
POOL = Command("compact-pool", ("compact", "--all-users", "--jobs", "2"), retires=True,
               summarises=True, summary_of=("ibis",))
POOL_CALLS = ("fsync", "fdatasync", "rename", "unlink")


def _with_token(token: str) -> list[int]:
    """The live processes (not zombies) whose environment holds `token`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if token.encode() in environ and state not in ("Z", "X"):
            found.append(int(name))
    return found


def _parent_of_pool(token: str) -> int | None:
    """mem's own process: the one strace started (its parent is not mem)."""
    pids = _with_token(token)
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            parent = int(stat[1])
            if Path(f"/proc/{parent}/comm").read_text().strip() == "strace":
                return pid
    return None


def run_pool_killed(vault: Path, lock: Path, n: int, token: str
                    ) -> tuple[bool, subprocess.Popen[bytes]]:
    """Start the pool under `flock -n LOCK strace -f`, and SIGKILL mem's own process once
    its workers have made `n` of POOL_CALLS. Whether it was killed, and the run."""
    import re
    import signal
    import threading
    import time

    argv = [FLOCK, "-n", str(lock), STRACE, "-f", "-qq", "-e", "signal=none",
            "-e", f"trace={','.join(POOL_CALLS)}", MEM, *POOL.argv, "--json"]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**env_for(vault), "CRASH_RUN": token})
    assert proc.stderr is not None
    calls, pattern = 0, re.compile(rb"^\[pid +\d+\] (\w+)\(")
    for line in proc.stderr:
        if (m := pattern.match(line)) and m.group(1).decode() in POOL_CALLS:
            calls += 1  # a worker's call (mem's own process writes no file here)
            if calls == n:
                break
    else:
        return False, proc  # it ran to its end first
    deadline = time.monotonic() + 10
    while (parent := _parent_of_pool(token)) is None:
        assert time.monotonic() < deadline, "mem's own process not found"
        time.sleep(0.01)
    os.kill(parent, signal.SIGKILL)
    # strace goes on reporting what is left: drained, so that it never blocks on us.
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    return True, proc


def check_pool_kill_point(template: Template, n: int, work: Path, mem: Mem) -> Outcome:
    import time
    import uuid

    vault, lock = work / "vault", work / "compact.lock"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(template.root / "vault", vault, symlinks=True)
    token = uuid.uuid4().hex
    killed, run = run_pool_killed(vault, lock, n, token)
    outcome = Outcome(POOL.name, "+".join(POOL_CALLS), n, killed)
    try:
        if not killed:
            assert run.wait(timeout=120) == 0, (POOL.name, n)
            final_checks(template, POOL, vault, mem)
            return outcome
        # The kernel ends the workers (a parent-death signal); a bound, not a speed claim.
        deadline = time.monotonic() + 30
        while (left := _with_token(token)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left, f"pool workers outlived their parent: {left}"
        run.wait(timeout=60)
    finally:
        for pid in _with_token(token):  # what a failed check leaves
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        with contextlib.suppress(OSError):
            run.kill()
    root = vault / ORG / USER
    after_kill_checks(template, POOL, read_user(root, MASTER, ORG, USER, template.deks),
                      root)
    outcome.verify = verify_or_repair(vault, mem)
    again = subprocess.run([FLOCK, "-n", str(lock), MEM, *POOL.argv, "--json"],
                           stdin=subprocess.DEVNULL, capture_output=True,
                           env=env_for(vault), timeout=120, check=False)
    assert again.returncode == 0, (n, again.returncode, again.stderr)  # flock -n: 1
    outcome.rerun = again.returncode
    final_checks(template, POOL, vault, mem)
    return outcome


if __name__ == "__main__":
    print(summary(Path(sys.argv[1]).read_text().splitlines()))
