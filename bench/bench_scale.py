"""Scale: how whole `mem` processes grow with the size of one user's memory.

Only `mem` processes are timed, the way users and hooks run them, so the same bench measures
any release: MEM_BENCH_BIN=/path/to/venv/bin picks the `mem` (and the python that fills the
vault); the default is the bin of this interpreter. MEM_BENCH_LABEL=before writes
results/scale-before.json instead of results/scale.json. The vault is filled in-process by a
small helper run with that venv's python, through whichever package it has (`mem` or
`memvault`). Users hold N LoCoMo messages (100 per session) plus 100 facts and 100
preferences.

1. Per-command cost at 1,000 and 100,000 messages, runs interleaved across both sizes:
   the Claude Code SessionStart hook, `mem show ID` (a message), `mem list -n 50`,
   `mem stats`, `mem brief`. Target: median at 100k ≤ 1.5× the median at 1k.
2. Peak memory (max RSS of the child alone, from os.wait4) of `mem export -o FILE` and
   `mem verify` at 10,000 and 100,000 records (MEM_BENCH_MEMORY_SIZES=10000,100000,... adds
   more). Target: flat from 10k to 1M.
3. `mem forget --session S --yes` on the 100,000-message user (each run forgets another
   session of 100 messages) against a floor process that reads and decrypts every record
   of the user (AES-GCM, with the record key the package derives) and re-encrypts and
   writes one session file. Target: ≤ 3× the floor.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import common
from common import interleaved, median_ms, report, run_timed, throwaway_env
from locomo import load

BIN = Path(os.environ.get("MEM_BENCH_BIN") or common.BIN)
MEM = str(BIN / "mem")
PYTHON = str(BIN / "python")
LABEL = os.environ.get("MEM_BENCH_LABEL", "")

PER_SESSION = 100
FACTS = PREFERENCES = 100
SIZES = (1_000, 100_000)
MEMORY_SIZES = tuple(int(n) for n in
                     os.environ.get("MEM_BENCH_MEMORY_SIZES", "10000,100000").split(","))
FORGET_SIZE = 100_000
ROUNDS, MEMORY_ROUNDS, FORGET_ROUNDS = 7, 3, 3
TARGET_GROWTH = 1.5
TARGET_FORGET = 3.0
HOOK_STDIN = json.dumps({"hook_event_name": "SessionStart", "session_id": "x"}).encode()

# Run by the venv under test: fill one user through whichever package it has, and print
# where the user's files are and the record keys (by key version) for the floor.
FILL = r"""
import importlib.metadata, importlib.util, json, sys, time
user, count, per_session, corpus_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
corpus = json.loads(open(corpus_file).read())
if importlib.util.find_spec("memvault"):
    package = "memvault"
    from memvault.config import resolve
    from memvault.crypto.keys import record_key
    from memvault.model.records import NewMessage
    from memvault.ops import ingest, remember
    from memvault.ops.admin import init
    from memvault.vault.vault import Vault
    add_messages, add = ingest.add_messages, remember.add
else:
    package = "mem"
    from mem.config import resolve
    from mem.keys import record_key
    from mem.vault import NewMessage, Vault, init
    add_messages, add = Vault.add_messages, Vault.add
init(resolve(user=user))
v = Vault(resolve(user=user))
started = time.perf_counter()
for kind, texts in (("fact", corpus["facts"]), ("preference", corpus["preferences"])):
    for text in texts:
        add(v, text, kind)
