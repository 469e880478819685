"""How records and results look to people (the JSON shapes come from the core)."""

from __future__ import annotations

from typing import Any

from mem.output import Output


def _one_line(text: str, width: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def records_table(out: Output, records: list[dict[str, Any]]) -> None:
    if not records:
        out.info("no records match")
        return
    out.table(
        ["id", "type", "created", "tags", "content"],
        [[r["memory_id"], r["type"], r["created_at"][:19].replace("T", " "),
          ",".join(r["tags"]), _one_line(r["content"])] for r in records],
    )


def record_detail(out: Output, record: dict[str, Any]) -> None:
    rows = [[k, v if not isinstance(v, list) else ", ".join(map(str, v))]
            for k, v in record.items() if k != "content" and v not in (None, [], "")]
    out.table(["field", "value"], rows)
    out.out.print(record["content"], markup=False, highlight=False)


def mapping(out: Output, doc: dict[str, Any], title: str | None = None) -> None:
    out.table(["", ""], [[k, v] for k, v in doc.items()], title=title)


def search_results(out: Output, results: list[dict[str, Any]]) -> None:
    if not results:
        out.info("no matches")
        return
    out.table(
        ["score", "id", "type", "created", "snippet"],
        [[f"{r['score']:.2f}" if r["score"] else "", r["memory_id"], r["type"],
          r["created_at"][:10], r["snippet"]] for r in results],
    )
