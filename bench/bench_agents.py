"""Agents: `mem mcp` from start to its first answer, against a floor process that imports
the same libraries (the MCP SDK and mem's own); `memory_search` through the SDK's
in-memory client at 10k and 100k records, against `recall.search` in-process on the same
vault and queries; and the SessionStart hook of each agent on a user with 100k stored
messages, against the start-up floor of bench_startup.

MEM_BENCH_AGENT_SIZES=10000 runs a smaller set (the 100k fill takes minutes)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_search import fill, texts
from bench_startup import FLOOR as STARTUP_FLOOR
from common import BIN, interleaved, median_ms, report, run_timed
from locomo import load

SIZES = tuple(int(s) for s in os.environ.get("MEM_BENCH_AGENT_SIZES",
                                             "10000,100000").split(","))
MCP_FLOOR = STARTUP_FLOOR + "import anyio, pydantic\nfrom mcp.server.mcpserver import MCPServer\n"
INIT = (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "bench", "version": "1"}}}) + "\n").encode()


def first_answer(env: dict[str, str]) -> float:
    """Seconds from starting `mem mcp` to its answer to `initialize`."""
    started = time.perf_counter()
    proc = subprocess.Popen([str(BIN / "mem"), "mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(INIT)
    proc.stdin.flush()
    line = proc.stdout.readline()
    elapsed = time.perf_counter() - started
    proc.stdin.close()
    proc.wait(timeout=30)
    if b'"serverInfo"' not in line:
        raise RuntimeError(f"mem mcp did not answer: {line[:200]!r}")
    return elapsed


def tool_latency(vault: Any, queries: list[str]) -> dict[str, float]:
    """memory_search through the in-memory client, and recall.search, per query."""
    from mcp.client import Client

    from memvault.integrations.mcp_server import build
    from memvault.model.records import Filters
    from memvault.ops.recall import search

    server = build(vault)
    direct, tool = [], []

    async def run() -> None:
        async with Client(server) as client:
            for q in queries[:10]:  # warm caches
                await client.call_tool("memory_search", {"query": q})
            for q in queries:
                started = time.perf_counter()
                search(vault, q, Filters(limit=10))
                direct.append(time.perf_counter() - started)
                started = time.perf_counter()
                result = await client.call_tool("memory_search", {"query": q})
                tool.append(time.perf_counter() - started)
                assert not result.is_error

    asyncio.run(run())
    return {"recall.search median ms": round(median_ms(direct), 2),
            "memory_search median ms": round(median_ms(tool), 2),
            "ratio": round(median_ms(tool) / median_ms(direct), 2)}


def main() -> dict[str, object]:
    base = Path(tempfile.mkdtemp(prefix="mem-bench-agents-"))
    os.environ.update(MEM_VAULT=str(base / "vault"), MEM_CONFIG_DIR=str(base / "config"),
                      MEM_LOG_DIR=str(base / "logs"))
    for var in ("MEM_KEY_FILE", "MEM_KEY_COMMAND", "MEM_MASTER_KEY", "MEM_ORG", "MEM_USER"):
        os.environ.pop(var, None)
    from memvault.config import resolve
    from memvault.ops.admin import init
    from memvault.ops.remember import add

    init(resolve(user="bench"))
    corpus = texts()
    queries = [q.text for c in load() for q in c.questions]
    random.Random(7).shuffle(queries)
    queries = queries[:200]
    doc: dict[str, object] = {}

    # Start to first answer.
    env = {**os.environ, "MEM_USER": "bench", "NO_COLOR": "1"}
    cases = {
        "floor (imports only)": lambda i: run_timed([sys.executable, "-c", MCP_FLOOR], env),
        "mem mcp, initialize answered": lambda i: first_answer(env),
    }
    samples = interleaved(cases, 11)
    floor = median_ms(samples["floor (imports only)"])
    start = {name: {"median_ms": round(median_ms(v), 1),
                    "ratio": round(median_ms(v) / floor, 2)} for name, v in samples.items()}
    for name, row in start.items():
        print(f"{name:<32}{row['median_ms']:>10.1f} ms {row['ratio']:>6.2f}× floor")
    doc["mcp start"] = start

    largest = None
    for size in SIZES:
        vault, fill_s = fill(f"u{size}", size, corpus)
        for n in range(30):  # what a brief reads: preferences and facts
            add(vault, f"Preference {n}: {corpus[n][:200]}", "preference")
            add(vault, f"Fact {n}: {corpus[100 + n][:200]}", "fact")
        vault.ready_index()
        row: dict[str, float] = {"fill seconds": round(fill_s, 1),
                                 **tool_latency(vault, queries)}
        doc[f"memory_search {size} records"] = row
        print(f"{size:>7} records: " + ", ".join(f"{k} {v}" for k, v in row.items()))
        largest = size

    # SessionStart of each agent on the largest user.
    env = {**os.environ, "MEM_USER": f"u{largest}", "NO_COLOR": "1"}
    start_payload = json.dumps({"hook_event_name": "SessionStart", "source": "startup",
                                "session_id": "bench", "cwd": str(base)}).encode()
    mem = str(BIN / "mem")
    hook_cases = {"floor (imports only)": lambda i: run_timed(
        [sys.executable, "-c", STARTUP_FLOOR], env)}
    for agent in ("claude-code", "codex", "gemini"):
        hook_cases[f"mem hook {agent} SessionStart"] = (
            lambda i, a=agent: run_timed([mem, "hook", a], env, start_payload))
    samples = interleaved(hook_cases, 11)
    floor = median_ms(samples["floor (imports only)"])
    hooks = {name: {"median_ms": round(median_ms(v), 1),
                    "ratio": round(median_ms(v) / floor, 2)} for name, v in samples.items()}
    for name, row in hooks.items():
        print(f"{name:<36}{row['median_ms']:>10.1f} ms {row['ratio']:>6.2f}× floor")
    doc[f"SessionStart at {largest} messages"] = hooks
    report("agents", doc)
    return doc


if __name__ == "__main__":
    main()
