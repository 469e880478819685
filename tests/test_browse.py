"""`mem browse`: the viewer driven headless by Textual's own harness (App.run_test and its
pilot) at 80x24, against a real vault, and in a real terminal (tmux) where there is one.

What a user relies on: typing a query lists what `mem search` finds; forgetting from the
viewer leaves the vault as `mem forget` leaves it; a correction is a new record that
supersedes the old; --read-only changes nothing; nothing stored reaches the screen raw.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("textual")

from textual.widgets import DataTable, Static  # noqa: E402

from memvault.cli.viewer import Line, Viewer  # noqa: E402
from memvault.config import resolve  # noqa: E402
from memvault.embed.builtin import load  # noqa: E402
from memvault.ops import embed, recall, remember  # noqa: E402
from memvault.ops.admin import init  # noqa: E402
from memvault.vault.vault import Vault  # noqa: E402
from tests.conftest import mem  # noqa: E402

SCREENS = Path(__file__).parent / "fixtures" / "browse"


def drive(vault: Vault, script: Callable[[Viewer, Any], Awaitable[None]], **kwargs: Any
          ) -> Viewer:
    """Run the viewer headless at 80x24 and `script` against it with the pilot."""
    app = Viewer(vault, **kwargs)

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await script(app, pilot)

    asyncio.run(main())
    return app


def listed(app: Viewer) -> list[str]:
    table = app.query_one("#results", DataTable)
    return [str(row.value) for row in table.rows]


def text_of(app: Viewer, selector: str) -> str:
    if selector == "#status-line":
        return str(app.query_one(selector, Line).text)
    return str(app.query_one(selector, Static).content)


def planted(vault: Vault) -> dict[str, str]:
    ids = {}
    for name, text, kind in (
            ("tea", "Prefers green tea in the afternoon", "preference"),
            ("editor", "Favourite editor is helix", "fact"),
            ("deploy", "Deploys go to the staging cluster first", "fact"),
            ("paris", "Lives in Paris near the canal", "fact")):
        ids[name] = remember.add(vault, text, kind).record.memory_id
    return ids


def test_typing_a_query_lists_what_search_finds(vault: Vault) -> None:
    ids = planted(vault)

    async def script(app: Viewer, pilot: Any) -> None:
        assert set(listed(app)) == set(ids.values())  # empty query: the most recent
        await pilot.press(*"tea")
        await pilot.pause()
        assert listed(app) == [ids["tea"]]
        await pilot.pause(0.3)  # the pane is drawn once the typing rests
        assert "Prefers green tea" in text_of(app, "#detail")
        for _ in range(3):
            await pilot.press("backspace")
        await pilot.press(*"staging")
        await pilot.pause()
        assert listed(app) == [ids["deploy"]]

    drive(vault, script)
    # The same ranking as `mem search`: what the CLI's operation returns for the query.
    assert [h.memory_id for h in recall.search(vault, "staging", _filters()).results] == \
        [ids["deploy"]]


def _filters() -> Any:
    from memvault.model.records import Filters

    return Filters(limit=10)


def test_filters_narrow_as_mem_search_does(vault: Vault) -> None:
    ids = planted(vault)

    async def script(app: Viewer, pilot: Any) -> None:
        await pilot.press("tab", *"type:preference")  # the filters box
        await pilot.pause()
        assert listed(app) == [ids["tea"]]
        await pilot.press(*" tag:nope")
        await pilot.pause()
        assert listed(app) == []
        app.query_one("#filters").value = "colour:red"  # type: ignore[attr-defined]
        await pilot.pause()
        assert "unknown filter 'colour'" in text_of(app, "#status-line")

    drive(vault, script)


def _state(vault: Vault) -> dict[str, Any]:
    """What a forget must leave the same: the records (by content), what search finds,
    the index's documents, and the audit's last entry (its operation and counts)."""
    from memvault.model.records import Filters

    records = sorted(r.content for r in vault.store.records())
    found = sorted(h.content for h in recall.search(vault, "tea", Filters(limit=50)).results)
    index = vault.ready_index()
    from memvault.ops.admin import audit_log

    log = audit_log(vault)
    assert log.chain_ok
    last = [e for e in log.entries if e["op"] == "forget"][-1]
    state = vault.state()
    store = vault.vector_store(state.key_version)
    return {"records": records, "found": found, "docs": index.live_count(),
            "vectors": store.count(), "vector ids": len(store.has()),
            "audit": (last["op"], len(last.get("ids", [])), last.get("files")),
            "erased": len(vault.state().erased)}


def test_forget_from_the_viewer_leaves_what_mem_forget_leaves(
        tmp_path: Path, script_runner: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    states = []
    for how in ("cli", "viewer"):
        monkeypatch.setenv("MEM_VAULT", str(tmp_path / how))
        init(resolve())
        v = Vault(resolve())
        ids = planted(v)
        remember.add(v, "Tea tastings on Fridays", "context")
        embed.embed_pending(v, load())  # the forgotten record's vector goes with it
        if how == "cli":
            done = mem(script_runner, "forget", ids["tea"], "--yes")
            assert done.returncode == 0, done.stderr
        else:
            async def script(app: Viewer, pilot: Any, target: str = ids["tea"]) -> None:
                await pilot.press(*"green")
                await pilot.pause()
                assert listed(app)[0] == target  # ranked first, as mem search ranks it
                await pilot.press("enter", "d")
                await pilot.pause()
                shown = str(app.screen.query_one("#confirm-text", Static).content)
                assert target in shown and "Prefers green tea" in shown  # what goes
                await pilot.press("y")
                await pilot.pause()
                assert target not in listed(app)

            drive(v, script)
        states.append(_state(Vault(resolve())))
    assert states[0] == states[1]
    assert states[0]["vectors"] == len(states[0]["records"]) == 4
    assert "Prefers green tea in the afternoon" not in states[0]["records"]


def test_forget_asks_and_no_leaves_everything(vault: Vault) -> None:
    ids = planted(vault)

    async def script(app: Viewer, pilot: Any) -> None:
        await pilot.press(*"helix", "enter", "d")
        await pilot.pause()
        await pilot.press("n")
        await pilot.pause()
        assert listed(app) == [ids["editor"]]

    drive(vault, script)
    assert vault.fetch([ids["editor"]])


def test_correct_stores_a_record_that_supersedes(vault: Vault) -> None:
    ids = planted(vault)

    async def script(app: Viewer, pilot: Any) -> None:
        await pilot.press(*"helix", "enter", "c")
        await pilot.pause()
        box = app.screen.query_one("#ask")
        box.value = "Favourite editor is neovim"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()

    drive(vault, script)
    from memvault.model.records import Filters

    current = recall.list_records(vault, Filters(limit=50)).records
    new = [r for r in current if r.content == "Favourite editor is neovim"]
    assert len(new) == 1 and new[0].supersedes == ids["editor"] and new[0].type == "fact"
    assert ids["editor"] not in {r.memory_id for r in current}
    assert vault.state().superseded_by(ids["editor"]) == new[0].memory_id


def test_read_only_changes_nothing(vault: Vault) -> None:
    ids = planted(vault)
    before = sorted(r.memory_id for r in vault.store.records())

    async def script(app: Viewer, pilot: Any) -> None:
        await pilot.press(*"helix", "enter", "d")
        await pilot.pause()
        assert "read-only" in text_of(app, "#status-line")
        await pilot.press("c", "t", "a", "z")
        await pilot.pause()
        assert not isinstance(app.screen, type(app.screen).__mro__[0]) or \
            app.screen is app.screen_stack[0]  # no dialog was opened

    drive(vault, script, read_only=True)
    assert sorted(r.memory_id for r in vault.store.records()) == before
    assert ids["editor"] in before and not vault.state().frozen


def test_nothing_stored_reaches_the_screen_raw(vault: Vault) -> None:
    # Stored before admission cleaned input (or imported): written straight to the doc.
    record = remember.add(vault, "Evil note placeholder", "fact").record
    with vault.transaction() as tx:
        doc = tx.store.read_doc("CLAUDE.md")
        assert doc is not None
        doc["records"][0]["content"] = "Evil \x1b]52;c;cGF3bmVk\x07 note \u202eplaceholder"
        tx.write_doc("CLAUDE.md", doc)

    async def script(app: Viewer, pilot: Any) -> None:
        await pilot.pause(0.3)
        detail = text_of(app, "#detail")
        assert "\x1b" not in detail and "\u202e" not in detail
        assert "\\x1b" in detail and "\\u202e" in detail
        screen = app.export_screenshot()
        assert "\x1b" not in screen and "\u202e" not in screen

    drive(vault, script)
    assert record.memory_id


def test_review_screen_keeps_and_merges(vault: Vault) -> None:
    a = remember.add(vault, "The build uses make", "fact").record.memory_id
    b = remember.add(vault, "the build uses make.", "context").record.memory_id

    async def script(app: Viewer, pilot: Any) -> None:
        await pilot.press("enter", "3")  # from the search box to the list, then a screen
        await pilot.pause()
        table = app.query_one("#findings", DataTable)
        assert table.row_count == 1
        await pilot.press("m")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert app.query_one("#findings", DataTable).row_count == 0

    drive(vault, script)
    state = vault.state()
    assert {state.superseded_by(a), state.superseded_by(b)} == {None, b} or \
        {state.superseded_by(a), state.superseded_by(b)} == {None, a}


def test_brief_status_and_timeline_screens(vault: Vault) -> None:
    planted(vault)
    from memvault.ops.ingest import ingest_text

    ingest_text(vault, "\n".join(json.dumps(m) for m in (
        {"role": "user", "content": "Where did we leave the parser?",
         "timestamp": "2026-03-02T10:00:00Z"},
        {"role": "assistant", "content": "At the tokeniser's error paths.",
         "timestamp": "2026-03-02T10:01:00Z"})), "chat-1", "jsonl")

    async def script(app: Viewer, pilot: Any) -> None:
        await pilot.press("enter", "4")
        await pilot.pause()
        brief = text_of(app, "#brief-text")
        assert "tokens" in brief and "Prefers green tea" in brief
        await pilot.press("5")
        await pilot.pause()
        status = text_of(app, "#status-text")
        assert "records" in status and "stored per week" in status
        await pilot.press("2")
        await pilot.pause()
        assert [str(r.value) for r in app.query_one("#sessions", DataTable).rows] == \
            ["chat-1"]
        await pilot.press("enter")
        await pilot.pause()
        talk = text_of(app, "#conversation")
        assert talk.index("Where did we leave") < talk.index("At the tokeniser")

    drive(vault, script)


@pytest.mark.parametrize("no_color", [True, False])
def test_no_color_is_honoured(vault: Vault, monkeypatch: pytest.MonkeyPatch,
                              no_color: bool) -> None:
    if not no_color:
        monkeypatch.delenv("NO_COLOR")

    async def script(app: Viewer, pilot: Any) -> None:
        assert app.no_color is no_color

    drive(vault, script)


def test_screenshots(vault: Vault) -> None:
    """The main screens as pictures (SVG), kept in tests/fixtures/browse/ and shown in
    docs/guide.md; `make screenshots` writes them again (BROWSE_SCREENSHOTS=1)."""
    planted(vault)
    remember.add(vault, "favourite editor is kakoune", "fact")
    bench = Path(__file__).resolve().parents[2] / "shared" / "bench-data" / "transcripts"
    for path in (bench / "claude-code" / "short.jsonl",
                 bench / "codex" / "rollout-vibe-codex-0.39.jsonl"):
        if path.is_file():  # real sessions on the timeline, read in place
            from memvault.ops.ingest import ingest_file

            ingest_file(vault, path)
    shots: dict[str, str] = {}

    async def script(app: Viewer, pilot: Any) -> None:
        await pilot.press(*"editor")
        await pilot.pause(0.5)  # the pane, once the typing rests
        shots["search"] = app.export_screenshot(title="mem browse: search")
        await pilot.press("enter")
        for key, name in (("2", "timeline"), ("3", "review"), ("4", "brief"),
                          ("5", "status")):
            await pilot.press(key)
            await pilot.pause()
            shots[name] = app.export_screenshot(title=f"mem browse: {name}")

    drive(vault, script)
    for name, svg in shots.items():
        assert svg.startswith("<svg")
        if os.environ.get("BROWSE_SCREENSHOTS"):
            SCREENS.mkdir(parents=True, exist_ok=True)
            (SCREENS / f"{name}.svg").write_text(svg)


def test_browse_without_a_terminal_says_so(vault: Vault, script_runner: Any) -> None:
    remember.add(vault, "something", "fact")
    done = mem(script_runner, "browse")
    assert done.returncode == 2
    assert "needs a terminal" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.script_launch_mode("subprocess")
def test_browse_without_textual_says_how_to_install(vault: Vault, script_runner: Any,
                                                    tmp_path: Path) -> None:
    # A module named textual that cannot be found: find_spec answers None for it.
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Gone:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'textual' or name.startswith('textual.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, _Gone())\n")
    done = mem(script_runner, "browse", PYTHONPATH=str(hide))
    assert done.returncode == 78, done.stderr
    assert "pip install 'memvault[browse]'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_an_unexpected_failure_shows_no_memory(vault: Vault,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Textual reports a crash with a traceback and its local variables (decrypted
    records among them): the viewer hands the failure to mem's boundary instead."""
    planted(vault)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    async def script(app: Viewer, pilot: Any) -> None:
        monkeypatch.setattr(recall, "search", broken)
        await pilot.press(*"tea")
        await pilot.pause()

    app = Viewer(vault)

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await script(app, pilot)

    with pytest.raises(RuntimeError, match="boom"):
        asyncio.run(main())
    assert isinstance(app.failure, RuntimeError) and app._exit_renderables == []


