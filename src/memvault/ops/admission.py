"""The one admission policy: what may reach the vault, and in what form.

Everything that stores text (add, pref set, ingest, import, and compaction's summaries)
passes through here first, before any lock is taken or any file touched:

- clean: terminal escape sequences and control characters (but newline and tab) are
  removed from the text first (text.sanitize.clean), in `_scan`, the one place every
  way in shares, so that redaction sees what will be stored and nothing stored can act on
  a terminal when printed. It is not a redaction: nothing is counted or reported. Names
  (tags, preference keys) are refused instead when they hold a control character: a name
  changed behind the user's back would no longer be found by the name they typed.
- refuse: a critical secret (private key, bearer token, cloud or provider key) is never
  stored. A single item (add, pref, an import) is refused whole; a transcript message
  holding one is withheld, or the whole transcript is refused when `strict`.
- mask: personal data (emails, phone numbers, ...) becomes a typed placeholder such as
  <REDACTED:EMAIL>, and so does the value of a credential written as an assignment.
- private: what the user wrapped in `<private>...</private>` (or a tag of
  `redaction.private_tags`) becomes <REDACTED:PRIVATE> first, before the scan for
  secrets, so nothing inside it is stored, counted as a secret, or refuses the rest
  (text/private.py). A text that was nothing but private spans is not stored at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memvault.config import Settings
from memvault.errors import ConfigError, DataError, MemError, Refused, UsageError
from memvault.model.records import NewMessage
from memvault.text.sanitize import clean, has_control

if TYPE_CHECKING:
    from memvault.text.redact import Redaction, RedactionConfig

PRIVATE_RULE = "private"  # how the redaction report counts hidden private spans


@dataclass
class Screened:
    """Messages admitted from a transcript, with what was withheld and masked."""

    kept: list[NewMessage] = field(default_factory=list)
    withheld: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    refusing: set[str] = field(default_factory=set)  # rules whose finding withholds

    def add_counts(self, counts: dict[str, int], refusing: Sequence[str] = ()) -> None:
        for rule, n in counts.items():
            self.counts[rule] = self.counts.get(rule, 0) + n
        self.refusing.update(refusing)


def redaction_config(doc: dict[str, Any], where: str) -> RedactionConfig:
    """The config file's `redaction:` mapping as rules (ConfigError when malformed)."""
    from memvault.text.redact import RedactionConfig, rule_from_config

    unknown = sorted(set(doc) - {"disable", "rules", "phone_region", "private_tags"})
    if unknown:
        raise ConfigError(f"unknown redaction setting {unknown[0]!r} in {where}")
    disable = doc.get("disable") or []
    rules = doc.get("rules") or []
    if not isinstance(disable, list) or not isinstance(rules, list):
        raise ConfigError(f"redaction.disable and redaction.rules must be lists in {where}")
    return RedactionConfig(disabled=frozenset(map(str, disable)),
                           extra=tuple(rule_from_config(r) for r in rules),
                           phone_region=str(doc.get("phone_region") or "US"),
                           private_tags=private_tags(doc.get("private_tags"), where))


def private_tags(raw: Any, where: str) -> tuple[str, ...]:
    """`private` and the config file's extra tag names (ConfigError when malformed): the
    built-in tag cannot be taken away, so a config file can only widen what is private."""
    from memvault.text.private import DEFAULT_TAGS, TAG_NAME_RE

    raw = raw or []
    if not isinstance(raw, list) or not all(
            isinstance(t, str) and TAG_NAME_RE.fullmatch(t) for t in raw):
        raise ConfigError(f"redaction.private_tags must be a list of tag names (a letter, "
                          f"then up to 31 letters, digits, '_' or '-') in {where}")
    return tuple(dict.fromkeys([*DEFAULT_TAGS, *(t.lower() for t in raw)]))


ScreenKey = tuple[str, str | None, tuple[str, ...]]


def screen_key(message: NewMessage) -> ScreenKey:
    """What a message's screening depends on: messages alike in these are screened once."""
    return message.content, message.name, tuple(message.tags)


