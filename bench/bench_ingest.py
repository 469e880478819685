"""Ingest speed: `mem ingest` of a 20,000-message (about 5 MB) transcript against a floor
process that only parses each line, encrypts it, writes them with one fsync, and indexes
HMAC tokens with one Tantivy commit (target ≤ 2× the floor); and how fast a SessionEnd
hook returns to Claude Code (which cancels it after 1.5 s by default). Then the real
Claude Code, Codex and Gemini sessions of ../shared/bench-data/transcripts, each agent's
folder by `mem ingest --scan`: messages/s and MB/s.

With MEM_BENCH_CODEX_GB=1 (opt-in: it writes and reads GBs), a Codex rollout of that many
GB, mostly tool outputs, read as a stream: seconds, messages/s and peak RSS, next to a
rollout a quarter of its size (peak RSS should be flat: the ratio near 1)."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import BENCH_DATA, BIN, INDEXING_FLOOR, report, run_timed, throwaway_env
from locomo import load

MESSAGES = 20_000
CODEX_MESSAGES = 6000  # short messages among the tool outputs of a generated rollout
CODEX_OUTPUT = 2 << 20  # bytes of one tool output
CODEX_TOO_LONG = 2  # outputs longer than the longest line read (counted, not read)
HOOK_MESSAGES = 2_000  # the transcript each SessionEnd hands to its background ingest
TARGET_RATIO = 2.0
HOOK_BUDGET_MS = 1500.0

FLOOR = INDEXING_FLOOR + r"""
lines = []
with open(src, "rb") as fh:
    for i, raw in enumerate(fh):
        msg = json.loads(raw)
        nonce = os.urandom(12)
        ct = aead.encrypt(nonce, raw, str(i).encode())
        lines.append(json.dumps({"n": base64.b64encode(nonce).decode(),
                                 "ct": base64.b64encode(ct).decode()}).encode() + b"\n")
        writer.add_document(tantivy.Document(id=str(i), body=" ".join(
            h(t) for t in analyzer.analyze(msg["content"]))))
