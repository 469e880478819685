"""Live transcripts: a Claude Code session of about 100 MB (the real sessions of
../shared/bench-data/transcripts/claude-code, copied end to end as one long session with
ids of their own), as hooks read it: the first ingest, an ingest of it again unchanged,
and one after it grew by 1% (a pre-compaction, then the session's end). Seconds and peak
RSS of each `mem ingest` (medians), against baselines measured in the same run: a plain
loop that reads the same bytes and parses each line as JSON, and for the grown session
`mem ingest` of the appended 1% alone (the same bytes as a transcript of their own, in a
session of their own): what reading that 1% costs mem, start-up, sealing and index
commit included, which the JSON loop has none of. The background `mem embed` the first
ingest starts is timed too, with its peak RSS: its seconds a megabyte are to be the same
at every size.

Targets (issue 34): unchanged ≤ 2 s and ≤ 150 MB peak; grown by 1% ≤ 2× reading that 1%
(mem's ingest of the appended bytes alone; the JSON loop's ratio is printed too); first
ingest ≤ 200 MB peak whatever the size (run it at 100, 300 and 1000: the peaks are
within a few MB of each other). MEM_BENCH_LIVE_MB sets the size (default 100),
MEM_BENCH_LIVE_ROUNDS the rounds (default 3: a gigabyte's is one). MEM_BENCH_LIVE_FIRST=1
measures the first ingest alone, each round in a vault of its own with no background
embed: for sizes of gigabytes, where its own memory (RssAnon) is to stay flat.
MEM_BENCH_LIVE_LIMIT_MB=150 with it runs each round again inside a memory cgroup of that
hard limit (the page cache of what it reads and writes counted too; made as root, cgroup
v1 or v2): the ingest must finish, at about the unconstrained time, never OOM-killed:
what RSS counts beyond its own memory is clean file pages the system takes back."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench_ingest import run_measured
from common import BENCH_DATA, BIN, report, run_timed, throwaway_env

ROUNDS = 3
GROWTH = 0.01
GROWS = 3  # growths of each round's session, each measured
UNCHANGED_S = 2.0
UNCHANGED_MB = 150.0
FIRST_MB = 200.0
GROWN_RATIO = 2.0

# The floor: read the bytes of a file from an offset, one JSON document a line.
FLOOR = """
import json, sys
with open(sys.argv[1], "rb") as fh:
    fh.seek(int(sys.argv[2]))
    n = sum(1 for raw in fh if json.loads(raw) is not None)
"""

_IDS = ("uuid", "parentUuid", "logicalParentUuid", "leafUuid", "tool_use_id")


def _renamed(value: Any, copy: int) -> Any:
    """A line's ids given the suffix of its copy (its links and tool ids too)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in _IDS and isinstance(item, str):
                out[key] = f"{item}-{copy}"
            elif key == "id" and isinstance(item, str) and item.startswith(("msg_", "toolu_")):
                out[key] = f"{item}-{copy}"
            else:
                out[key] = _renamed(item, copy)
        return out
    if isinstance(value, list):
        return [_renamed(item, copy) for item in value]
    return value


def session_lines(session: str) -> Iterator[bytes]:
    """The real Claude Code sessions' lines, endlessly, as copies chained one to the next
    in one session: each copy's ids its own, its first line's parent the last one's."""
    sources = sorted((BENCH_DATA / "transcripts" / "claude-code").glob("*.jsonl"))
    lines = [json.loads(raw) for path in sources for raw in path.read_bytes().splitlines()
             if raw.strip()]
    last: str | None = None
    copy = 0
    while True:
        for line in lines:
            entry = _renamed(line, copy)
            if "sessionId" in entry:
                entry["sessionId"] = session
            if "parentUuid" in entry and entry["parentUuid"] is None and last:
                entry["parentUuid"] = last
            if isinstance(entry.get("uuid"), str):
                last = entry["uuid"]
            yield json.dumps(entry).encode() + b"\n"
        copy += 1


