"""mem's hooks and MCP server started the way each agent starts them, and mem's settings
held against each agent's own checks.

An agent does not pass its environment on as it is: Codex gives an MCP server HOME, PATH,
LANG, SHELL, TERM and a few more only; Gemini CLI drops every variable whose name holds
KEY, TOKEN, SECRET (and more); Claude Code passes everything. With the vault, key, config
and user all outside the defaults, the server must still start, list mem's tools and
store for the user the hooks brief. The real clients (tests/agents/package.json; `.ci/run`
installs them) check the same offline: `claude mcp list`, `gemini mcp list`, `opencode mcp
list` and `qwen mcp list` start the server to health-check it, Codex's app server lists
its tools and calls one, and `copilot mcp get` reads the entry mem wrote. Cline's CLI has
no check that runs without a terminal: its library (@cline/core, which the CLI runs on)
reads mem's entry and starts the server (tests/agents/cline_check.mjs). `amp mcp list`
reads Amp's entry and `amp mcp doctor` starts the server offline. Cursor's agent is
not on npm: mem's entries for it are held to the server's own start as it starts it.
Aider (PyPI, in tests/agents/aider-venv) has neither MCP nor hooks: it runs a session
offline against a model on 127.0.0.1, and the history file it writes is ingested.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from tests.conftest import mem

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = ROOT / "tests" / "agents" / "node_modules" / ".bin"
# Aider is on PyPI, in a virtualenv of its own (`make agents`): its pins are not mem's.
AIDER = ROOT / "tests" / "agents" / "aider-venv" / "bin" / "aider"
TOOLS = {"memory_store", "memory_search", "memory_brief", "memory_get", "memory_delete"}
# Codex's default allow-list for an MCP server's environment (rmcp-client).
CODEX_KEPT = ("HOME", "LOGNAME", "PATH", "SHELL", "USER", "LANG", "LC_ALL", "TERM", "TMPDIR",
              "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR")
# Gemini CLI's names never passed on (environmentSanitization.ts).
GEMINI_DROPPED = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|AUTH|CREDENTIAL|CREDS|PRIVATE|"
                            r"CERT", re.IGNORECASE)
TIMEOUT = 60


def client(name: str, path: Path | None = None) -> Path:
    path = path or CLIENTS / name
    if not path.exists():
        if os.environ.get("AGENT_CLIS_REQUIRED"):  # CI installs them: a miss is a failure
            pytest.fail(f"{name} is not installed: run `make agents`")
        pytest.skip(f"{name} is not installed here: `make agents` installs it (CI does)")
    return path


@pytest.fixture
def elsewhere(script_runner: ScriptRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
              ) -> Iterator[Path]:
    """A vault, key, config and log outside the defaults, for user bob of org acme (not
    the login user), as the installer's environment says; the agents' settings in HOME."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "config.yaml").write_text("mcp:\n  max_stores: 7\n")  # the server reads it
    for name, value in {"MEM_VAULT": tmp_path / "data" / "vault",
                        "MEM_KEY_FILE": tmp_path / "secrets" / "mem.key",
                        "MEM_CONFIG_DIR": conf, "MEM_LOG_DIR": tmp_path / "logs",
                        "CODEX_HOME": tmp_path / "home" / ".codex"}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv("MEM_USER", "bob")
    monkeypatch.setenv("MEM_ORG", "acme")
    assert mem(script_runner, "init").returncode == 0  # makes the key at MEM_KEY_FILE
    project = tmp_path / "project"
    project.mkdir()
    yield project


def without_mem(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith(("MEM_", "XDG_"))}


def as_started_by(agent: str, entry_env: dict[str, str]) -> dict[str, str]:
    """The environment `agent` gives an MCP server it starts: its own (here with none of
    mem's variables: started from a desktop launcher, or they were set only in the shell
    that ran the installer), filtered as the agent filters it, and the entry's `env`."""
    own = without_mem(dict(os.environ))
    if agent == "codex":
        base = {k: own[k] for k in CODEX_KEPT if k in own}
    elif agent == "gemini":
        base = {k: v for k, v in own.items() if not GEMINI_DROPPED.search(k)}
    else:
        base = own
    return {**base, **entry_env}


def server_entry(agent: str, home: Path) -> tuple[list[str], dict[str, str]]:
    """argv and env of mem's server as the user-scope install wrote it."""
    if agent == "codex":
        table = tomllib.loads((home / ".codex" / "config.toml").read_text())["mcp_servers"]
        entry = table["mem"]
        return [entry["command"], *entry["args"]], dict(entry.get("env", {}))
    path = home / (".claude.json" if agent == "claude-code" else ".gemini/settings.json")
    entry = json.loads(path.read_text())["mcpServers"]["mem"]
    return [entry["command"], *entry["args"]], dict(entry.get("env", {}))


def session_start_command(agent: str, home: Path) -> list[str]:
    """The SessionStart hook as the agent runs it (a shell line through sh, or exec form)."""
    path = {"claude-code": home / ".claude" / "settings.json",
            "codex": home / ".codex" / "hooks.json",
            "gemini": home / ".gemini" / "settings.json"}[agent]
    (handler,) = [h for g in json.loads(path.read_text())["hooks"]["SessionStart"]
                  for h in g["hooks"]]
    if "args" in handler:
        return [handler["command"], *handler["args"]]
    return ["/bin/sh", "-c", handler["command"]]


