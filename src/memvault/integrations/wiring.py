"""mem in the agents of this machine: what `mem setup` changes (and `--undo` takes out),
and what `mem doctor` finds wired.

Setup writes the user scope of each agent found, hooks and MCP server, through that
agent's own installer (claude_code.py, codex.py, gemini.py, and opencode.py, cursor.py,
copilot.py, qwen.py, cline.py, which edit their files in place), in the form its release
takes (agents_found.py): shell lines for a Claude Code older than the exec form, the
hooks flag in config.toml for a Codex that needs it. Each installer keeps a backup of
what it changes and touches only mem's own entries, so an undo takes out exactly what
setup (or `mem hooks install`) added. An agent whose settings cannot be edited safely
is reported and left as it was; the others are still set up.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memvault.errors import MemError
from memvault.integrations import agents_found, hookbase
from memvault.integrations.agents_found import CLAUDE, CODEX, GEMINI, QWEN, Found, Needs
from memvault.model.machine_results import (
    OK,
    WARNING,
    AgentSetup,
    Finding,
    HookInstallResult,
    SetupChange,
    SetupResult,
)
from memvault.ops.doctor import Check, Probe

if TYPE_CHECKING:
    from memvault.integrations.claude_code import Plugin

LOG_WINDOW = timedelta(days=7)  # a hook failure older than this is history, not news
LOG_SHOWN = 3  # the newest failures shown


# --- mem setup -------------------------------------------------------------------------------


def setup(found: Sequence[Found], undo: bool = False, dry_run: bool = False) -> SetupResult:
    """Set up (or with `undo` take out) mem in each agent; `dry_run` changes nothing and
    says what would change. An undo goes through every agent's files, found or not:
    taking out only mem's entries is safe anywhere."""
    step = _undo if undo else _install
    agents = []
    for f in found:
        # Every file of an agent is checked before the first is written: an agent is
        # changed whole, or not at all.
        planned = step(f, True)
        agents.append(planned if dry_run or planned.error else step(f, False))
    notes: tuple[str, ...] = ()
    if not undo and any(f.found for f in found):
        notes = _key_note()
    return SetupResult(tuple(agents), dry_run, undo, notes)


def _base(f: Found) -> dict[str, Any]:
    return {"name": f.spec.name, "label": f.spec.label, "found": f.found,
            "version": f.version_text, "binary": f.command, "config_dir": str(f.config_dir)}


def _install(f: Found, dry_run: bool) -> AgentSetup:
    spec = f.spec
    if not f.found:
        return AgentSetup(**_base(f), notes=(f"not found: no `{spec.command}` on PATH, no "
                                             f"{f.config_dir}; skipped",))
    try:
        changes, notes = _apply(f, dry_run)
    except MemError as exc:  # a settings file mem cannot edit safely: left as it was
        return AgentSetup(**_base(f), error=exc.message, exit_code=exc.exit_code)
    return AgentSetup(**_base(f), changes=tuple(changes), notes=tuple(notes))


def refusal(f: Found) -> MemError | None:
    """Why `mem setup` would leave this agent as it is (the error it would report), or
    None: what `mem doctor` asks before it gives `mem setup` as a fix, so that it never
    sends anyone to a setup that refuses."""
    if not f.found:
        return None
    try:
        _apply(f, True)
    except MemError as exc:
        return exc
    return None


def _apply(f: Found, dry_run: bool) -> tuple[list[SetupChange], list[str]]:
    """Set up one agent found here: the changes, and what its user should know. MemError
    when it cannot be set up (nothing is written then)."""
    spec = f.spec
    module = spec.integration()
    need = _needs(f)
    if spec is CLAUDE:
        plug = module.plugin()
        if plug is not None:  # the plugin brings mem: a second set would run twice
            return [], _plugin_notes(f, plug, need)
    path = module.settings_path("user")
    if spec is CLAUDE:
        result = module.install(path, "user", mcp=True, dry_run=dry_run,
                                exec_form=need.exec_form)
    else:
        result = module.install(path, "user", mcp=True, dry_run=dry_run)
    changes = _changes(result, "add")
    if spec is CODEX:  # the flag when the release needs it; mem's own out when not
        config = module.config_path("user")
        if need.codex_flag:
            changes += _changes(module.set_hooks_flag(config, dry_run), "add")
        elif f.version is not None:
            changes += _changes(module.unset_hooks_flag(config, dry_run), "remove")
    notes = [n for n in (need.note, _turned_off(f)) if n]
    trust = getattr(module, "TRUST_NOTE", None)
    if trust and changes:
        notes.append(trust)
    return changes, notes


