"""How records and results look to people (the JSON shapes come from the core).

Stored text is shown as it is, never acted on: every string from the vault goes through
for_terminal (a control character left in it is shown as `\\x1b`, never sent to the
terminal) and is printed as a rich Text, so that `[bold]` or `:smile:` in a memory is
text too, never Rich markup or an emoji code. Output.table and Output.line do the same.
"""

from __future__ import annotations

from typing import Any

from memvault.cli.output import Output
from memvault.text.sanitize import for_terminal


def _one_line(text: str, width: int = 80) -> str:
    flat = " ".join(for_terminal(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _card(out: Output, head: list[str], body: str) -> None:
    """One record as a header line (id first, whole, for copying) and its indented text:
    readable at any terminal width, unlike a table with a 36-character id column."""
    from rich.text import Text

    line = Text()
    line.append(for_terminal(head[0]), style="bold cyan")
    for part in head[1:]:
        if part:
            line.append("  " + for_terminal(part), style="dim" if part.startswith("[") else "")
    out.out.print(line, soft_wrap=True)
    out.out.print(Text("    " + for_terminal(body)), soft_wrap=False, overflow="fold")


def records_table(out: Output, records: list[dict[str, Any]]) -> None:
    if not records:
        out.info("no records match")
        return
    if not out.terminal:  # one record a line, its whole text: for grep, cut, less
        out.table(["id", "type", "created", "tags", "content"],
                  [[r["memory_id"], r["type"], _created(r), ",".join(r["tags"]) or "-",
                    r["content"]] for r in records], header=False)
        return
    for r in records:
        tags = f"[{', '.join(r['tags'])}]" if r["tags"] else ""
        _card(out, [r["memory_id"], r["type"], _created(r), tags],
              _one_line(r["content"], 400))


def _created(record: dict[str, Any]) -> str:
    return str(record["created_at"])[:16].replace("T", " ")


def record_detail(out: Output, record: dict[str, Any]) -> None:
    from rich.text import Text

    rows = [[k, _shown(v)] for k, v in record.items()
            if k != "content" and v not in (None, [], "")]
    out.table(["field", "value"], rows)
    out.out.print(Text(for_terminal(record["content"])))


def _shown(value: Any) -> Any:
    """A value for people: yes or no, a list or mapping on one line, "-" for none."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "-"
    return "-" if value is None else value


def mapping(out: Output, doc: dict[str, Any], title: str | None = None) -> None:
    out.table(["", ""], [[k, _shown(v)] for k, v in doc.items()], title=title)


def search_results(out: Output, results: list[dict[str, Any]]) -> None:
    """The hits, best first; a weak one (under the relevance floor, listed by --all) has
    "weak" after its score."""
    if not out.terminal:  # one hit a line
        out.table(["id", "type", "created", "score", "snippet"],
                  [[r["memory_id"], r["type"], r["created_at"][:10],
                    (f"{r['score']:.2f}" if r["score"] else "-")
                    + (" weak" if r.get("weak") else ""), r["snippet"]]
                   for r in results], header=False)
        return
    for r in results:
        score = f"score {r['score']:.2f}" if r["score"] else ""
        where = f"session {r['session_id']}" if r.get("session_id") else ""
        _card(out, [r["memory_id"], r["type"], r["created_at"][:10], where, score,
                    "[weak]" if r.get("weak") else ""], r["snippet"])
