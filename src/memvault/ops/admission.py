"""The one admission policy: what may reach the vault, and in what form.

Everything that stores text (add, pref set, ingest, import, and compaction's summaries)
passes through here first, before any lock is taken or any file touched:

- refuse: a critical secret (private key, bearer token, cloud or provider key) is never
  stored. A single item (add, pref, an import) is refused whole; a transcript message
  holding one is withheld, or the whole transcript is refused when `strict`.
- mask: personal data (emails, phone numbers, ...) becomes a typed placeholder such as
  <REDACTED:EMAIL>.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from memvault.config import Settings
from memvault.errors import ConfigError, Refused, UsageError
from memvault.model.records import NewMessage

if TYPE_CHECKING:
    from memvault.text.redact import RedactionConfig


@dataclass
class Screened:
    """Messages admitted from a transcript, with what was withheld and masked."""

    kept: list[NewMessage] = field(default_factory=list)
    withheld: int = 0
    counts: dict[str, int] = field(default_factory=dict)

    def add_counts(self, counts: dict[str, int]) -> None:
        for rule, n in counts.items():
            self.counts[rule] = self.counts.get(rule, 0) + n


def redaction_config(doc: dict[str, Any], where: str) -> RedactionConfig:
    """The config file's `redaction:` mapping as rules (ConfigError when malformed)."""
    from memvault.text.redact import RedactionConfig, rule_from_config

    unknown = sorted(set(doc) - {"disable", "rules", "phone_region"})
    if unknown:
        raise ConfigError(f"unknown redaction setting {unknown[0]!r} in {where}")
    disable = doc.get("disable") or []
    rules = doc.get("rules") or []
    if not isinstance(disable, list) or not isinstance(rules, list):
        raise ConfigError(f"redaction.disable and redaction.rules must be lists in {where}")
    return RedactionConfig(disabled=frozenset(map(str, disable)),
                           extra=tuple(rule_from_config(r) for r in rules),
                           phone_region=str(doc.get("phone_region") or "US"))


class AdmissionPolicy:
    def __init__(self, settings: Settings) -> None:
        self._doc = settings.redaction
        self._where = str(settings.config_path)
        self._config: RedactionConfig | None = None

    @property
    def config(self) -> RedactionConfig:
        if self._config is None:
            self._config = redaction_config(self._doc, self._where)
        return self._config

    def admit(self, text: str, what: str = "the text") -> str:
        """One item: refused (Refused, exit 77, nothing stored) when it holds a secret;
        otherwise returned with personal data masked."""
        from memvault.text.redact import scan

        result = scan(text, self.config)
        if not result.clean:
            rules = ", ".join(sorted(set(result.refused)))
            raise Refused(f"refused: {what} holds a secret ({rules}); nothing was stored")
        return result.text

    def admit_key(self, key: str) -> str:
        """A preference key is a name: it may hold neither a secret nor personal data."""
        if self.admit(key, "the preference key") != key:
            raise UsageError("a preference key must not hold personal data")
        return key

    def admit_all(self, texts: Sequence[str], what: str) -> list[str]:
        """Several items that stand or fall together (an import): any secret refuses all."""
        from memvault.text.redact import scan

        results = [scan(text, self.config) for text in texts]
        if not all(r.clean for r in results):
            raise Refused(f"{what} holds a secret; nothing was imported")
        return [r.text for r in results]

    def screen(self, messages: Sequence[NewMessage], strict: bool = False) -> Screened:
        """Transcript messages: each holding a secret is withheld (with `strict`, the
        whole transcript is refused); personal data is masked in the others."""
        from memvault.text.redact import scan

        out = Screened()
        for message in messages:
            result = scan(message.content, self.config)
            out.add_counts(result.counts)
            if not result.clean:
                if strict:
                    rules = ", ".join(sorted(set(result.refused)))
                    raise Refused(f"the transcript holds a secret ({rules}); strict mode "
                                  "refuses the whole session and nothing was stored",
                                  field="strict")
                out.withheld += 1
                continue
            out.kept.append(replace(message, content=result.text))
        return out