class AdmissionPolicy:
    def __init__(self, settings: Settings) -> None:
        self._doc = settings.redaction
        self._where = str(settings.config_path)
        self._config: RedactionConfig | None = None

    def wire(self) -> tuple[dict[str, Any], str]:
        """What rebuilds this policy in another process: the `redaction:` mapping and
        where it came from (plain data)."""
        return self._doc, self._where

    @classmethod
    def rebuilt(cls, doc: dict[str, Any], where: str) -> AdmissionPolicy:
        """The policy `wire` describes."""
        policy = cls.__new__(cls)
        policy._doc, policy._where, policy._config = doc, where, None
        return policy

    @property
    def config(self) -> RedactionConfig:
        if self._config is None:
            self._config = redaction_config(self._doc, self._where)
        return self._config

    def _scan(self, text: str) -> Redaction:
        """The one way text is admitted: cleaned of terminal controls, copies of mem's own
        brief left out, its private spans hidden, then scanned for secrets and personal
        data (admit, admit_all and screen all come through here). Private spans go before
        the scan: a secret inside one is never stored, so it must not refuse (or withhold)
        what the user left outside it."""
        from memvault.text.frame import strip
        from memvault.text.private import hide
        from memvault.text.redact import lowered, scan

        # A copy of mem's own brief (an agent's record of its session start) is no one's
        # words: stored, it would multiply and keep forgotten memories alive.
        text = strip(clean(text))
        lower = lowered(text)  # once, for both (the cost of a large text's scan)
        hidden = hide(text, self.config.private_tags, lower)
        result = scan(hidden.text, self.config, None if hidden.count else lower)
        if hidden.count:
            result.counts = {**result.counts, PRIVATE_RULE: hidden.count}
            result.blank = hidden.blank
        return result

    def private(self, text: str) -> str:
        """`text` with its private spans hidden, nothing else changed (what compaction
        hands a summariser, in case a record was stored before its tags were hidden)."""
        from memvault.text.private import hide

        return hide(text, self.config.private_tags).text

    def admit(self, text: str, what: str = "the text") -> str:
        """One item: refused (Refused, exit 77, nothing stored) when it holds a secret;
        otherwise returned cleaned of terminal controls, with personal data masked."""
        result = self._scan(text)
        if not result.clean:
            rules = ", ".join(sorted(set(result.refused)))
            raise Refused(f"refused: {what} holds a secret ({rules}); nothing was stored")
        if result.blank:
            raise UsageError(f"nothing to store: all of {what} is marked private")
        return result.text

    def admit_key(self, key: str, error: type[MemError] = UsageError) -> str:
        """A preference key is a name: it may hold neither a control character, nor a
        secret, nor personal data."""
        admit_name(key, "preference key", error)
        if self.admit(key, "the preference key") != key:
            raise error("a preference key must not hold personal data")
        return key

    def admit_tags(self, tags: Sequence[str], error: type[MemError] = UsageError) -> None:
        """Tags are names: one holding a control character is refused (`error`: UsageError
        for what the user typed, DataError for what a file holds)."""
        for tag in tags:
            admit_name(tag, "tag", error)

    def admit_all(self, texts: Sequence[str], what: str) -> list[str]:
        """Several items that stand or fall together (an import): any secret refuses all."""
        results = [self._scan(text) for text in texts]
        if not all(r.clean for r in results):
            raise Refused(f"{what} holds a secret; nothing was imported")
        return [r.text for r in results]  # a record all private keeps its placeholder

    def screen(self, messages: Sequence[NewMessage], strict: bool = False) -> Screened:
        """Transcript messages, cleaned of terminal controls: each holding a secret is
        withheld (with `strict`, the whole transcript is refused); personal data is
        masked in the others. A message left empty by the cleaning (it was only escape
        sequences) is dropped, like an empty one; a tag holding a control character
        refuses the transcript (DataError), as a tag holding a space does."""
        out = Screened()
        for message in messages:
            self.admit_tags(message.tags, DataError)
            result = self._scan(message.content)
            out.add_counts(result.counts, result.refused)
            if not result.clean:
                if strict:
                    rules = ", ".join(sorted(set(result.refused)))
                    raise Refused(f"the transcript holds a secret ({rules}); strict mode "
                                  "refuses the whole session and nothing was stored",
                                  field="strict")
                out.withheld += 1
                continue
            if result.blank or not result.text.strip():
                continue  # nothing but private spans, or nothing at all: not stored
            name = clean(message.name) if message.name else message.name
            out.kept.append(message.evolve(content=result.text, name=name))
        return out


def admit_name(name: str, what: str, error: type[MemError] = UsageError) -> None:
    """A name (tag, preference key) holding a terminal control character is refused."""
    if has_control(name):
        raise error(f"invalid {what} {name!r}: it holds a control character")