TMUX = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed "
                          "(Debian/Ubuntu: sudo apt-get install tmux)")


@TMUX
def test_a_failure_in_a_real_terminal_is_one_line(vault: Vault, tmp_path: Path) -> None:
    planted(vault)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import memvault.ops.recall as r\n"
        "def broken(*a, **k):\n"
        "    secret = 'Prefers green tea in the afternoon'\n"
        "    raise RuntimeError(secret[:0] + 'boom')\n"
        "r.search = broken\n")
    socket = str(tmp_path / "tmux.sock")
    tmux = ["tmux", "-S", socket]
    env = {**os.environ, "TERM": "xterm-256color", "PYTHONPATH": str(hook)}
    mem_bin = str(Path(sys.executable).parent / "mem")
    subprocess.run([*tmux, "new-session", "-d", "-x", "80", "-y", "24"], env=env, check=True)
    try:
        subprocess.run([*tmux, "set-option", "-g", "remain-on-exit", "on"], env=env,
                       check=True)
        subprocess.run([*tmux, "respawn-pane", "-k", mem_bin, "browse"], env=env, check=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            dead = subprocess.run([*tmux, "display", "-p", "#{pane_dead}"], env=env,
                                  capture_output=True, text=True).stdout.strip()
            if dead == "1":
                break
            time.sleep(0.2)
        else:
            raise AssertionError("mem browse did not end")
        seen = subprocess.run([*tmux, "capture-pane", "-p", "-S", "-100"], env=env,
                              check=True, capture_output=True, text=True).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], env=env, capture_output=True)
    lines = [line for line in seen.splitlines() if line.strip()]
    assert "mem: error: unexpected RuntimeError; run again with MEM_DEBUG=1 for the " \
        "traceback" in "".join(lines), seen
    assert "Traceback" not in seen and "green tea" not in seen and "secret" not in seen


