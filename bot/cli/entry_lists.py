"""CLI: entries with their relevance and taste, as ``preview`` and ``tags test`` list
them.  Prints what it is given; never decides anything."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.cli.output import out, print_json_lines
from bot.cli.tables import Column, fitted

if TYPE_CHECKING:
    from bot.taste.explain import Scored


def print_candidates(found: list[Scored], title: str, as_json: bool) -> None:
    """Entries with their relevance, and their model's taste score when there is one."""
    rows = [(f.candidate, f.score, f.why) for f in found]
    with_model = any(taste is not None for _, taste, _ in rows)
    if as_json:
        print_json_lines(
            [
                {
                    "key": f.entry.key,
                    "title": f.entry.content.title,
                    "score": f.explanation.score,
                    **({"taste": round(taste, 4) if taste is not None else None} if with_model else {}),
                    "why": why,
                    "hits": [{"atom": h.atom, "where": h.where} for h in f.explanation.hits],
                    "tags": f.entry.tags,
                    "first_seen_at": f.entry.first_seen_at,
                }
                for f, taste, why in rows
            ]
        )
        return
    score = [Column("score", whole=True, justify="right")]
    columns = [*score, *([Column("taste", whole=True)] if with_model else []), Column("key", whole=True, drop=1)]
    columns += [Column("title", wants=30), Column("why", wants=16)]  # the key goes before the title folds
    shown = [
        [
            str(f.explanation.score),
            *([f"{taste:+.2f}" if taste is not None else ""] if with_model else []),
            f.entry.key,
            f.entry.content.title,
            why,
        ]
        for f, taste, why in rows
    ]
    out.print(fitted(columns, shown, width=out.width, title=title))