def _plugin_notes(f: Found, plug: Plugin, need: Needs) -> list[str]:
    """What setup says of a Claude Code that the mem plugin sets up: it adds nothing, and
    what stands in the plugin's way."""
    notes = [f"set up by the mem plugin ({plug.id}): mem adds no hooks or MCP server of "
             "its own here"]
    have = wired(f)
    if have.hooks or have.mcp is not None:
        notes.append(_twice(have, plug, True))
    if plug.exec_form and not need.exec_form:
        notes.append(_plugin_too_old(f, True))
    off = _turned_off(f)
    if off:
        notes.append(off)
    return notes


def _undo(f: Found, dry_run: bool) -> AgentSetup:
    spec = f.spec
    module = spec.integration()
    try:
        result = module.uninstall(module.settings_path("user"), "user", mcp=True,
                                  dry_run=dry_run)
        changes = _changes(result, "remove")
        if spec is CODEX:
            changes += _changes(module.unset_hooks_flag(module.config_path("user"), dry_run),
                                "remove")
    except MemError as exc:
        return AgentSetup(**_base(f), error=exc.message, exit_code=exc.exit_code)
    plug = module.plugin() if spec is CLAUDE else None
    notes = (f"the mem plugin ({plug.id}) stays: `claude plugin disable {plug.id}` turns "
             "it off",) if plug is not None else ()
    return AgentSetup(**_base(f), changes=tuple(changes), notes=notes)


def _changes(result: HookInstallResult, action: str) -> list[SetupChange]:
    out = []
    for each in (result, result.mcp):
        if each is not None and each.changed:
            out.append(SetupChange(each.settings, action, each.events, each.backup))
    return out


def _needs(f: Found) -> Needs:
    """What the release asks, knowing that a Gemini CLI older than hooks-on-by-default
    runs them where its user turned them on."""
    need = agents_found.needs(f)
    if f.spec is GEMINI and not need.runs_hooks and _gemini_switch(f) is True:
        return Needs()
    return need


def _key_note() -> tuple[str, ...]:
    from memvault.config import resolve
    from memvault.vault.keysource import key_source

    try:
        source = key_source(resolve())
    except MemError:
        return ()
    if source.kind == "none":
        return ("mem has no key yet: run `mem init`, and the hooks find it where it makes it",)
    return ()


# --- what is wired -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Wired:
    """mem's entries in one agent's user settings."""

    settings: Path
    hooks: tuple[str, ...]  # the events that have a hook of mem's
    argv: tuple[str, ...]  # the first one's command line
    exec_form: bool  # it is written as `command` with `args`
    mcp: Path | None  # the file that holds mem's MCP server


def wired(f: Found) -> Wired:
    """Read mem's entries out of an agent's settings (UsageError when a file is not
    valid JSON or TOML)."""
    spec = f.spec
    module = spec.integration()
    if hasattr(module, "wired_in"):  # the agents whose files mem edits in place
        return Wired(*module.wired_in())
    path = Path(module.settings_path("user"))
    doc = hookbase.load_json(path, spec.label)
    events: list[str] = []
    first: dict[str, Any] | None = None
    for event, groups in (doc.get("hooks") or {}).items():
        for group in groups if isinstance(groups, list) else []:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for handler in handlers if isinstance(handlers, list) else []:
                if module.ours(handler):
                    events.append(event)
                    first = first or handler
    mcp: Path | None = None
    if spec is CLAUDE:
        server_file = Path(module.mcp_path("user"))
        servers = hookbase.load_json(server_file, spec.label).get("mcpServers") or {}
    elif spec is CODEX:
        server_file = Path(module.config_path("user"))
        servers = module.read_config(server_file).get("mcp_servers") or {}
    else:
        server_file, servers = path, doc.get("mcpServers") or {}
    if isinstance(servers, dict) and "mem" in servers:
        mcp = server_file
    argv = tuple(hookbase.hook_argv(first)) if first else ()
    return Wired(path, tuple(dict.fromkeys(events)), argv,
                 bool(first and isinstance(first.get("args"), list)), mcp)


def _gemini_switch(f: Found) -> bool | None:
    """Gemini CLI's own hooks switch in its user settings (hooksConfig.enabled, or
    tools.enableHooks before it), and mem's hook disabled by name: False."""
    try:
        doc = hookbase.load_json(Path(f.spec.integration().settings_path("user")), "Gemini CLI")
    except MemError:
        return None
    config, tools = doc.get("hooksConfig"), doc.get("tools")
    config = config if isinstance(config, dict) else {}
    tools = tools if isinstance(tools, dict) else {}
    disabled = config.get("disabled")
    if isinstance(disabled, list) and "mem" in disabled:
        return False
    for value in (config.get("enabled"), tools.get("enableHooks")):
        if isinstance(value, bool):
            return value
    return None