def make_session(path: Path, size: int, session: str) -> Iterator[bytes]:
    """Write about `size` bytes of a session to `path`; the generator of the lines that
    would come next (to grow it)."""
    lines = session_lines(session)
    with path.open("wb") as fh:
        written = 0
        while written < size:
            raw = next(lines)
            fh.write(raw)
            written += len(raw)
    return lines


def grow(path: Path, lines: Iterator[bytes], size: int) -> None:
    with path.open("ab") as fh:
        written = 0
        while written < size:
            raw = next(lines)
            fh.write(raw)
            written += len(raw)


def settled(env: dict[str, str], limit: float = 120.0) -> tuple[float, float]:
    """Wait for the `mem embed` a write started in the background (it embeds what was
    stored) to end: each measure is of one ingest, not of it and the last one's child
    sharing the cores (hooks ingest minutes apart). The seconds waited and the child's
    peak RSS (MB, as far as seen)."""
    mark = f"--vault={env['MEM_VAULT']}".encode()
    started = time.monotonic()
    peak = 0
    while time.monotonic() < started + limit:
        busy = False
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
                    if b"embed" in argv and mark in argv:
                        busy = True
                        status = Path(f"/proc/{name}/status").read_text()
                        peak = max([peak, *(int(line.split()[1]) for line in status.splitlines()
                                            if line.startswith("VmHWM"))])
                except OSError:
                    continue
        if not busy:
            break
        time.sleep(0.05)
    return time.monotonic() - started, peak / 1e3


def run_sampled(argv: list[str], env: dict[str, str]
                ) -> tuple[float, float, float, float, float]:
    """Seconds and peak RSS (MB: the kernel's high-water mark) of one run, what the
    highest of its RSS samples (every 20 ms) held: the process's own memory (RssAnon)
    and the files it maps (RssFile: its libraries, and the index segments Tantivy maps
    to read them, clean pages the system takes back at need), and the highest RssAnon
    sampled."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
        top = (0, 0, 0)
        anon = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            try:
                fields = {k: int(v.split()[0]) for k, _, v in (
                    line.partition(":") for line in Path(f"/proc/{proc.pid}/status")
                    .read_text().splitlines()) if k in ("VmRSS", "RssAnon", "RssFile")}
                top = max(top, (fields["VmRSS"], fields["RssAnon"], fields["RssFile"]))
                anon = max(anon, fields["RssAnon"])
            except (OSError, KeyError, ValueError):
                pass
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{argv} failed: {err.read().decode()[-400:]}")
    return elapsed, usage.ru_maxrss / 1e3, top[1] / 1e3, top[2] / 1e3, anon / 1e3


@contextmanager
def memory_cgroup(limit_mb: int) -> Iterator[Path]:
    """A memory cgroup of `limit_mb` under this process's own (v2, or v1's memory
    controller), removed after; its folder, whose cgroup.procs takes a process."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    v1 = [line.split(":", 2)[2] for line in lines if line.split(":")[1] == "memory"]
    if v1:
        parent, limit_file = Path("/sys/fs/cgroup/memory") / v1[0].lstrip("/"), \
            "memory.limit_in_bytes"
    else:
        v2 = [line.split(":", 2)[2] for line in lines if line.startswith("0::")]
        parent, limit_file = Path("/sys/fs/cgroup") / v2[0].lstrip("/"), "memory.max"
    group = parent / f"mem-bench-{os.getpid()}"
    group.mkdir()  # PermissionError when not root: the caller says so
    try:
        (group / limit_file).write_text(str(limit_mb << 20))
        yield group
    finally:
        for _ in range(50):  # the process leaves its cgroup as it is reaped
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def run_limited(argv: list[str], env: dict[str, str], limit_mb: int) -> tuple[float, str]:
    """Seconds of one run inside a memory cgroup of `limit_mb`, and what the cgroup saw."""
    with memory_cgroup(limit_mb) as group:
        started = time.perf_counter()
        code = subprocess.call(["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"',
                                str(group), *argv], env=env, stdout=subprocess.DEVNULL)
        elapsed = time.perf_counter() - started
        counts: dict[str, str] = {}
        for name in ("memory.max_usage_in_bytes", "memory.peak", "memory.failcnt",
                     "memory.oom_control", "memory.events"):
            if (group / name).exists():
                words = (group / name).read_text().split()
                pairs = (zip(words[::2], words[1::2], strict=True) if len(words) > 1
                         else [(name, words[0])])
                counts.update(pairs)
        seen = ", ".join(f"{key} {counts[key]}" for key in (
            "memory.max_usage_in_bytes", "memory.peak", "memory.failcnt", "oom_kill")
            if key in counts)
    if code != 0:
        raise RuntimeError(f"{argv} failed in a {limit_mb} MB cgroup (exit {code}): {seen}")
    return elapsed, seen


