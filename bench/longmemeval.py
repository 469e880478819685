"""Loading LongMemEval-S (../shared/bench-data/longmemeval_dev.json): each question is its
own memory, a haystack of dated chat sessions between the user and an assistant."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from common import BENCH_DATA

DATA = BENCH_DATA / "longmemeval_dev.json"
TYPES = ("single-session-user", "single-session-assistant", "single-session-preference",
         "multi-session", "knowledge-update", "temporal-reasoning")


@dataclass
class Turn:
    turn_id: str  # "<session index>:<turn index>", the message id mem is given
    session: int
    role: str
    text: str
    created_at: str
    gold: bool


@dataclass
class Question:
    question_id: str
    kind: str
    text: str
    asked_at: datetime
    turns: list[Turn]
    gold_turns: set[str]
    gold_sessions: set[int]


def _time(text: str) -> datetime:
    """"2023/05/20 (Sat) 02:21" as a UTC time."""
    day, _, clock = text.partition(" (")
    return datetime.strptime(f"{day} {clock.split(') ')[1]}", "%Y/%m/%d %H:%M").replace(
        tzinfo=UTC)


def data_hash() -> str:
    return hashlib.sha256(DATA.read_bytes()).hexdigest()[:12]


def load() -> list[Question]:
    questions = []
    for item in json.loads(DATA.read_text()):
        answer_sessions = set(item["answer_session_ids"])
        turns, gold_sessions = [], set()
        for s, (sid, date, session) in enumerate(zip(item["haystack_session_ids"],
                                                     item["haystack_dates"],
                                                     item["haystack_sessions"],
                                                     strict=True)):
            if sid in answer_sessions:
                gold_sessions.add(s)
            start = _time(date)
            for i, turn in enumerate(session):
                stamp = (start + timedelta(seconds=i)).isoformat().replace("+00:00", "Z")
                turns.append(Turn(f"{s}:{i}", s, turn["role"], turn["content"], stamp,
                                  bool(turn.get("has_answer"))))
        questions.append(Question(item["question_id"], item["question_type"],
                                  item["question"], _time(item["question_date"]), turns,
                                  {t.turn_id for t in turns if t.gold}, gold_sessions))
    return questions