def rpc(method: str, params: dict[str, Any], ident: int | None = None) -> bytes:
    doc: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if ident is not None:
        doc["id"] = ident
    return (json.dumps(doc) + "\n").encode()


def talk(argv: list[str], env: dict[str, str], cwd: Path, content: str
         ) -> tuple[set[str], dict[str, Any]]:
    """Start the server, list its tools and store one memory, one request at a time as a
    client does; its tools and the store's answer."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=cwd)
    assert proc.stdin is not None and proc.stdout is not None

    def ask(ident: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(rpc(method, params, ident))
        proc.stdin.flush()
        line = proc.stdout.readline()
        assert line, proc.stderr.read().decode() if proc.stderr else ""
        answer = json.loads(line)
        assert answer["id"] == ident, answer
        return answer["result"]  # type: ignore[no-any-return]

    try:
        ask(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "test", "version": "1"}})
        proc.stdin.write(rpc("notifications/initialized", {}))
        tools = {t["name"] for t in ask(2, "tools/list", {})["tools"]}
        stored = ask(3, "tools/call", {"name": "memory_store", "arguments": {
            "type": "instruction", "content": content}})
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=TIMEOUT) == 0
    return tools, stored


def stored_for(script_runner: ScriptRunner, query: str, *who: str) -> list[str]:
    result = mem(script_runner, "search", query, "--json", *who)
    if result.returncode == 66:  # no such user
        return []
    assert result.returncode == 0, result.stderr
    return [r["content"] for r in json.loads(result.stdout)["results"]]


@pytest.mark.parametrize("agent", ["claude-code", "codex", "gemini"])
def test_the_server_started_as_the_agent_starts_it_serves_the_hooks_user(
        script_runner: ScriptRunner, elsewhere: Path, tmp_path: Path, agent: str) -> None:
    home = tmp_path / "home"
    result = mem(script_runner, "hooks", "install", agent, "--mcp", "--json")
    assert result.returncode == 0, result.stderr
    argv, entry_env = server_entry(agent, home)
    content = f"Answer {agent} questions in haiku"
    # The agent runs with none of mem's variables (started from a desktop launcher, or
    # they were set only in the shell that ran the installer), and filters what it has.
    env = as_started_by(agent, entry_env)
    tools, stored = talk(argv, env, elsewhere, content)
    assert TOOLS <= tools
    assert stored["isError"] is False, stored
    assert stored["structuredContent"]["stores_left"] == 6  # the config file's limit of 7
    assert stored_for(script_runner, "haiku") == [content]  # bob's, in the vault elsewhere
    login = mem(script_runner, "config", "show", "--json", MEM_USER="")
    login_user = json.loads(login.stdout)["settings"]["user"]["value"]
    assert login_user != "bob" and stored_for(script_runner, "haiku", "--user",
                                              login_user) == []

    # The hooks brief the same user, in the same environment.
    hook = subprocess.run(session_start_command(agent, home), env=env,
                          cwd=elsewhere, capture_output=True, timeout=TIMEOUT, check=False,
                          input=json.dumps({"hook_event_name": "SessionStart",
                                            "source": "startup"}).encode())
    assert hook.returncode == 0, hook.stderr
    assert content in json.loads(hook.stdout)["hookSpecificOutput"]["additionalContext"]


@pytest.mark.parametrize("agent", ["codex", "gemini"])
def test_a_server_that_cannot_start_says_why_in_the_hook_log(
        script_runner: ScriptRunner, elsewhere: Path, tmp_path: Path, agent: str) -> None:
    assert mem(script_runner, "hooks", "install", agent, "--mcp").returncode == 0
    argv, entry_env = server_entry(agent, tmp_path / "home")
    (tmp_path / "secrets" / "mem.key").unlink()
    done = subprocess.run(argv, input=b"", env=as_started_by(agent, entry_env),
                          cwd=elsewhere, capture_output=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 78 and done.stdout == b""
    log = (tmp_path / "logs" / "hooks.log").read_text()
    assert "mcp start: server not started for user bob of org acme" in log
    assert "mem.key does not exist" in log


def test_gemini_refuses_a_server_that_would_need_mem_master_key(
        script_runner: ScriptRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import base64

    monkeypatch.setenv("MEM_MASTER_KEY", base64.b64encode(os.urandom(32)).decode())
    settings = tmp_path / "home" / ".gemini" / "settings.json"
    result = mem(script_runner, "hooks", "install", "gemini", "--mcp")
    assert result.returncode == 78 and "MEM_MASTER_KEY" in result.stderr
    assert not settings.exists()
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    assert mem(script_runner, "hooks", "install", "codex", "--mcp").returncode == 0
    server = tomllib.loads((tmp_path / "codex" / "config.toml").read_text())
    # Passed on by name: the key itself is written nowhere.
    assert server["mcp_servers"]["mem"]["env_vars"] == ["MEM_MASTER_KEY"]
    assert os.environ["MEM_MASTER_KEY"] not in (tmp_path / "codex" / "config.toml").read_text()


# --- config.toml keeps what its user wrote ----------------------------------------------------

USER_TOML = """\
# Codex, set up by hand
model = "gpt-5-codex"  # the default model

