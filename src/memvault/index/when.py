"""Time phrases in a query ("yesterday", "last week", "two months ago", "last Tuesday"),
resolved against the moment the question is asked into windows of creation times.

Search treats a window as a signal, not a filter: records created in it rank higher.
The phrase's words are still searched for (a record may say "last week" too). A thing
is told on the day it happens or after it, so every window reaches a little past its
end. Calendar words (weeks start on Monday) are read in the time zone of the moment.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
            "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11,
            "twelve": 12, "a couple of": 2, "couple of": 2, "a few": 3, "few": 3}
_UNITS = {"day": 1, "week": 7, "month": 30, "year": 365}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")

_COUNT = r"(\d{1,3}|a couple of|couple of|a few|few|an?|one|two|three|four|five|six|seven" \
         r"|eight|nine|ten|eleven|twelve)"
_AGO = re.compile(rf"\b{_COUNT}\s+(day|week|month|year)s?\s+ago\b", re.IGNORECASE)
_LAST = re.compile(r"\b(?:last|past|previous)\s+(week|month|year|weekend|"
                   + "|".join(_WEEKDAYS) + r")\b", re.IGNORECASE)
# "This weekend" and "tonight" are mostly plans ("what to cook this weekend"), not when
# something was told: left as words.
_THIS = re.compile(r"\bthis\s+(week|month|year)\b", re.IGNORECASE)
_DAY = re.compile(r"\b(the day before yesterday|yesterday|today|this morning|"
                  r"this afternoon|this evening)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime  # exclusive


def resolve(text: str, now: datetime) -> list[Window]:
    """The windows a query's time phrases name, in the order they come."""
    windows: list[Window] = []
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    day = timedelta(days=1)

    def ago(m: re.Match[str]) -> None:
        count = _count(m.group(1))
        unit = _UNITS[m.group(2).lower()]
        at = midnight - timedelta(days=count * unit)
        # "two months ago" is rarely to the day: the slack grows with the unit.
        slack = timedelta(days=max(1, unit // 2))
        windows.append(Window(at - slack, at + day + slack))

    def last(m: re.Match[str]) -> None:
        what = m.group(1).lower()
        monday = midnight - timedelta(days=midnight.weekday())
        if what == "week":
            windows.append(Window(monday - 7 * day, monday + 2 * day))
        elif what == "weekend":  # the one before this week's (which may be under way)
            windows.append(Window(monday - 2 * day, monday + day))
        elif what == "month":
            first = midnight.replace(day=1)
            previous = (first - day).replace(day=1)
            windows.append(Window(previous, first + 2 * day))
        elif what == "year":
            first = midnight.replace(month=1, day=1)
            windows.append(Window(first.replace(year=first.year - 1), first + 7 * day))
        else:
            back = (midnight.weekday() - _WEEKDAYS.index(what)) % 7 or 7
            at = midnight - back * day
            windows.append(Window(at, at + 2 * day))

    def this(m: re.Match[str]) -> None:
        what = m.group(1).lower()
        if what == "week":
            start = midnight - timedelta(days=midnight.weekday())
        elif what == "month":
            start = midnight.replace(day=1)
        else:
            start = midnight.replace(month=1, day=1)
        windows.append(Window(start, now + day))

    def named_day(m: re.Match[str]) -> None:
        what = m.group(1).lower()
        back = 2 if what.startswith("the day before") else 1 if what == "yesterday" else 0
        at = midnight - back * day
        windows.append(Window(at, at + 2 * day))

    for pattern, found in ((_AGO, ago), (_LAST, last), (_THIS, this), (_DAY, named_day)):
        for match in pattern.finditer(text):
            with contextlib.suppress(OverflowError, ValueError):  # before year 1
                found(match)
    return [w for w in windows if _in_range(w)]


def _in_range(window: Window) -> bool:
    """Whether a window's ends have timestamps: a window at the edge of the calendar
    (yesterday, as of 0001-01-01 at +14:00) falls outside what UTC holds, and is left
    out."""
    try:
        window.start.timestamp()
        window.end.timestamp()
    except (OverflowError, ValueError):
        return False
    return True


def _count(word: str) -> int:
    word = " ".join(word.lower().split())
    return int(word) if word.isdigit() else _NUMBERS[word]