fd = os.open(os.path.join(out_dir, "s.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
os.write(fd, b"".join(lines)); os.fsync(fd); os.close(fd)
writer.commit()
"""


def make_transcript(path: Path) -> int:
    turns = [t.text for c in load() for t in c.turns]
    with path.open("w") as fh:
        for i in range(MESSAGES):
            text = f"{turns[i % len(turns)]} {turns[(i * 7 + 3) % len(turns)]}"
            fh.write(json.dumps({"id": f"m{i}", "role": "user" if i % 2 else "assistant",
                                 "content": text,
                                 "timestamp": f"2026-01-{1 + i % 28:02d}T10:00:00Z"}) + "\n")
    return path.stat().st_size


def make_claude_transcript(path: Path, session: str) -> None:
    """A Claude Code session file (what SessionEnd's transcript_path names)."""
    turns = [t.text for c in load() for t in c.turns]
    parent = None
    with path.open("w") as fh:
        for i in range(HOOK_MESSAGES):
            kind = "user" if i % 2 == 0 else "assistant"
            message: dict[str, object] = {"role": kind, "content": turns[i % len(turns)]}
            if kind == "assistant":
                message = {"id": f"msg_{i}", "role": kind, "model": "claude-sonnet-4",
                           "content": [{"type": "text", "text": turns[i % len(turns)]}]}
            fh.write(json.dumps({"parentUuid": parent, "isSidechain": False,
                                 "sessionId": session, "type": kind, "uuid": f"u{i}",
                                 "timestamp": f"2026-01-01T10:{i // 60 % 60:02d}:{i % 60:02d}Z",
                                 "message": message}) + "\n")
            parent = f"u{i}"


def main(rounds: int = 3) -> dict[str, object]:
    env = throwaway_env()
    work = Path(tempfile.mkdtemp(prefix="mem-bench-ingest-"))
    env["MEM_LOG_DIR"] = str(work / "logs")  # the hooks' log: not the user's real one
    mem = str(BIN / "mem")
    run_timed([mem, "init"], env)
    transcript = work / "big.jsonl"
    size = make_transcript(transcript)
    floor_s, mem_s = [], []
    for i in range(rounds):
        out = work / f"floor{i}"
        out.mkdir()
        floor_s.append(run_timed([sys.executable, "-c", FLOOR, str(transcript), str(out)], env))
        mem_s.append(run_timed([mem, "ingest", str(transcript), "--format", "jsonl",
                                "--session", "big", "--user", f"ingest{i}", "--quiet"], env))
    floor, ours = statistics.median(floor_s), statistics.median(mem_s)
    print(f"transcript: {MESSAGES} messages, {size / 1e6:.1f} MB")
    print(f"floor (parse, encrypt, one fsync, HMAC tokens, one commit): {floor:.2f} s")
    print(f"mem ingest:                                              {ours:.2f} s  "
          f"({ours / floor:.2f}× floor, target ≤ {TARGET_RATIO}×)")
    again = run_timed([mem, "ingest", str(transcript), "--format", "jsonl", "--session", "big",
                       "--user", "ingest0", "--quiet"], env)
    print(f"mem ingest of the same transcript again (adds nothing):   {again:.2f} s")

    # SessionEnd: the hook hands the transcript to a background ingest and returns.
    hook_ms = []
    for i in range(9):
        session = f"hook{i}"
        claude = work / f"{session}.jsonl"
        make_claude_transcript(claude, session)
        payload = json.dumps({"hook_event_name": "SessionEnd", "session_id": session,
                              "transcript_path": str(claude), "reason": "exit"})
        started = time.perf_counter()
        proc = subprocess.run([mem, "hook", "claude-code"], input=payload.encode(), env=env,
                              capture_output=True, check=False)
        hook_ms.append((time.perf_counter() - started) * 1000)
        assert proc.returncode == 0 and proc.stdout == b""
        wait_quiet(env)
    stored = subprocess.run([mem, "list", "--session", "hook8", "--type", "message", "--limit",
                             str(HOOK_MESSAGES * 2), "--json"], env=env, capture_output=True,
                            check=True)
    in_background = len(json.loads(stored.stdout)["records"])
    if in_background != HOOK_MESSAGES:
        log = (work / "logs" / "hooks.log").read_text()[-400:]
        raise RuntimeError(f"the hook's background ingest stored {in_background} of "
                           f"{HOOK_MESSAGES} messages; hooks.log ends: {log}")
    hook = statistics.median(hook_ms)
    print(f"SessionEnd hook returns in {hook:.0f} ms (median of 9, max {max(hook_ms):.0f}; "
          f"budget {HOOK_BUDGET_MS:.0f}); its background ingest stored all "
          f"{HOOK_MESSAGES} messages")
    doc = {"messages": MESSAGES, "bytes": size, "floor_s": floor, "mem_ingest_s": ours,
           "ratio": ours / floor, "reingest_s": again, "session_end_hook_ms": hook,
           "hook_ms_all": hook_ms, "rounds": rounds}
    real = real_sessions(env, rounds)
    if real:
        doc["real_sessions"] = real
        floor_rate = MESSAGES / floor
        for agent, row in real.items():
            print(f"real {agent} sessions: {row['messages']} messages, "
                  f"{row['bytes'] / 1e6:.1f} MB in {row['seconds']:.2f} s: "
                  f"{row['messages_per_s']:,.0f} messages/s, {row['mb_per_s']:.1f} MB/s "
                  f"(floor: {floor_rate:,.0f} messages/s of short ones)")
    gigabytes = float(os.environ.get("MEM_BENCH_CODEX_GB") or 0)
    if gigabytes > 0:
        doc["codex_stream"] = codex_stream(env, work, gigabytes)
    report("ingest", doc)
    return doc


def real_sessions(env: dict[str, str], rounds: int) -> dict[str, dict[str, float]]:
    """`mem ingest --scan` of each agent's real sessions in ../shared/bench-data (read
    where they are), each round by a fresh user: the median seconds, messages/s and
    MB/s. Empty when the data is not there."""
    mem = str(BIN / "mem")
    out: dict[str, dict[str, float]] = {}
    root = BENCH_DATA / "transcripts"
    for folder in sorted(p for p in root.glob("*") if p.is_dir()):
        seconds, added = [], 0
        for i in range(rounds):
            started = time.perf_counter()
            proc = subprocess.run([mem, "ingest", "--scan", str(folder), "--json", "--user",
                                   f"real-{folder.name}-{i}"], env=env, capture_output=True,
                                  check=False)
            seconds.append(time.perf_counter() - started)
            if proc.returncode != 0:
                raise RuntimeError(f"scan of {folder} failed: {proc.stderr.decode()[-400:]}")
            added = json.loads(proc.stdout)["messages_added"]
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        median = statistics.median(seconds)
        out[folder.name] = {"messages": added, "bytes": size, "seconds": median,
                            "messages_per_s": added / median, "mb_per_s": size / median / 1e6}
    return out


def make_codex_rollout(path: Path, size: int) -> int:
    """A Codex rollout of about `size` bytes: CODEX_MESSAGES short messages among tool
    outputs of CODEX_OUTPUT bytes, and CODEX_TOO_LONG longer than the longest line mem
    reads. Returns how many messages mem stores from it."""
    from memvault.text.transcripts import MAX_LINE

    stamp = "2026-03-02T10:00:00.000Z"

    def line(payload: dict[str, object]) -> bytes:
        return json.dumps({"timestamp": stamp, "type": "response_item",
                           "payload": payload}).encode() + b"\n"

    def output(call: str, size: int) -> bytes:
        return line({"type": "function_call_output", "call_id": call,
                     "output": "Exit code: 0\nOutput:\n" + "row,1234,paid\n" * (size // 14)})

    head, tail = output("CALL", CODEX_OUTPUT).split(b"CALL")
    outputs = max(1, (size - CODEX_TOO_LONG * (MAX_LINE + (1 << 20))) // len(head + tail))
    turns = [t.text for c in load() for t in c.turns]
    with path.open("wb") as fh:
        fh.write(json.dumps({"timestamp": stamp, "type": "session_meta", "payload": {
            "id": "019b0000-0000-7000-8000-0000000bench", "timestamp": stamp}}).encode()
            + b"\n")
        said = 0
        for i in range(outputs):
            fh.write(head + f"call_{i}".encode() + tail)
            if i < CODEX_TOO_LONG:
                fh.write(output(f"long_{i}", MAX_LINE + (1 << 20)))
            while said < CODEX_MESSAGES * (i + 1) // outputs:
                role = "user" if said % 2 == 0 else "assistant"
                kind = "input_text" if role == "user" else "output_text"
                fh.write(line({"type": "message", "role": role, "content": [
                    {"type": kind, "text": turns[said % len(turns)]}]}))
                said += 1
    return outputs + CODEX_MESSAGES


# Spawns the command and writes its peak RSS to a file: from this (larger) process the
# child's peak would count this one's memory (Linux keeps the larger at exec).
LAUNCHER = """
import os, sys
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as fh:
    fh.write(str(usage.ru_maxrss * 1024))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_measured(argv: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """Seconds, peak RSS (bytes) of that process alone, and its stdout."""
    with tempfile.TemporaryDirectory() as tmp:
        rss = Path(tmp) / "rss"
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", LAUNCHER, str(rss), *argv], env=env,
                              capture_output=True, check=False)
        elapsed = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(f"{argv} failed: {proc.stderr.decode()[-400:]}")
        return elapsed, int(rss.read_text()), proc.stdout.decode()


def codex_stream(env: dict[str, str], work: Path, gigabytes: float) -> dict[str, object]:
    """A Codex rollout of `gigabytes` GB and one of a quarter of that, each ingested once by
    a fresh user: seconds, messages/s, peak RSS; their RSS ratio shows memory is flat."""
    mem = str(BIN / "mem")
    rows: dict[str, dict[str, float]] = {}
    for label, size in (("quarter", gigabytes / 4), ("full", gigabytes)):
        path = work / f"codex-{label}.jsonl"
        messages = make_codex_rollout(path, int(size * (1 << 30)))
        file_bytes = path.stat().st_size
        seconds, rss, out = run_measured(
            [mem, "ingest", str(path), "--json", "--user", f"codex-{label}"], env)
        added = json.loads(out)["messages_added"]
        if added != messages:
            raise RuntimeError(f"{label}: {added} of {messages} messages stored")
        path.unlink()
        rows[label] = {"bytes": file_bytes, "messages": messages, "seconds": seconds,
                       "messages_per_s": messages / seconds,
                       "mb_per_s": file_bytes / seconds / 1e6,
                       "peak_rss_mib": rss / (1 << 20)}
        print(f"codex rollout {file_bytes / 1e6:,.0f} MB, {messages} messages: "
              f"{seconds:.1f} s, {messages / seconds:,.0f} messages/s, "
              f"{file_bytes / seconds / 1e6:,.0f} MB/s, peak RSS {rss / (1 << 20):.0f} MiB")
    ratio = rows["full"]["peak_rss_mib"] / rows["quarter"]["peak_rss_mib"]
    print(f"peak RSS, {gigabytes:g} GB rollout / {gigabytes / 4:g} GB one: {ratio:.2f} "
          "(flat: near 1)")
    return {**rows, "gigabytes": gigabytes, "rss_ratio": ratio}


def wait_quiet(env: dict[str, str]) -> None:
    """Let the background ingest a hook started finish before the next measurement (only
    this run's: the ingest's argv names this run's vault)."""
    pattern = f"ingest .*--vault[= ]{re.escape(env['MEM_VAULT'])}( |$)"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        busy = subprocess.run(["pgrep", "-f", pattern], capture_output=True, check=False)
        if busy.returncode != 0:
            return
        time.sleep(0.1)
    raise RuntimeError("the hook's background ingest did not finish within 120 s")


if __name__ == "__main__":
    os.environ.setdefault("NO_COLOR", "1")
    main()
