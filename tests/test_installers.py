"""The installers touch mem's own entries and nothing else: every other tool's hooks (also
those that mention mem, wrap it, or share a matcher group with it) survive install,
reinstall and uninstall; config.toml keeps what its user wrote."""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memvault.integrations import claude_code, codex, gemini
from memvault.integrations.launch import resolve as resolve_launch
from tests.conftest import examples

MODULES = {"claude-code": claude_code, "codex": codex, "gemini": gemini}
OTHER_EVENTS = ("Stop", "BeforeTool", "UserPromptSubmit")


def mem_entries(agent: str) -> dict[str, dict[str, Any]]:
    """What the user-scope install writes for each event."""
    launch = resolve_launch("user")
    module = MODULES[agent]
    if agent == "claude-code":
        return dict.fromkeys(module.EVENTS, claude_code.hook_entry(launch))
    if agent == "codex":
        return {e: codex.hook_entry(launch, e) for e in codex.EVENTS}
    return dict.fromkeys(module.EVENTS, gemini.hook_entry(launch))


def old_mem_entries(agent: str) -> list[dict[str, Any]]:
    """Entries an earlier mem wrote, elsewhere on the machine: mem's, to be replaced."""
    return [{"type": "command", "command": f"/old/place/mem hook {agent}", "timeout": 10},
            {"type": "command", "command": f"'/opt/my tools/mem' hook {agent}"},
            {"type": "command", "command": "/old/place/mem", "args": ["hook", agent]}]


def foreign_commands(agent: str) -> st.SearchStrategy[dict[str, Any]]:
    """Other tools' handlers, many of which name mem, wrap it or look like it."""
    other = "codex" if agent != "codex" else "gemini"
    lines = [
        f"mycheck && mem hook {agent}", f"mem hook {agent} && notify-send done",
        f"echo 'mem hook {agent}'", f"/usr/bin/mem hook {agent} | tee -a /tmp/hook.log",
        f"mem hook {agent} --vault=$(cat ~/.vault)", f"bash -c 'mem hook {agent}'",
        f"mem hook {other}", f"mem hooks install {agent}", f"MEM_USER=eve mem hook {agent}",
        f"mem hook {agent} --extra", f"memcheck hook {agent}", f"mem  hook {agent}",
        f'"mem" hook {agent}', f"mem hook {agent};", "notify-send done", "backup.sh",
    ]
    shell = st.one_of(
        st.sampled_from(lines),
        st.builds(lambda a, b: f"{a} mem hook {agent} {b}".strip(),
                  st.sampled_from(["nice", "time", "exec", "timeout 5"]),
                  st.sampled_from(["", "2>/dev/null", "|| true", "&", "# mine"])))
    handler = st.builds(
        lambda command, timeout, name: {"type": "command", "command": command,
                                        **({"timeout": timeout} if timeout else {}),
                                        **({"name": name} if name else {})},
        shell, st.sampled_from([None, 5, 30]), st.sampled_from([None, "audit", "mem"]))
    exec_form = st.sampled_from([
        {"type": "command", "command": "bash", "args": ["-c", f"mem hook {agent}"]},
        {"type": "command", "command": "mem", "args": ["hook", agent, "--extra"]},
        {"type": "command", "command": "mycheck", "args": ["mem", "hook", agent]},
    ])
    return st.one_of(handler, exec_form) if agent == "claude-code" else handler


