"""Loading LoCoMo (../shared/bench-data/locomo_dev.json) into turns and questions."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from common import BENCH_DATA

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


@dataclass
class Turn:
    dia_id: str
    session: str
    speaker: str
    text: str
    created_at: str


@dataclass
class Question:
    text: str
    category: int
    evidence: set[str]


@dataclass
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]


def normalise_dia_id(raw: str) -> str | None:
    """"D1:3", "D:11:26" and "D30:05" all name a turn as D<session>:<n>."""
    m = re.fullmatch(r"\s*D:?(\d+):0*(\d+)\s*", raw)
    return f"D{int(m.group(1))}:{int(m.group(2))}" if m else None


def _session_time(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def load() -> list[Conversation]:
    data = json.loads((BENCH_DATA / "locomo_dev.json").read_text())
    conversations = []
    for item in data:
        conv = item["conversation"]
        turns = []
        n = 1
        while f"session_{n}" in conv:
            start = _session_time(conv[f"session_{n}_date_time"])
            for i, turn in enumerate(conv[f"session_{n}"]):
                stamp = (start + timedelta(seconds=i)).isoformat().replace("+00:00", "Z")
                turns.append(Turn(normalise_dia_id(turn["dia_id"]) or turn["dia_id"],
                                  f"session-{n}", turn["speaker"], turn["text"], stamp))
            n += 1
        questions = []
        for qa in item["qa"]:
            if qa["category"] not in CATEGORIES:
                continue
            evidence = {e for raw in qa["evidence"] for part in raw.split(";")
                        if (e := normalise_dia_id(part))}
            if evidence:
                questions.append(Question(qa["question"], qa["category"], evidence))
        conversations.append(Conversation(item["sample_id"], turns, questions))
    return conversations