def first_only(rounds: int, size: int) -> dict[str, object]:
    """The first ingest alone, each round in a fresh vault without the background
    embed (MEM_BENCH_LIVE_FIRST=1): seconds, peak, and its own memory's highest sample."""
    work = Path(tempfile.mkdtemp(prefix="mem-bench-live-"))
    path = work / "live.jsonl"
    make_session(path, size, "live-0")
    rows: dict[str, list[float]] = {k: [] for k in ("first_s", "first_mb", "first_anon_mb",
                                                    "first_file_mb", "anon_top_mb")}
    limit = int(os.environ.get("MEM_BENCH_LIVE_LIMIT_MB") or 0)
    limited: list[float] = []
    for _ in range(rounds):
        for fenced in (False, True) if limit else (False,):
            env = {**throwaway_env(), "MEM_EMBEDDINGS_PROVIDER": "none"}
            run_timed([str(BIN / "mem"), "init"], env)
            argv = [str(BIN / "mem"), "ingest", str(path), "--quiet"]
            if fenced:
                seconds, seen = run_limited(argv, env, limit)
                limited.append(seconds)
                print(f"  in a {limit} MB memory cgroup: {seconds:.1f} s ({seen})")
            else:
                for label, value in zip(rows, run_sampled(argv, env), strict=True):
                    rows[label].append(value)
            shutil.rmtree(Path(env["MEM_VAULT"]).parent, ignore_errors=True)
    path.unlink()
    med = {k: statistics.median(v) for k, v in rows.items()}
    if limited:
        med["limited_s"] = statistics.median(limited)
        print(f"first ingest in a {limit} MB memory cgroup: {med['limited_s']:.2f} s, "
              f"{med['limited_s'] / med['first_s']:.2f}× the time without it (never killed)")
    print(f"session of {size / 1e6:.0f} MB (real Claude Code sessions, copied), first "
          f"ingest alone, medians of {rounds}")
    print(f"first ingest:     {med['first_s']:6.2f} s  peak {med['first_mb']:5.0f} MB "
          f"(target ≤ {FIRST_MB:.0f} MB)")
    print(f"  its highest RSS sample: {med['first_anon_mb']:.0f} MB its own (RssAnon), "
          f"{med['first_file_mb']:.0f} MB of mapped files (RssFile: libraries, index segments)")
    print(f"  its own memory's highest sample: {med['anon_top_mb']:.0f} MB (RssAnon)")
    doc = {"bytes": size, "rounds": rounds, "first_only": True, **med, "all": rows}
    report("live", doc)
    return doc


