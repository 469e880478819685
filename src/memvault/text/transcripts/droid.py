"""Factory Droid: ~/.factory/sessions/<id>.jsonl (in a folder per working directory in
later releases), a `session_start` line (its id, title, cwd), then `message` entries
linked by id/parentId, each holding a message in Anthropic's shape: the user's text
(with <system-reminder> blocks, the harness's), the assistant's text, thinking and
tool_use blocks, and tool_result blocks in the user's turn. Read as Pi's sessions are:
the branch that leads to the last entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memvault.text.transcripts.base import Format, Transcript, home_place
from memvault.text.transcripts.pi import read_tree


def sniff_line(obj: dict[str, Any]) -> bool:
    return obj.get("type") == "session_start" and "id" in obj


def places(home: Path, env: Mapping[str, str]) -> list[Path]:
    return [home_place(home, env, None, ".factory", "sessions")]


def parse(text: str) -> Transcript:
    return read_tree(text, "droid", "session_start")


FORMAT = Format("droid", "Factory Droid", places, parse=parse, sniff_line=sniff_line)