@TMUX
def test_in_a_real_terminal(vault: Vault, tmp_path: Path) -> None:
    """tmux runs `mem browse` at 80x24; keys are sent; the captured pane shows results."""
    planted(vault)
    socket = str(tmp_path / "tmux.sock")
    mem_bin = str(Path(sys.executable).parent / "mem")
    env = {**os.environ, "TERM": "xterm-256color"}
    tmux = ["tmux", "-S", socket]
    subprocess.run([*tmux, "new-session", "-d", "-x", "80", "-y", "24", mem_bin, "browse"],
                   env=env, check=True)
    try:
        def pane() -> str:
            return subprocess.run([*tmux, "capture-pane", "-p"], env=env, check=True,
                                  capture_output=True, text=True).stdout

        def wait_for(text: str) -> str:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                seen = pane()
                if text in seen:
                    return seen
                time.sleep(0.2)
            raise AssertionError(f"{text!r} never shown:\n{pane()}")

        wait_for("1 Search")
        subprocess.run([*tmux, "send-keys", "-l", "canal"], env=env, check=True)
        seen = wait_for("1 shown")
        assert "Lives in Paris" in seen
        assert len(seen.splitlines()) <= 24 and max(map(len, seen.splitlines())) <= 80
        subprocess.run([*tmux, "send-keys", "C-q"], env=env, check=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            alive = subprocess.run([*tmux, "has-session"], env=env, capture_output=True)
            if alive.returncode != 0:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("mem browse did not exit on Ctrl+Q")
    finally:
        subprocess.run([*tmux, "kill-server"], env=env, capture_output=True)
    assert json.loads(json.dumps({"ok": True}))


def test_the_list_pages_in_more_at_its_end(vault: Vault) -> None:
    """A page at a time (a keystroke costs one page), the next when the cursor reaches
    the end of the list, until every result is there."""
    from memvault.cli.viewer import PAGE
    from memvault.ops.ingest import ingest_text

    count = PAGE + PAGE // 2
    ingest_text(vault, "\n".join(json.dumps({"role": "user", "content": f"note number {i}"})
                                 for i in range(count)), "many", "jsonl")

    async def script(app: Viewer, pilot: Any) -> None:
        table = app.query_one("#results", DataTable)
        assert table.row_count == PAGE
        await pilot.press("enter")
        table.move_cursor(row=PAGE - 1)
        await pilot.pause()
        assert table.row_count == count and len(set(listed(app))) == count
        assert f"{count} shown" in text_of(app, "#status-line")

    drive(vault, script)


def test_change_type_and_retag(vault: Vault) -> None:
    ids = planted(vault)

    async def script(app: Viewer, pilot: Any) -> None:
        await pilot.press(*"canal", "enter", "T")
        await pilot.pause()
        app.screen.query_one("#ask").value = "context"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        await pilot.press("t")
        await pilot.pause()
        app.screen.query_one("#ask").value = "home city"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()

    drive(vault, script)
    from memvault.model.records import Filters

    current = [r for r in recall.list_records(vault, Filters(limit=50)).records
               if "Paris" in r.content]
    assert len(current) == 1
    (now,) = current
    assert now.type == "context" and now.supersedes == ids["paris"]
    assert sorted(now.tags) == ["city", "home"]
    assert vault.state().superseded_by(ids["paris"]) == now.memory_id


def test_an_action_takes_the_record_under_the_cursor_at_once(vault: Vault) -> None:
    """The pane waits for the typing to rest; what an action acts on does not."""
    ids = planted(vault)

    async def script(app: Viewer, pilot: Any) -> None:
        await pilot.press(*"helix")
        await pilot.press("enter", "d")  # before the pane is drawn
        await pilot.pause()
        shown = str(app.screen.query_one("#confirm-text", Static).content)
        assert ids["editor"] in shown and ids["tea"] not in shown
        await pilot.press("n")
        await pilot.pause()

    drive(vault, script)