@st.composite
def settings_files(draw: Any, agent: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A settings document with other tools' hooks (and some of mem's older entries
    among them, in their groups); returns it and the mem entries it holds."""
    module = MODULES[agent]
    events = draw(st.lists(st.sampled_from((*module.EVENTS, *OTHER_EVENTS)), unique=True,
                           max_size=4))
    hooks: dict[str, Any] = {}
    for event in events:
        groups = []
        for _ in range(draw(st.integers(1, 3))):
            group: dict[str, Any] = {"hooks": draw(st.lists(foreign_commands(agent),
                                                            min_size=1, max_size=3))}
            if draw(st.booleans()):
                group = {"matcher": draw(st.sampled_from(["startup", "manual", "*"])),
                         **group}
            groups.append(group)
        hooks[event] = groups
    olds = []
    for event in draw(st.lists(st.sampled_from(events), max_size=2)) if events else []:
        old = draw(st.sampled_from(old_mem_entries(agent)))
        group = draw(st.sampled_from(hooks[event]))
        group["hooks"].insert(draw(st.integers(0, len(group["hooks"]))), old)
        olds.append(old)
    doc: dict[str, Any] = {"hooks": hooks} if hooks or draw(st.booleans()) else {}
    if agent == "codex":
        if draw(st.booleans()):
            doc = {"description": "team hooks", **doc}
    elif draw(st.booleans()):
        doc = {"model": "opus", **doc, "env": {"FOO": "bar"}}
    return doc, olds


def without(doc: dict[str, Any], mem: list[dict[str, Any]]) -> dict[str, Any]:
    """The oracle: `doc` without the given handlers, a group, an event or `hooks` going
    only when taking them out emptied it."""
    out = copy.deepcopy(doc)
    hooks = out.get("hooks")
    if not isinstance(hooks, dict):
        return out
    touched_any = False
    for event in list(hooks):
        kept, touched = [], False
        for group in hooks[event]:
            handlers = [h for h in group["hooks"] if h not in mem]
            if len(handlers) != len(group["hooks"]):
                touched = True
                if not handlers:
                    continue
            kept.append({**group, "hooks": handlers})
        if touched:
            touched_any = True
            if kept:
                hooks[event] = kept
            else:
                del hooks[event]
    if touched_any and not hooks or hooks == {}:
        del out["hooks"]  # an empty `hooks` and none mean the same to every agent
    return out


def check_agent(agent: str, doc: dict[str, Any], olds: list[dict[str, Any]], where: Path
                ) -> None:
    module = MODULES[agent]
    new = list(mem_entries(agent).values())
    mem = new + olds
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        path = Path(tmp) / "settings.json"
        original = json.dumps(doc, indent=4).encode()
        path.write_bytes(original)
        if not olds:  # nothing of mem's: uninstall changes nothing, not even the bytes
            assert not module.uninstall(path, "user").changed
            assert path.read_bytes() == original

        assert module.install(path, "user").changed
        installed = json.loads(path.read_text())
        assert without(installed, mem) == without(doc, mem)  # every other hook as it was
        for event, entry in mem_entries(agent).items():  # one entry of mem's per event
            found = [h for g in installed["hooks"][event] for h in g["hooks"] if h in mem]
            assert found == [entry]
        installed_bytes = path.read_bytes()
        assert not module.install(path, "user").changed  # reinstall: not a byte moves
        assert path.read_bytes() == installed_bytes

        assert module.uninstall(path, "user").changed
        assert without(json.loads(path.read_text()), []) == without(doc, mem)
        after = path.read_bytes()
        assert not module.uninstall(path, "user").changed
        assert path.read_bytes() == after


@pytest.mark.parametrize("agent", sorted(MODULES))
def test_installers_touch_only_mems_own_hooks(agent: str, tmp_path: Path) -> None:
    @settings(max_examples=examples(30), suppress_health_check=[HealthCheck.too_slow])
    @given(settings_files(agent))
    def run(case: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
        check_agent(agent, *case, tmp_path)

    run()


@pytest.mark.parametrize("agent", sorted(MODULES))
def test_a_file_of_other_tools_hooks_only_is_left_alone(agent: str, tmp_path: Path) -> None:
    """The reported case: three other tools' hooks that mention mem's words."""
    path = tmp_path / "settings.json"
    doc = {"hooks": {"SessionStart": [
        {"matcher": "startup", "hooks": [
            {"type": "command", "command": f"mycheck && mem hook {agent}"},
            {"type": "command", "command": f"echo mem hook {agent} started"},
            {"type": "command", "command": f"mem hook {agent} | tee /tmp/x"}]}]},
        "permissions": {"allow": []}}
    text = json.dumps(doc)
    path.write_text(text)
    assert not MODULES[agent].uninstall(path, "user").changed
    assert path.read_text() == text
    assert MODULES[agent].install(path, "user").changed
    installed = json.loads(path.read_text())
    assert installed["hooks"]["SessionStart"][0] == doc["hooks"]["SessionStart"][0]
    assert MODULES[agent].uninstall(path, "user").changed
    assert json.loads(path.read_text()) == doc