messages = corpus["messages"]
for s in range(count // per_session):
    add_messages(v, f"s{s:05d}", [
        NewMessage(content=messages[(s * per_session + i) % len(messages)],
                   role="user" if i % 2 else "assistant", message_id=f"m{s}-{i}")
        for i in range(per_session)])
    if (s + 1) % 100 == 0:
        print(f"  {user}: {(s + 1) * per_session} messages, "
              f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
seconds = time.perf_counter() - started
keys = {e: record_key(v.store.dek(e)).hex() for e in v.store.deks_on_disk()}
print(json.dumps({"package": package, "version": importlib.metadata.version(package),
                  "dir": str(v.store.dir), "org": v.settings.org, "keys": keys,
                  "seconds": seconds}))
"""

# The least any forget must do: read and decrypt every record of the user, then re-encrypt
# and durably write the one session file that changes (to a file outside the vault).
FLOOR = r"""
import base64, json, os, struct, sys
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
user_dir, org, user, keys, victim, out_path = sys.argv[1:7]
aeads = {int(kv): AESGCM(bytes.fromhex(k)) for kv, k in json.loads(keys).items()}
b64 = lambda raw: base64.b64encode(raw).decode()

def lp(*fields):
    return b"".join(len(f).to_bytes(4, "big") + f for f in (x.encode() for x in fields))

for rel in ("CLAUDE.md", "preferences.json"):
    with open(os.path.join(user_dir, rel), "rb") as fh:
        blob = fh.read()
    _, _, kv = struct.unpack_from(">4sBI", blob)
    aeads[kv].decrypt(blob[9:21], blob[21:], lp("mem/file/v1", org, user, rel, "", "", str(kv)))
kept = []
for folder in ("sessions", "archive"):
    if not os.path.isdir(os.path.join(user_dir, folder)):
        continue
    for name in sorted(os.listdir(os.path.join(user_dir, folder))):
        rel = f"{folder}/{name}"
        with open(os.path.join(user_dir, rel), "rb") as fh:
            for line in fh:
                doc = json.loads(line)
                aad = lp("mem/line/v1", org, user, rel, doc["id"], doc["ts"], str(doc["kv"]))
                plain = aeads[doc["kv"]].decrypt(base64.b64decode(doc["n"]),
                                                 base64.b64decode(doc["ct"]), aad)
                if rel == victim:
                    kept.append((doc, aad, plain))
assert len(kept) == 100, len(kept)
lines = []
for doc, aad, plain in kept:
    nonce = os.urandom(12)
    sealed = {**doc, "n": b64(nonce), "ct": b64(aeads[doc["kv"]].encrypt(nonce, plain, aad))}
    lines.append(json.dumps(sealed, separators=(",", ":")).encode() + b"\n")
with open(out_path, "wb") as fh:
    fh.write(b"".join(lines))
    fh.flush()
    os.fsync(fh.fileno())
os.unlink(out_path)
"""


def corpus() -> dict[str, list[str]]:
    messages = [t.text for c in load() for t in c.turns]
    distinct = list(dict.fromkeys(reversed(messages)))  # facts must differ (stored once)
    return {"messages": messages, "facts": distinct[:FACTS],
            "preferences": distinct[FACTS:FACTS + PREFERENCES]}


@dataclass
class User:
    """A filled user: where its files are, its record keys, and the env to run `mem` as it."""

    name: str
    count: int  # messages
    env: dict[str, str]
    package: str
    version: str
    dir: str
    org: str
    keys: dict[str, str]
    seconds: float  # to fill


def fill(env: dict[str, str], name: str, count: int, corpus_file: Path) -> User:
    proc = subprocess.run([PYTHON, "-c", FILL, name, str(count), str(PER_SESSION),
                           str(corpus_file)], env=env, stdout=subprocess.PIPE, check=True)
    return User(name, count, {**env, "MEM_USER": name}, **json.loads(proc.stdout))


def line_id(user_dir: Path, session: str) -> str:
    """The id of a session's first message, from its line envelope (clear in every format)."""
    with (user_dir / "sessions" / f"{session}.jsonl").open("rb") as fh:
        return str(json.loads(fh.readline())["id"])


def run_measured(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Seconds and peak RSS (MiB) of one child process, from its own resource usage."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{argv} failed ({proc.returncode}): {err.read().decode()[-400:]}")
    return elapsed, usage.ru_maxrss / 1024  # Linux: KiB


def commands(user: User) -> dict[str, tuple[list[str], bytes | None, str]]:
    """name: (argv, stdin, a string its output must hold: proof it did the work)."""
    memory_id = line_id(Path(user.dir), f"s{user.count // PER_SESSION // 2:05d}")
    records = user.count + FACTS + PREFERENCES
    return {
        "hook SessionStart": ([MEM, "hook", "claude-code"], HOOK_STDIN, "hookSpecificOutput"),
        "show ID": ([MEM, "show", memory_id], None, memory_id[:8]),
        "list -n 50": ([MEM, "list", "-n", "50"], None, "message"),
        "stats": ([MEM, "stats"], None, str(records)),  # every record is there
        "brief": ([MEM, "brief"], None, "#"),
    }


def growth(users: dict[int, User]) -> dict[str, object]:
    """Each command at every size, interleaved, and the ratio of the largest to the smallest."""
    small, large = min(SIZES), max(SIZES)
    cases: dict[str, Callable[[int], float]] = {}
    for name in commands(users[small]):
        for size in SIZES:
            argv, stdin, proof = commands(users[size])[name]
            env = users[size].env
            out = subprocess.run(argv, env=env, input=stdin, capture_output=True, check=True)
            assert proof in out.stdout.decode(), (name, size, out.stdout[:300])  # and warm-up
            cases[f"{name} @{size}"] = lambda i, a=argv, e=env, s=stdin: run_timed(a, e, s)
    samples = interleaved(cases, ROUNDS)
    rows: dict[str, object] = {}
    print(f"\nper command, median of {ROUNDS} interleaved runs (ms)")
    print(f"{'command':<20}{f'{small:,}':>10}{f'{large:,}':>10}{'ratio':>8}   target ≤ "
          f"{TARGET_GROWTH}×")
    for name in commands(users[small]):
        lo, hi = median_ms(samples[f"{name} @{small}"]), median_ms(samples[f"{name} @{large}"])
        verdict = "ok" if hi / lo <= TARGET_GROWTH else "OVER"
        rows[name] = {f"{small} ms": round(lo, 1), f"{large} ms": round(hi, 1),
                      "ratio": round(hi / lo, 2),
                      "runs ms": {str(n): [round(x * 1000, 1) for x in samples[f"{name} @{n}"]]
                                  for n in SIZES}}
        print(f"{name:<20}{lo:>10.1f}{hi:>10.1f}{hi / lo:>7.2f}×   {verdict}")
    return rows


def memory(users: dict[int, User], base: Path) -> dict[str, object]:
    """Peak RSS of export and verify at each size (median of a few interleaved runs)."""
    export_bytes: dict[int, int] = {}
    rss: dict[str, list[float]] = {}
    seconds: dict[str, list[float]] = {}

    def measured(name: str, argv: list[str], env: dict[str, str]) -> float:
        elapsed, peak = run_measured(argv, env)
        rss.setdefault(name, []).append(peak)
        seconds.setdefault(name, []).append(elapsed)
        return elapsed

    def export(size: int, i: int) -> float:
        path = base / f"export-{size}-{i}.json"
        elapsed = measured(f"export @{size}", [MEM, "export", "-o", str(path)], users[size].env)
        export_bytes[size] = path.stat().st_size
        path.unlink()
        return elapsed

    cases: dict[str, Callable[[int], float]] = {}
    for size in MEMORY_SIZES:
        env = users[size].env
        cases[f"export @{size}"] = lambda i, n=size: export(n, i)
        cases[f"verify @{size}"] = lambda i, n=size, e=env: measured(
            f"verify @{n}", [MEM, "verify"], e)
    interleaved(cases, MEMORY_ROUNDS)
    rows: dict[str, dict[str, object]] = {"export": {}, "verify": {}}
    print(f"\npeak memory, median of {MEMORY_ROUNDS} interleaved runs (target: flat)")
    print(f"{'command':<12}{'records':>10}{'max RSS MiB':>13}{'seconds':>9}")
    for name in cases:
        command, records = name.split(" @")
        peak, secs = statistics.median(rss[name]), statistics.median(seconds[name])
        rows[command][records] = {"max_rss_mib": round(peak, 1), "seconds": round(secs, 2),
                               "runs_mib": [round(r, 1) for r in rss[name]]}
        print(f"{command:<12}{int(records):>10,}{peak:>13.1f}{secs:>9.2f}")
    small, large = min(MEMORY_SIZES), max(MEMORY_SIZES)
    for command in ("export", "verify"):
        lo = statistics.median(rss[f"{command} @{small}"])
        hi = statistics.median(rss[f"{command} @{large}"])
        rows[command]["growth"] = round(hi / lo, 2)
        print(f"{command:<12} max RSS at {large:,} / at {small:,}: {hi / lo:.2f}×")
    return {**rows, "export bytes": {str(k): v for k, v in export_bytes.items()}}


def forget(user: User, base: Path) -> dict[str, object]:
    """`mem forget --session S --yes` against the floor, which runs first in each round
    and rewrites the very session that forget then removes."""
    env = user.env
    user_dir = Path(user.dir)
    floor = [PYTHON, "-c", FLOOR, user.dir, user.org, user.name, json.dumps(user.keys)]

    def forget_session(i: int) -> float:
        session = f"s{i:05d}"
        elapsed = run_timed([MEM, "forget", "--session", session, "--yes"], env)
        assert not (user_dir / "sessions" / f"{session}.jsonl").exists(), session
        return elapsed

    cases: dict[str, Callable[[int], float]] = {
        "floor": lambda i: run_timed(floor + [f"sessions/s{i:05d}.jsonl",
                                              str(base / "floor-out.jsonl")], env),
        "mem forget --session": forget_session,
    }
    samples = interleaved(cases, FORGET_ROUNDS)
    low = statistics.median(samples["floor"])
    rows: dict[str, object] = {}
    print(f"\nforget one session of 100 on {FORGET_SIZE:,} messages, median of "
          f"{FORGET_ROUNDS} interleaved runs (target ≤ {TARGET_FORGET}× floor)")
    for name, values in samples.items():
        median = statistics.median(values)
        rows[name] = {"median_s": round(median, 3), "ratio": round(median / low, 2),
                      "runs_s": [round(x, 3) for x in values]}
        print(f"{name:<24}{median:>8.3f} s{median / low:>7.2f}×   "
              + " ".join(f"{x:.2f}" for x in values))
    return rows


def main() -> dict[str, object]:
    started = time.perf_counter()
    env = throwaway_env()
    base = Path(env["MEM_VAULT"]).parent
    env.update(PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               MEM_LOG_DIR=str(base / "log"))  # hook logs stay in the throwaway dir
    corpus_file = base / "corpus.json"
    corpus_file.write_text(json.dumps(corpus()))
    users: dict[int, User] = {}
    for size in sorted({*SIZES, *MEMORY_SIZES, FORGET_SIZE}):
        users[size] = fill(env, f"u{size}", size, corpus_file)
        print(f"filled {size:,} messages (+{FACTS + PREFERENCES} facts and preferences) "
              f"in {users[size].seconds:.1f} s")
    first = users[min(users)]
    print(f"release: {first.package} {first.version} ({BIN})")

    doc: dict[str, object] = {
        "release": {"package": first.package, "version": first.version, "bin": str(BIN)},
        "fill seconds": {str(n): round(u.seconds, 1) for n, u in users.items()},
        "commands": growth(users),
        "peak memory": memory(users, base),
        "forget": forget(users[FORGET_SIZE], base),
    }
    log = base / "log" / "hooks.log"
    failures = [line for line in log.read_text().splitlines() if "failed" in line] \
        if log.exists() else []
    assert not failures, failures[:3]
    doc["targets"] = {"100k/1k ratio": TARGET_GROWTH, "memory": "flat 10k to 1M",
                      "forget ratio": TARGET_FORGET}
    doc["total seconds"] = round(time.perf_counter() - started, 1)
    print(f"\ntotal {doc['total seconds']} s")
    report(f"scale-{LABEL}" if LABEL else "scale", doc)
    shutil.rmtree(base)
    return doc


if __name__ == "__main__":
    main()