def _turned_off(f: Found) -> str | None:
    """Where the user turned hooks off in the agent's own settings (mem leaves that
    choice alone), or None."""
    spec = f.spec
    module = spec.integration()
    if spec is CLAUDE:
        doc = hookbase.load_json(Path(module.settings_path("user")), spec.label)
        if doc.get("disableAllHooks") is True:
            return f"hooks are turned off in {module.settings_path('user')} " \
                "(disableAllHooks): mem's run once they are on again"
    elif spec is CODEX:
        config = module.config_path("user")
        if module.hooks_feature(module.read_config(config)) is False:
            return f"hooks are turned off in {config} ([features]): mem's run once they are " \
                "on again"
    elif spec is GEMINI and _gemini_switch(f) is False:
        return f"hooks (or mem's hook) are turned off in {module.settings_path('user')} " \
            "(hooksConfig): mem's run once they are on again"
    elif spec is QWEN:
        from memvault.integrations import jsonedit

        path = module.settings_path("user")
        if jsonedit.loads(jsonedit.read(path, spec.label)[0]).get("disableAllHooks") is True:
            return f"hooks are turned off in {path} (disableAllHooks): mem's run once they " \
                "are on again"
    return None


# --- mem doctor: the agents and the hook log ---------------------------------------------------


def agents(probe: Probe) -> Iterator[Finding]:
    """Each agent: found, its release, mem's hooks and server there and in a form the
    release runs."""
    for f in agents_found.detect():
        yield from agent_findings(f)


def agent_findings(f: Found) -> Iterator[Finding]:
    spec, check = f.spec, f"agent:{f.spec.name}"
    if not f.found:
        yield Finding(check, OK, f"{spec.label}: not found (no `{spec.command}` on PATH, no "
                      f"{f.config_dir})")
        return
    try:
        have = wired(f)
        off = _turned_off(f)
        plug = spec.integration().plugin() if spec is CLAUDE else None
    except MemError as exc:
        yield Finding(check, WARNING, f"{f.label}: {exc.message}")
        return
    if plug is not None:
        yield from _plugin_findings(f, have, plug, off)
        return
    problems: list[tuple[str, str | None]]
    if not have.hooks and have.mcp is None:
        problems = [("mem is not set up here (no hooks, no MCP server)", "setup")]
    else:
        problems = list(_problems(f, have)) + ([(off, None)] if off else [])
    blocked: MemError | None = None
    if any(fix == "setup" for _, fix in problems):
        blocked = refusal(f)
    for text, fix in problems:
        if fix == "setup" and blocked is not None:  # setup would refuse: say what will do
            text, fix = f"{text}; mem setup refuses it: {_reason(blocked)}", blocked.hint
        yield Finding(check, WARNING, f"{f.label}: {text}", fix, spec.name)
    if not problems and not spec.integration().EVENTS:  # an agent mem gives its server only
        yield Finding(check, OK, f"{f.label}: MCP server in {have.mcp}")
    elif not problems:
        form = "exec form" if have.exec_form else "shell lines"
        yield Finding(check, OK, f"{f.label}: hooks {', '.join(have.hooks)} ({form}) in "
                      f"{have.settings}; MCP server in {have.mcp}")


def _reason(exc: MemError) -> str:
    """An installer's refusal as a doctor's line words it: why, where the step is the
    fix beside it; nothing is being changed."""
    reason = exc.details.get("reason")
    if isinstance(reason, str) and exc.hint:
        return reason
    return re.sub(r"[;,:] nothing was changed$", "", exc.message)


def _plugin_findings(f: Found, have: Wired, plug: Plugin, off: str | None
                     ) -> Iterator[Finding]:
    """Claude Code with the mem plugin enabled: set up by it, and set up once."""
    check, name = f"agent:{f.spec.name}", f.spec.name
    warned = False
    if have.hooks or have.mcp is not None:  # the old advice followed: two of everything
        warned = True
        yield Finding(check, WARNING, f"{f.label}: {_twice(have, plug, False)}", "undo",
                      name)
    module = f.spec.integration()
    missing = [e for e in module.EVENTS if e not in plug.hooks]
    if missing or not plug.mcp:
        warned = True
        lacks = [f"hooks for {', '.join(missing)}"] if missing else []
        lacks += [] if plug.mcp else ["an MCP server of mem's"]
        yield Finding(check, WARNING, f"{f.label}: the mem plugin ({plug.id}) lacks "
                      f"{' and '.join(lacks)}: update it (claude plugin update {plug.id})",
                      None, name)
    if plug.exec_form and not _needs(f).exec_form:
        warned = True
        yield Finding(check, WARNING, f"{f.label}: {_plugin_too_old(f, False)}", "upgrade",
                      name)
    if shutil.which("mem") is None:
        warned = True
        yield Finding(check, WARNING, f"{f.label}: the mem plugin runs `mem` from PATH, and "
                      "there is no `mem` on this PATH: install mem on it (pipx install "
                      f"memvault), or disable the plugin (claude plugin disable {plug.id}) "
                      "and run mem setup", None, name)
    if off:
        warned = True
        yield Finding(check, WARNING, f"{f.label}: {off}", None, name)
    if not warned:
        yield Finding(check, OK, f"{f.label}: set up by the mem plugin ({plug.id}, in "
                      f"{plug.folder}): hooks {', '.join(plug.hooks)}; MCP server")