def main(rounds: int = ROUNDS) -> dict[str, object]:
    size = int(float(os.environ.get("MEM_BENCH_LIVE_MB") or 100) * 1e6)
    if os.environ.get("MEM_BENCH_LIVE_FIRST") == "1":
        return first_only(rounds, size)
    env = throwaway_env()
    mem = str(BIN / "mem")
    run_timed([mem, "init"], env)
    work = Path(tempfile.mkdtemp(prefix="mem-bench-live-"))
    rows: dict[str, list[float]] = {k: [] for k in (
        "first_s", "first_mb", "unchanged_s", "unchanged_mb", "grown_s", "grown_mb",
        "floor_all_s", "floor_new_s", "alone_s", "embed_s", "embed_mb", "first_anon_mb",
        "first_file_mb", "anon_top_mb")}
    for i in range(rounds):
        path = work / f"live{i}.jsonl"
        more = make_session(path, size, f"live-{i}")
        user = ["--user", f"live{i}", "--quiet"]

        def ingest(label: str, path: Path = path, user: list[str] = user) -> None:
            settled(env)
            seconds, rss, _ = run_measured([mem, "ingest", str(path), *user], env)
            rows[f"{label}_s"].append(seconds)
            rows[f"{label}_mb"].append(rss / 1e6)

        rows["floor_all_s"].append(run_timed([sys.executable, "-c", FLOOR, str(path), "0"],
                                             env))
        settled(env)
        seconds, peak, anon, mapped, top = run_sampled([mem, "ingest", str(path), *user], env)
        for label, value in (("first_s", seconds), ("first_mb", peak),
                             ("first_anon_mb", anon), ("first_file_mb", mapped),
                             ("anon_top_mb", top)):
            rows[label].append(value)
        # The background `mem embed` the first ingest started: every message it stored.
        embedded = settled(env, limit=3600.0)
        rows["embed_s"].append(embedded[0])
        rows["embed_mb"].append(embedded[1])
        ingest("unchanged")
        for step in range(GROWS):  # grown by 1% again and again: a sample each time
            before = path.stat().st_size
            grow(path, more, int(size * GROWTH))
            rows["floor_new_s"].append(run_timed(
                [sys.executable, "-c", FLOOR, str(path), str(before)], env))
            # The appended bytes alone, as a transcript of their own in a session of its
            # own: what reading that 1% costs mem.
            alone = work / f"alone{i}-{step}.jsonl"
            with path.open("rb") as fh:
                fh.seek(before)
                alone.write_bytes(fh.read())
            settled(env)
            rows["alone_s"].append(run_measured(
                [mem, "ingest", str(alone), "--session", f"alone-{i}-{step}", *user],
                env)[0])
            alone.unlink()
            ingest("grown")
        path.unlink()
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"session of {size / 1e6:.0f} MB (real Claude Code sessions, copied), "
          f"medians of {rounds} (the growths: of {rounds * GROWS})")
    print(f"baseline, a JSON line loop over it all: {med['floor_all_s']:.2f} s; over the "
          f"appended {GROWTH:.0%}: {med['floor_new_s']:.3f} s")
    print(f"first ingest:     {med['first_s']:6.2f} s  peak {med['first_mb']:5.0f} MB "
          f"({med['first_s'] / med['floor_all_s']:.1f}× the loop; target ≤ {FIRST_MB:.0f} MB)")
    print(f"  its highest RSS sample: {med['first_anon_mb']:.0f} MB its own (RssAnon), "
          f"{med['first_file_mb']:.0f} MB of mapped files (RssFile: libraries, index segments)"
          f"; its own memory's highest sample {med['anon_top_mb']:.0f} MB")
    print(f"its background embed: {med['embed_s']:6.2f} s  peak {med['embed_mb']:5.0f} MB "
          f"({med['embed_s'] / (size / 1e6):.3f} s a MB: the same at every size)")
    print(f"again, unchanged: {med['unchanged_s']:6.2f} s  peak {med['unchanged_mb']:5.0f} MB "
          f"(target ≤ {UNCHANGED_S} s, ≤ {UNCHANGED_MB:.0f} MB)")
    print(f"the appended 1% ingested alone: {med['alone_s']:.2f} s")
    print(f"again, grown 1%:  {med['grown_s']:6.2f} s  peak {med['grown_mb']:5.0f} MB "
          f"({med['grown_s'] / med['alone_s']:.2f}× reading the 1% alone, target ≤ "
          f"{GROWN_RATIO:.0f}×; {med['grown_s'] / med['floor_new_s']:.0f}× the JSON loop "
          "over it)")
    doc = {"bytes": size, "rounds": rounds, **med,
           "grown_ratio": med["grown_s"] / med["alone_s"],
           "grown_floor_ratio": med["grown_s"] / med["floor_new_s"],
           "first_ratio": med["first_s"] / med["floor_all_s"],
           "embed_s_per_mb": med["embed_s"] / (size / 1e6), "all": rows}
    report("live", doc)
    return doc


if __name__ == "__main__":
    os.environ.setdefault("NO_COLOR", "1")
    main(int(os.environ.get("MEM_BENCH_LIVE_ROUNDS") or ROUNDS))