[mcp_servers.docs]
command = "docs-server"
args = ["--stdio"]

# Added by `mem hooks install codex --mcp`.
[mcp_servers.mem]
command = "/old/place/mem"
args = ["mcp"]
startup_timeout_sec = 30  # mem opens its vault first

[mcp_servers.mem.env]
MEM_USER = "bob"
MEM_ORG = "acme"

# A fast profile for small edits
[profiles.fast]
model = "o4-mini"
"""


def test_codex_reinstall_and_uninstall_keep_what_the_user_wrote(
        script_runner: ScriptRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "codex"
    home.mkdir()
    monkeypatch.setenv("CODEX_HOME", str(home))
    monkeypatch.setenv("MEM_USER", "bob")
    monkeypatch.setenv("MEM_ORG", "acme")
    config = home / "config.toml"
    config.write_text(USER_TOML)
    before = tomllib.loads(USER_TOML)

    first = mem(script_runner, "hooks", "install", "codex", "--mcp")
    assert first.returncode == 0 and "/hooks" in first.stderr  # how to trust them
    text = config.read_text()
    for line in USER_TOML.splitlines():  # every comment, where it was
        if line.startswith("#") or "#" in line and "mem" not in line.split("#")[0]:
            assert line in text
    assert "# A fast profile for small edits\n[profiles.fast]" in text
    doc = tomllib.loads(text)
    assert {k: v for k, v in doc.items() if k != "mcp_servers"} == \
        {k: v for k, v in before.items() if k != "mcp_servers"}
    assert doc["mcp_servers"]["docs"] == before["mcp_servers"]["docs"]
    server = doc["mcp_servers"]["mem"]
    assert server["startup_timeout_sec"] == 30  # the user's own key in mem's table
    assert server["env"]["MEM_USER"] == "bob" and server["env"]["MEM_ORG"] == "acme"
    assert server["command"] != "/old/place/mem" and "--user=bob" in server["args"]
    installed = config.read_bytes()
    assert mem(script_runner, "hooks", "install", "codex", "--mcp").returncode == 0
    assert config.read_bytes() == installed

    # A table that names another user than the hooks would use is not overwritten.
    monkeypatch.setenv("MEM_USER", "carol")
    result = mem(script_runner, "hooks", "install", "codex", "--mcp")
    assert result.returncode == 2 and "MEM_USER" in result.stderr
    assert config.read_bytes() == installed
    monkeypatch.setenv("MEM_USER", "bob")

    assert mem(script_runner, "hooks", "uninstall", "codex", "--mcp").returncode == 0
    text = config.read_text()
    assert "# Codex, set up by hand\n" in text and "# the default model" in text
    assert "# A fast profile for small edits\n[profiles.fast]" in text
    assert "mcp_servers.mem" not in text and "Added by" not in text
    doc = tomllib.loads(text)
    assert doc == {**before, "mcp_servers": {"docs": before["mcp_servers"]["docs"]}}


# --- the real clients, offline -----------------------------------------------------------------


def client_env(home: Path) -> dict[str, str]:
    """The agent's own environment: this HOME, none of mem's variables, no update checks
    or telemetry."""
    return {**without_mem(dict(os.environ)), "HOME": str(home),
            "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "NO_COLOR": "1"}


def test_the_plugin_passes_claude_codes_own_validation() -> None:
    claude = client("claude")
    for target in (ROOT / "plugins" / "mem", ROOT):  # the plugin, and the marketplace
        done = subprocess.run([str(claude), "plugin", "validate", str(target)],
                              capture_output=True, text=True, timeout=TIMEOUT, check=False)
        assert done.returncode == 0 and "Validation passed" in done.stdout, done.stdout


def test_claude_code_validates_the_hooks_and_connects_to_the_server(
        script_runner: ScriptRunner, elsewhere: Path, tmp_path: Path) -> None:
    claude = client("claude")
    home = tmp_path / "home"
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"hooks": {"SessionStart": [{"matcher": "startup", "hooks": [
        {"type": "command", "command": "mycheck && mem hook claude-code"}]}]}}))
    assert mem(script_runner, "hooks", "install", "claude-code", "--mcp").returncode == 0
    # The hooks as installed, held against Claude Code's own schema (a plugin's hooks
    # file has the settings' shape).
    probe = tmp_path / "probe"
    (probe / ".claude-plugin").mkdir(parents=True)
    (probe / ".claude-plugin" / "plugin.json").write_text('{"name": "probe", "version": "1.0.0"}')
    (probe / "hooks").mkdir()
    (probe / "hooks" / "hooks.json").write_text(json.dumps(
        {"hooks": json.loads(settings.read_text())["hooks"]}))
    env = client_env(home)
    done = subprocess.run([str(claude), "plugin", "validate", str(probe)], env=env,
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 0 and "Validation passed" in done.stdout, done.stdout
    done = subprocess.run([str(claude), "mcp", "list"], env=env, cwd=elsewhere,
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("mem:")]
    assert "Connected" in line and "Failed" not in line, done.stdout


def test_gemini_cli_connects_to_the_server(
        script_runner: ScriptRunner, elsewhere: Path, tmp_path: Path) -> None:
    gemini = client("gemini")
    home = tmp_path / "home"
    installed = mem(script_runner, "hooks", "install", "gemini", "--mcp")
    assert installed.returncode == 0 and "/permissions trust" in installed.stderr
    # Gemini CLI starts no user-level server in an untrusted folder: the user's decision,
    # made here in the test's own HOME (`gemini trust` in real life).
    (home / ".gemini" / "trustedFolders.json").write_text(
        json.dumps({str(elsewhere): "TRUST_FOLDER"}))
    done = subprocess.run([str(gemini), "mcp", "list"], env=client_env(home), cwd=elsewhere,
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)
    out = done.stdout + done.stderr
    (line,) = [x for x in out.splitlines() if " mem:" in x or x.startswith("mem:")]
    assert "Connected" in line and "Disconnected" not in line, out


def test_codex_lists_the_tools_and_stores_for_the_hooks_user(
        script_runner: ScriptRunner, elsewhere: Path, tmp_path: Path) -> None:
    codex = client("codex")
    home = tmp_path / "home"
    assert mem(script_runner, "hooks", "install", "codex", "--mcp").returncode == 0
    env = {**client_env(home), "CODEX_HOME": str(home / ".codex")}
    # The config as Codex parses it.
    listed = subprocess.run([str(codex), "mcp", "list", "--json"], env=env, cwd=elsewhere,
                            capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert listed.returncode == 0, listed.stderr
    (server,) = [s for s in json.loads(listed.stdout) if s["name"] == "mem"]
    assert server["enabled"] and "--user=bob" in server["transport"]["args"]
    # Codex's app server starts the server as a session would, lists it, calls it.
    proc = subprocess.Popen([str(codex), "app-server"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                            cwd=elsewhere)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        def ask(ident: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(rpc(method, params, ident))
            proc.stdin.flush()
            while True:
                doc = json.loads(proc.stdout.readline() or b"null")
                assert doc is not None, "codex app-server ended"
                if doc.get("id") == ident:
                    assert "result" in doc, doc
                    return doc["result"]  # type: ignore[no-any-return]

        ask(1, "initialize", {"clientInfo": {"name": "test", "version": "1"}})
        proc.stdin.write(rpc("initialized", {}))
        (status,) = [s for s in ask(2, "mcpServerStatus/list", {"serverName": "mem"})["data"]
                     if s["name"] == "mem"]
        assert status.get("toolsError") is None and TOOLS <= set(status["tools"]), status
        thread = ask(3, "thread/start", {})["thread"]["id"]
        stored = ask(4, "mcpServer/tool/call", {
            "threadId": thread, "server": "mem", "tool": "memory_store",
            "arguments": {"type": "fact", "content": "Codex keeps this for bob"}})
        assert stored["isError"] is False, stored
    finally:
        proc.kill()
        proc.wait(timeout=TIMEOUT)
    assert stored_for(script_runner, "Codex keeps") == ["Codex keeps this for bob"]


def test_codex_parses_config_toml_after_reinstall_and_uninstall(
        script_runner: ScriptRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    codex = client("codex")
    home = tmp_path / "codex"
    home.mkdir()
    monkeypatch.setenv("CODEX_HOME", str(home))
    monkeypatch.setenv("MEM_USER", "bob")
    monkeypatch.setenv("MEM_ORG", "acme")
    (home / "config.toml").write_text(USER_TOML)
    env = {**client_env(tmp_path / "home"), "CODEX_HOME": str(home)}

    def servers() -> dict[str, Any]:
        done = subprocess.run([str(codex), "mcp", "list", "--json"], env=env,
                              capture_output=True, text=True, timeout=TIMEOUT, check=False)
        assert done.returncode == 0, done.stderr
        return {s["name"]: s for s in json.loads(done.stdout)}

    assert mem(script_runner, "hooks", "install", "codex", "--mcp").returncode == 0
    listed = servers()
    assert set(listed) == {"docs", "mem"}
    assert listed["mem"]["startup_timeout_sec"] == 30
    assert {"MEM_USER": "bob", "MEM_ORG": "acme"}.items() <= \
        listed["mem"]["transport"]["env"].items()
    assert mem(script_runner, "hooks", "uninstall", "codex", "--mcp").returncode == 0
    assert set(servers()) == {"docs"}


@pytest.mark.long  # about half a minute of the clients' own start-up
def test_setup_wires_every_real_client_as_its_own_checks_see_it(
        script_runner: ScriptRunner, elsewhere: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    claude, gemini, codex = client("claude"), client("gemini"), client("codex")
    home = tmp_path / "home"
    monkeypatch.setenv("PATH", os.pathsep.join([str(CLIENTS), os.environ["PATH"]]))
    result = mem(script_runner, "setup", "-y", "--json")
    assert result.returncode == 0, result.stderr
    found = {a["name"]: a for a in json.loads(result.stdout)["agents"]}
    pinned = json.loads((ROOT / "tests" / "agents" / "package.json").read_text())
    for name, package in (("claude-code", "@anthropic-ai/claude-code"),
                          ("codex", "@openai/codex"), ("gemini", "@google/gemini-cli")):
        assert found[name]["version"] == pinned["dependencies"][package]
        assert found[name]["changes"] and found[name]["error"] is None

    (home / ".gemini" / "trustedFolders.json").write_text(
        json.dumps({str(elsewhere): "TRUST_FOLDER"}))  # the user's decision (above)
    env = {**client_env(home), "CODEX_HOME": str(home / ".codex")}
    done = subprocess.run([str(claude), "mcp", "list"], env=env, cwd=elsewhere,
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("mem:")]
    assert "Connected" in line, done.stdout
    done = subprocess.run([str(gemini), "mcp", "list"], env=env, cwd=elsewhere,
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)
    out = done.stdout + done.stderr
    (line,) = [x for x in out.splitlines() if " mem:" in x or x.startswith("mem:")]
    assert "Connected" in line and "Disconnected" not in line, out
    listed = subprocess.run([str(codex), "mcp", "list", "--json"], env=env, cwd=elsewhere,
                            capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert listed.returncode == 0, listed.stderr
    (server,) = [s for s in json.loads(listed.stdout) if s["name"] == "mem"]
    assert server["enabled"] and "--user=bob" in server["transport"]["args"]

    # mem doctor sees each wired, in a form its release runs.
    checked = json.loads(mem(script_runner, "doctor", "--json").stdout)["findings"]
    agents = {f["check"]: f for f in checked if f["check"].startswith("agent:")}
    assert {f["severity"] for f in agents.values()} == {"ok"}, agents

    assert mem(script_runner, "setup", "--undo", "-y").returncode == 0
    listed = subprocess.run([str(codex), "mcp", "list", "--json"], env=env, cwd=elsewhere,
                            capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert listed.returncode == 0 and "mem" not in {s["name"] for s in json.loads(listed.stdout)}


# --- OpenCode, Cursor, Copilot CLI, Qwen Code, Cline: what `mem setup` writes -----------------

# Where each keeps mem's server, and what it gives the server of its own environment:
# OpenCode, Qwen Code and Amp pass all of it (tried: each handed a server MEM_USER and
# MEM_MASTER_KEY); the others are held to the MCP SDK's default, the least a client passes.
WHOLE_ENV = ("opencode", "qwen", "amp")
SDK_KEPT = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
SERVERS = {"opencode": (".config/opencode/opencode.json", "mcp"),
           "cursor": (".cursor/mcp.json", "mcpServers"),
           "copilot": (".copilot/mcp-config.json", "mcpServers"),
           "qwen": (".qwen/settings.json", "mcpServers"),
           "cline": (".cline/data/settings/cline_mcp_settings.json", "mcpServers"),
           "amp": (".config/amp/settings.json", "amp.mcpServers")}


def set_up(script_runner: ScriptRunner, home: Path, agent: str) -> tuple[list[str],
                                                                          dict[str, str]]:
    """`mem setup` for one agent found by its folder; argv and env of the server it wrote."""
    from memvault.integrations import jsonedit

    place, container = SERVERS[agent]
    (home / place).parent.mkdir(parents=True, exist_ok=True)
    result = mem(script_runner, "setup", "-y", f"--agent={agent}")
    assert result.returncode == 0, result.stderr
    entry = jsonedit.loads((home / place).read_text())[container]["mem"]
    if agent == "opencode":
        return list(entry["command"]), dict(entry.get("environment", {}))
    return [entry["command"], *entry["args"]], dict(entry.get("env", {}))


def search_over_mcp(argv: list[str], env: dict[str, str], cwd: Path, query: str
                    ) -> dict[str, Any]:
    """One session of the server, a request at a time as a client sends them: initialize,
    then memory_search; its answer."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=cwd)
    assert proc.stdin is not None and proc.stdout is not None
    answers = []
    try:
        for ident, method, params in (
                (1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                   "clientInfo": {"name": "test", "version": "1"}}),
                (2, "tools/call", {"name": "memory_search", "arguments": {"query": query}})):
            proc.stdin.write(rpc(method, params, ident))
            if ident == 1:
                proc.stdin.flush()
                answers.append(json.loads(proc.stdout.readline()))
                proc.stdin.write(rpc("notifications/initialized", {}))
            proc.stdin.flush()
        answers.append(json.loads(proc.stdout.readline()))
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=TIMEOUT) == 0
    assert [a["id"] for a in answers] == [1, 2], answers
    return answers[1]["result"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("agent", sorted(SERVERS))
def test_each_agents_server_as_it_starts_it_searches_the_setups_user(
        script_runner: ScriptRunner, elsewhere: Path, tmp_path: Path, agent: str) -> None:
    home = tmp_path / "home"
    argv, entry_env = set_up(script_runner, home, agent)
    own = without_mem(dict(os.environ))
    base = own if agent in WHOLE_ENV else {k: own[k] for k in SDK_KEPT if k in own}
    env = {**base, **entry_env}
    content = f"Deploys for {agent} go through the blue pipeline"
    tools, stored = talk(argv, env, elsewhere, content)
    assert TOOLS <= tools and stored["isError"] is False, stored
    found = search_over_mcp(argv, env, elsewhere, "blue pipeline")
    assert found["isError"] is False, found
    assert [r["content"] for r in found["structuredContent"]["results"]] == [content]
    assert stored_for(script_runner, "blue pipeline") == [content]  # bob's, elsewhere


def test_opencode_connects_to_the_server_in_a_hand_written_jsonc(
        script_runner: ScriptRunner, elsewhere: Path, tmp_path: Path) -> None:
    opencode = client("opencode")
    home = tmp_path / "home"
    config = home / ".config" / "opencode" / "opencode.jsonc"
    config.parent.mkdir(parents=True)
    config.write_text('{\n  // mine\n  "autoupdate": false,\n}\n')
    assert mem(script_runner, "setup", "-y", "--agent=opencode").returncode == 0
    env = {**client_env(home), "OPENCODE_DISABLE_AUTOUPDATE": "1"}
    done = subprocess.run([str(opencode), "mcp", "list"], env=env, cwd=elsewhere,
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)
    out = done.stdout + done.stderr
    (line,) = [x for x in out.splitlines() if " mem " in f"{x} "]
    assert "connected" in line and "failed" not in line, out
    assert "// mine" in config.read_text()


def test_qwen_code_connects_to_the_server(
        script_runner: ScriptRunner, elsewhere: Path, tmp_path: Path) -> None:
    qwen = client("qwen")
    home = tmp_path / "home"
    (home / ".qwen").mkdir(parents=True)
    assert mem(script_runner, "setup", "-y", "--agent=qwen").returncode == 0
    done = subprocess.run([str(qwen), "mcp", "list"], env=client_env(home), cwd=elsewhere,
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)
    out = done.stdout + done.stderr
    (line,) = [x for x in out.splitlines() if " mem:" in x or x.startswith("mem:")]
    assert "Connected" in line and "Disconnected" not in line, out
    assert "--user=bob" in line


def test_copilot_cli_reads_the_server_mem_wrote(
        script_runner: ScriptRunner, elsewhere: Path, tmp_path: Path) -> None:
    copilot = client("copilot")
    home = tmp_path / "home"
    config = home / ".copilot" / "mcp-config.json"
    config.parent.mkdir(parents=True)
    config.write_text('{"mcpServers": {"docs": {"type": "local", "command": "docs-mcp", '
                      '"tools": ["*"]}}}')
    assert mem(script_runner, "setup", "-y", "--agent=copilot").returncode == 0

    def ask(*args: str) -> str:
        done = subprocess.run([str(copilot), "mcp", *args], env=client_env(home),
                              cwd=elsewhere, capture_output=True, text=True,
                              timeout=TIMEOUT, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    listed = ask("list")
    assert "mem (local)" in listed and "docs (local)" in listed, listed
    shown = ask("get", "mem")
    assert "Status: Enabled" in shown and "--user=bob" in shown, shown
    assert mem(script_runner, "setup", "--undo", "-y", "--agent=copilot").returncode == 0
    assert "mem (local)" not in ask("list")


def test_amps_own_checks_list_and_connect_to_the_server_mem_wrote(
        script_runner: ScriptRunner, elsewhere: Path, tmp_path: Path) -> None:
    amp = client("amp")
    home = tmp_path / "home"
    settings = home / ".config" / "amp" / "settings.json"
    settings.parent.mkdir(parents=True)
    mine = ('{\n  // mine\n  "amp.updates.mode": "disabled",\n'
            '  "amp.mcpServers": {"docs": {"command": "docs-mcp"},},\n}\n')
    settings.write_text(mine)
    env = client_env(home)

    def ask(*args: str, key: bool = False) -> str:
        # `amp mcp doctor` asks for a login without a key; a key that is none serves
        # (the account's own servers are then not reached: only the local ones are).
        done = subprocess.run([str(amp), "mcp", *args], env={
            **env, **({"AMP_API_KEY": "sgamp_not_a_key"} if key else {})}, cwd=elsewhere,
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT,
            check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    # The shape `amp mcp add` writes for a local server, in a home of its own.
    other = tmp_path / "other"
    subprocess.run([str(amp), "mcp", "add", "probe", "--env", "K=V", "--", "/bin/probe",
                    "a"], env={**env, "HOME": str(other)}, cwd=other.parent,
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT, check=True)
    theirs = json.loads((other / ".config" / "amp" / "settings.json").read_text())
    assert mem(script_runner, "setup", "-y", "--agent=amp").returncode == 0
    from memvault.integrations import jsonedit

    ours = jsonedit.loads(settings.read_text())["amp.mcpServers"]["mem"]
    shape = {k: type(v) for k, v in theirs["amp.mcpServers"]["probe"].items()}
    assert {k: type(v) for k, v in ours.items()} == shape

    (listed,) = [s for s in json.loads(ask("list", "--json")) if s["name"] == "mem"]
    assert listed["source"] == "global" and listed["spec"] == ours
    assert "--user=bob" in listed["spec"]["args"]
    checked = ask("doctor", "mem", key=True)
    (line,) = [x for x in checked.splitlines() if x.startswith("mem ")]
    assert "connected" in line and all(tool in line for tool in TOOLS), checked
    assert mem(script_runner, "setup", "--undo", "-y", "--agent=amp").returncode == 0
    assert settings.read_text() == mine
    assert "mem" not in {s["name"] for s in json.loads(ask("list", "--json"))}


def test_clines_own_loader_and_client_run_the_server_mem_wrote(
        script_runner: ScriptRunner, elsewhere: Path, tmp_path: Path) -> None:
    client("cline")
    home = tmp_path / "home"
    settings = home / ".cline" / "data" / "settings" / "cline_mcp_settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{\n  "mcpServers": {\n    "docs": {"transport": {"type": "stdio", '
                        '"command": "docs-mcp", "args": []}}\n  }\n}\n')
    argv, entry_env = set_up(script_runner, home, "cline")
    content = "Cline's releases are cut on Thursdays"
    talk(argv, {**without_mem(dict(os.environ)), **entry_env}, elsewhere, content)
    # Cline's library (the CLI runs on it) reads the file and starts the server itself,
    # with its own environment: none of mem's variables.
    done = subprocess.run(["node", str(CLIENTS.parent.parent / "cline_check.mjs"),
                           str(settings), "mem", "Thursdays"], env=client_env(home),
                          cwd=elsewhere, capture_output=True, text=True, timeout=TIMEOUT,
                          check=False)
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("{")]
    seen = json.loads(line)
    assert sorted(seen["names"]) == ["docs", "mem"]
    assert seen["registration"]["disabled"] is False
    assert seen["registration"]["transport"]["type"] == "stdio"
    assert TOOLS <= set(seen["tools"]), seen
    assert content in json.dumps(seen["found"]), seen["found"]
    assert mem(script_runner, "setup", "--undo", "-y", "--agent=cline").returncode == 0
    done = subprocess.run(["node", str(CLIENTS.parent.parent / "cline_check.mjs"),
                           str(settings), "mem", "x"], env=client_env(home),
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert json.loads(done.stdout.splitlines()[-1]) == {"names": ["docs"]}


# --- OpenCode's plugin, in a real session against a model on 127.0.0.1 ----------------------


@pytest.fixture
def model_server() -> Iterator[str]:
    """tests/servers/openai_chat.py: an OpenAI-compatible model; its base URL."""
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "tests.servers.openai_chat"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    try:
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(timeout=TIMEOUT)


def test_opencode_runs_mems_plugin_briefing_the_session_and_keeping_it(
        script_runner: ScriptRunner, elsewhere: Path, tmp_path: Path,
        model_server: str) -> None:
    import time
    import urllib.request

    opencode = client("opencode")
    home = tmp_path / "home"
    config = home / ".config" / "opencode" / "opencode.jsonc"
    config.parent.mkdir(parents=True)
    config.write_text('{\n  // a model of my own\n  "provider": {"local": {"npm": '
                      '"@ai-sdk/openai-compatible", "name": "Local", "options": {"baseURL": '
                      f'"{model_server}/v1", "apiKey": "x"}}, "models": {{"test-model": '
                      '{"name": "Test"}}}},\n  "model": "local/test-model",\n'
                      '  "autoupdate": false,\n}\n')
    assert mem(script_runner, "add", "--type", "preference",
               "Prefers uv to pip for installs").returncode == 0
    assert mem(script_runner, "setup", "-y", "--agent=opencode").returncode == 0
    plugin = home / ".config" / "opencode" / "plugins" / "mem.js"
    assert plugin.is_file()
    env = {**client_env(home), "OPENCODE_DISABLE_AUTOUPDATE": "1",
           "OPENCODE_DISABLE_MODELS_FETCH": "1"}
    # OpenCode loads the plugin (its resolved config lists it, nothing failed to load).
    shown = subprocess.run([str(opencode), "debug", "config", "--print-logs"], env=env,
                           cwd=elsewhere, capture_output=True, text=True, timeout=TIMEOUT,
                           check=False)
    assert shown.returncode == 0 and plugin.as_uri() in shown.stdout, shown.stdout
    assert "failed to load plugin" not in shown.stderr, shown.stderr
    # A session, offline: the model on 127.0.0.1 answers.
    done = subprocess.run([str(opencode), "run", "Which port does staging use?"], env=env,
                          cwd=elsewhere, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0 and "port 6543" in done.stdout, done.stdout + done.stderr
    with urllib.request.urlopen(f"{model_server}/log", timeout=TIMEOUT) as answer:
        asked = json.loads(answer.read())
    system = [m["content"] for r in asked for m in r["messages"] if m["role"] == "system"]
    # The brief reached the model, in mem's frame, in the session's system prompt.
    assert any("Prefers uv to pip for installs" in s and "<mem-memory" in s for s in system)
    # The session went idle: kept, for bob, in the vault the setup resolved.
    for _ in range(300):
        if stored_for(script_runner, "staging port 6543"):
            break
        time.sleep(0.1)
    assert any("port 6543" in t for t in stored_for(script_runner, "staging port 6543"))
    log = (tmp_path / "logs" / "hooks.log").read_text()
    assert "opencode session.start" in log and "opencode session.idle" in log

    # OpenCode adds its "$schema" to the file as it runs: the undo takes out mem's alone.
    from memvault.integrations import jsonedit

    assert mem(script_runner, "setup", "--undo", "-y", "--agent=opencode").returncode == 0
    assert not plugin.exists() and not plugin.parent.exists()
    after = jsonedit.loads(config.read_text())
    assert "mcp" not in after and after["model"] == "local/test-model"
    assert "// a model of my own" in config.read_text()


# --- Aider: no MCP or hooks; the history it writes offline, ingested --------------------


@pytest.fixture
def no_way_out() -> Iterator[tuple[str, list[str]]]:
    """A proxy on 127.0.0.1 that answers nothing: its URL, and who tried it. An agent given
    it for every scheme cannot reach past this machine unseen (nor wait on a network)."""
    import socket
    import threading

    tried: list[str] = []
    trap = socket.create_server(("127.0.0.1", 0))
    trap.settimeout(0.1)  # a closed socket does not wake a thread blocked in accept
    over = threading.Event()

    def refuse() -> None:
        while not over.is_set():
            try:
                conn, _ = trap.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    tried.append(conn.recv(512).decode(errors="replace").split("\r\n")[0])
                except OSError:
                    tried.append("?")

    thread = threading.Thread(target=refuse, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{trap.getsockname()[1]}", tried
    finally:
        over.set()
        thread.join(timeout=TIMEOUT)
        trap.close()


def test_aiders_history_written_offline_is_ingested_and_found(
        script_runner: ScriptRunner, elsewhere: Path, tmp_path: Path, model_server: str,
        no_way_out: tuple[str, list[str]]) -> None:
    aider = client("aider", AIDER)
    proxy, tried = no_way_out
    # Aider's model is the one on 127.0.0.1; every other way out goes to the trap. Its
    # sizes of known models come from the metadata file (not GitHub), litellm's from its
    # own copy; no analytics, no update check, no release notes (a browser).
    metadata = tmp_path / "model.metadata.json"
    metadata.write_text(json.dumps({"openai/test-model": {
        "max_input_tokens": 32768, "max_output_tokens": 4096, "input_cost_per_token": 0,
        "output_cost_per_token": 0, "litellm_provider": "openai", "mode": "chat"}}))
    env = {**client_env(tmp_path / "home"), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           **{name: proxy for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                                       "http_proxy", "https_proxy", "all_proxy")},
           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    env = {k: v for k, v in env.items() if not k.startswith(("AIDER_", "OPENAI_"))}

    def session(message: str) -> None:
        done = subprocess.run(
            [str(aider), "--message", message, "--model", "openai/test-model",
             "--openai-api-base", f"{model_server}/v1", "--openai-api-key", "x",
             "--model-metadata-file", str(metadata), "--no-git", "--yes-always",
             "--no-check-update", "--no-show-release-notes", "--no-analytics",
             "--no-show-model-warnings", "--no-pretty", "--no-fancy-input"],
            env=env, cwd=elsewhere, stdin=subprocess.DEVNULL, capture_output=True,
            text=True, timeout=120, check=False)
        assert done.returncode == 0 and "port 6543" in done.stdout, done.stdout + done.stderr

    session("Which port does the staging database listen on?")
    history = elsewhere / ".aider.chat.history.md"
    assert history.is_file()
    # Told no format: the file says it is Aider's. Aider's own lines (its banner, the
    # command line with its key, the token counts) are its harness, not the session.
    result = mem(script_runner, "ingest", str(history), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["format"] == "aider" and report["messages_added"] == 2, report
    assert report["ignored"].get("harness text", 0) > 0, report
    found = mem(script_runner, "search", "staging database port", "--json")
    assert found.returncode == 0, found.stderr
    hits = {r["content"]: r for r in json.loads(found.stdout)["results"]}
    asked, answered = ("Which port does the staging database listen on?",
                       "The staging database listens on port 6543.")
    assert {asked, answered} <= set(hits), hits
    assert {hits[asked]["agent"], hits[answered]["agent"]} == {"aider"}
    assert hits[asked]["session_id"] == hits[answered]["session_id"] == report["session_id"]
    assert not any("Tokens:" in text or "Aider v" in text for text in hits)

    # Aider appends the next session to the same file; a scan of the repository finds the
    # file and takes the new session alone.
    session("And which one does production use?")
    scanned = mem(script_runner, "ingest", "--scan", str(elsewhere), "--json")
    assert scanned.returncode == 0, scanned.stderr
    summary = json.loads(scanned.stdout)
    assert summary["files_ingested"] == 1 and summary["messages_added"] == 2, summary
    assert "And which one does production use?" in stored_for(script_runner, "production")
    assert tried == [], tried  # nothing went past this machine