def _twice(have: Wired, plug: Plugin, commands: bool) -> str:
    """mem set up twice in Claude Code: by its plugin, and by setup's own entries."""
    own = [f"hooks in {have.settings}"] if have.hooks else []
    own += [f"an MCP server in {have.mcp}"] if have.mcp is not None else []
    undo = " (mem setup --undo --agent claude-code)" if commands else ""
    return (f"mem is set up twice: by the mem plugin ({plug.id}) and by mem setup "
            f"({' and '.join(own)}), so each session gets two briefs, two ingests and two "
            f"MCP servers; keep one: take setup's out{undo}, or disable the plugin "
            f"(claude plugin disable {plug.id})")


def _plugin_too_old(f: Found, advice: bool) -> str:
    upgrade = f": upgrade ({f.spec.upgrade})" if advice else ""
    return (f"the mem plugin's hooks are in exec form, which {f.spec.label} runs from "
            f"{agents_found.shown(agents_found.CLAUDE_EXEC_FORM)} only{upgrade}")


def _problems(f: Found, have: Wired) -> Iterator[tuple[str, str | None]]:
    spec = f.spec
    module = spec.integration()
    missing = [e for e in module.EVENTS if e not in have.hooks]
    if missing:
        yield f"no hook of mem's for {', '.join(missing)} in {have.settings}", "setup"
    if have.mcp is None:
        yield "no MCP server of mem's", "setup"
    need = _needs(f)
    if have.hooks and spec is CLAUDE and have.exec_form and not need.exec_form:
        yield (f"mem's hooks are in exec form, which runs from "
               f"{agents_found.shown(agents_found.CLAUDE_EXEC_FORM)} only"), "setup"
    if spec is CODEX:
        config = module.config_path("user")
        feature = module.hooks_feature(module.read_config(config), (module.FLAG,))
        if need.codex_flag and feature is None:
            yield f"its hooks are off: {config} lacks [features] codex_hooks = true", "setup"
        if not need.codex_flag and f.version is not None and module.flag_is_ours(config):
            yield f"[features] codex_hooks in {config} is no longer needed", "setup"
    if not need.runs_hooks and need.note:
        yield need.note, "upgrade" if need.upgrade else None
    program = have.argv[0] if have.argv else None
    runs = "mem's hooks run" if have.hooks else "mem's MCP server runs"
    if program and os.path.isabs(program) and not os.path.exists(program):
        yield f"{runs} {program}, which is not there any more", "setup"
    other = _other_identity(have.argv)
    if other:
        serve = "mem's hooks serve" if have.hooks else "mem's MCP server serves"
        yield f"{serve} {other}, not what mem resolves here", "setup"


def _other_identity(argv: tuple[str, ...]) -> str | None:
    """The vault, org or user the hooks name where this mem resolves another (the hooks
    would brief and keep someone else's memory)."""
    from memvault.integrations.launch import resolve

    try:
        wanted = resolve("user").flags
    except MemError:
        return None
    for prefix in ("--vault=", "--org=", "--user="):
        have = next((a for a in argv if a.startswith(prefix)), None)
        want = next((a for a in wanted if a.startswith(prefix)), None)
        if have and want and have != want:
            return f"{prefix[2:-1]} {have[len(prefix):]}"
    return None


def hook_log(probe: Probe) -> Iterator[Finding]:
    """The hooks' (and the MCP server's) failures that are still failing: each agent's
    last failure in the past week, unless a later run went well."""
    if probe.settings is None:
        return
    path = probe.settings.log_dir / hookbase.LOG_FILE
    runs = hookbase.read_log(probe.settings.log_dir)
    if not runs:
        yield Finding("hook-log", OK, f"hook log: no hook has run yet ({path})")
        return
    failing = hookbase.open_failures(runs, probe.now - LOG_WINDOW)
    if not failing:
        yield Finding("hook-log", OK, f"hook log: nothing failing ({path})")
        return
    for run in failing[:LOG_SHOWN]:
        when = run.at.strftime("%Y-%m-%d %H:%M") if run.at else "?"
        yield Finding("hook-log", WARNING, f"hook log, {when}: {run.agent} {run.event}: "
                      f"{run.outcome}", None, str(path))


CHECKS: tuple[Check, ...] = (agents, hook_log)
