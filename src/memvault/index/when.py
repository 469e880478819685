"""Time phrases in a query ("yesterday", "last week", "two months ago", "last Tuesday"),
resolved against the moment the question is asked into windows of creation times.

Search treats a window as a signal, not a filter: records created in it rank higher.
The phrase's words are still searched for (a record may say "last week" too). A thing
is told on the day it happens or after it, so every window reaches a little past its
end. Calendar words (weeks start on Monday) are read in the time zone of the moment.

The same phrases name the times a date argument gives (`--after "last week"`), exactly,
without that slack: `window` and `instant`.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from memvault.errors import UsageError
from memvault.model.records import parse_time

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
# The parts of today a phrase names exactly (hours from midnight; a search takes the day).
_PARTS = {"this morning": (0, 12), "this afternoon": (12, 18), "this evening": (18, 24)}
_BARE_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DAY = re.compile(r"\b(the day before yesterday|yesterday|today|this morning|"
                  r"this afternoon|this evening)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime  # exclusive


@dataclass(frozen=True)
class _Named:
    """The time a phrase names, exactly, and the window a search favours for it."""

    exact: Window
    searched: Window


def resolve(text: str, now: datetime) -> list[Window]:
    """The windows a query's time phrases name, in the order they come, each with the
    slack a search gives it."""
    return [n.searched for n in _named(text, now, whole=False) if _in_range(n.searched)]


def window(text: str, now: datetime) -> Window | None:
    """The time a phrase names when it is the whole text ("yesterday", "last week",
    "3 days ago", "two months ago", "last Tuesday", "this month"), exactly: from the
    first instant of that time to the first instant after it. None when the text is no
    such phrase; OverflowError when the time falls outside the calendar (yesterday, as
    of 0001-01-01)."""
    try:
        found = _named(" ".join(text.split()), now, whole=True)
    except ValueError:  # a date before year 1 or after 9999
        raise OverflowError("outside the calendar") from None
    if not found:
        return None
    exact = found[0].exact
    if not _in_range(exact):
        raise OverflowError("outside the calendar")
    return exact


# What a date flag's usage error offers instead.
EXAMPLES = ("2026-05-01, 2026-05-01T14:30, yesterday, last week, 3 days ago, "
            "two months ago")


def instant(value: str, now: datetime, *, end: bool, field: str) -> datetime:
    """The moment a date argument names: an ISO-8601 date or time, or a time phrase
    counted from `now`. A phrase, or a bare date, names a span of time: its first
    instant, or with `end` its last (an ISO time names itself). UsageError, naming the
    `field`, for anything else."""
    try:
        named = window(value, now)
    except OverflowError:
        raise UsageError(f"{field} {value!r} falls outside the calendar (years 1 to 9999)",
                         field=field) from None
    if named is not None:
        return named.end - timedelta(microseconds=1) if end else named.start
    try:
        moment = parse_time(value)
    except UsageError as exc:
        if exc.details.get("out_of_range"):
            raise UsageError(f"{field} {exc.message}", field=field) from None
        raise UsageError(f"{field} {value!r} is not a date or time: give one such as "
                         f"{EXAMPLES}", field=field) from None
    if end and _BARE_DATE.fullmatch(value.strip()):
        try:
            last = moment + timedelta(days=1, microseconds=-1)
            last.astimezone(UTC)
        except OverflowError:  # the calendar's last day: its last instant is the last
            return moment.replace(hour=23, minute=59, second=59, microsecond=999999)
        return last
    return moment


# A phrase's exact window, and how much earlier and later a search's window reaches.
Reach = tuple[Window, timedelta, timedelta]
ZERO = timedelta(0)


def _named(text: str, now: datetime, whole: bool) -> list[_Named]:
    """The times the phrases of `text` name; `whole`: only a phrase that is all of it."""
    named: list[_Named] = []
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    day = timedelta(days=1)

    def ago(m: re.Match[str]) -> Reach:
        count = _count(m.group(1))
        unit = _UNITS[m.group(2).lower()]
        at = midnight - timedelta(days=count * unit)
        # "two months ago" is rarely to the day: the slack grows with the unit.
        slack = timedelta(days=max(1, unit // 2))
        return Window(at, at + day), slack, slack

    def last(m: re.Match[str]) -> Reach:
        what = m.group(1).lower()
        monday = midnight - timedelta(days=midnight.weekday())
        if what == "week":
            return Window(monday - 7 * day, monday), ZERO, 2 * day
        if what == "weekend":  # the one before this week's (which may be under way)
            return Window(monday - 2 * day, monday), ZERO, day
        if what == "month":
            first = midnight.replace(day=1)
            return Window((first - day).replace(day=1), first), ZERO, 2 * day
        if what == "year":
            first = midnight.replace(month=1, day=1)
            return Window(first.replace(year=first.year - 1), first), ZERO, 7 * day
        back = (midnight.weekday() - _WEEKDAYS.index(what)) % 7 or 7
        at = midnight - back * day
        return Window(at, at + day), ZERO, day

    def this(m: re.Match[str]) -> Reach:
        what = m.group(1).lower()
        if what == "week":
            start = midnight - timedelta(days=midnight.weekday())
        else:
            start = midnight.replace(day=1) if what == "month" else \
                midnight.replace(month=1, day=1)
        try:
            following = start + 7 * day if what == "week" else \
                (start + 32 * day).replace(day=1) if what == "month" else \
                start.replace(year=start.year + 1)
        except (OverflowError, ValueError):  # the calendar's last: it ends where time does
            following = datetime.max.replace(tzinfo=now.tzinfo)
        # A search reaches a day past the moment asked, not to the end of the week.
        return Window(start, following), ZERO, now + day - following

    def named_day(m: re.Match[str]) -> Reach:
        what = m.group(1).lower()
        back = 2 if what.startswith("the day before") else 1 if what == "yesterday" else 0
        at = midnight - back * day
        part = _PARTS.get(what)
        if part is None:
            return Window(at, at + day), ZERO, day
        # A search favours the whole day (and the next): when a thing was told.
        hours = (timedelta(hours=part[0]), timedelta(hours=part[1]))
        return Window(at + hours[0], at + hours[1]), hours[0], 2 * day - hours[1]

    for pattern, found in ((_AGO, ago), (_LAST, last), (_THIS, this), (_DAY, named_day)):
        if whole:
            match = pattern.fullmatch(text)
            if match is not None:  # outside the calendar: OverflowError, ValueError
                exact = found(match)[0]
                return [_Named(exact, exact)]
            continue
        for match in pattern.finditer(text):
            with contextlib.suppress(OverflowError, ValueError):  # before year 1
                exact, before, after = found(match)
                named.append(_Named(exact, Window(exact.start - before, exact.end + after)))
    return named


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
