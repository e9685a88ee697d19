"""Test parts, the built-in sink's inbox: each message kept as ``NNNN.eml``, its HTML part
beside it as ``NNNN.html``, and an ``index.html`` listing the newest, newest first.  Each
message is read once, when it arrives (issue 76: the index was made again from every
message at each one).  Runs in the sink and the demo, never in production."""

from __future__ import annotations

import email
import html
from collections import deque
from email.policy import default as default_policy
from pathlib import Path

from bot.files import write_whole

_INDEX_STYLE = (
    "body{font:16px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:46rem;"
    "padding:1rem;color:#1f2328;background:#fff}h1{font-size:1.4rem;margin:.2rem 0 1rem}"
    "ol{list-style:none;padding:0;margin:0}li{border-top:1px solid #d0d7de;padding:.7rem 0}"
    "a{color:#0a58ca}.subject{font-weight:600;overflow-wrap:anywhere}"
    ".meta{color:#57606a;font-size:.9rem;overflow-wrap:anywhere}"
    "@media (prefers-color-scheme:dark){body{color:#e6edf3;background:#0d1117}li{border-color:#30363d}"
    "a{color:#58a6ff}.meta{color:#9da7b3}}"
)


def last_number(inbox: Path) -> int:
    """The highest ``NNNN.eml`` number already in *inbox* (0: none)."""
    numbers = [int(p.stem) for p in inbox.glob("*.eml") if p.stem.isdigit()]
    return max(numbers, default=0)


INDEX_NEWEST = 500  # messages the index lists, newest first; the folder keeps every one


class InboxIndex:
    """``index.html`` of an inbox folder: every .eml's subject (linked to its HTML part,
    saved next to it), recipient, date and a link to the .eml itself, newest first, the
    newest ``INDEX_NEWEST`` of them.  A page for a phone as much as a desk.  Each message
    is read once, when it arrives (or, for those already there, when the index is made):
    a message's cost does not grow with the folder."""

    def __init__(self, inbox: Path) -> None:
        self.inbox = inbox
        paths = sorted(inbox.glob("*.eml")) if inbox.is_dir() else []
        self.count = len(paths)
        self.items: deque[str] = deque(maxlen=INDEX_NEWEST)
        for path in paths[-INDEX_NEWEST:]:
            self.items.appendleft(_index_item(path, path.read_bytes()))

    def add(self, path: Path, data: bytes) -> Path:
        self.count += 1
        self.items.appendleft(_index_item(path, data))
        return self.write()

    def write(self) -> Path:
        count = f"{self.count} message" + ("" if self.count == 1 else "s")
        if self.count > len(self.items):
            count += f" (the newest {len(self.items)} listed)"
        index = self.inbox / "index.html"
        page = (
            '<!DOCTYPE html><html lang="en"><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            '<meta name="color-scheme" content="light dark"><title>digestbot inbox</title>'
            f"<style>{_INDEX_STYLE}</style>"
            f"<h1>digestbot inbox</h1><p class=meta>{count}</p><ol>{''.join(self.items)}</ol></html>\n"
        )
        write_whole(index, page.encode("utf-8"))
        return index


def _index_item(path: Path, data: bytes) -> str:
    """One message's line of the index; its HTML part saved beside it.  A message the
    email package cannot read (an unknown charset, a broken part) is listed by its name."""
    try:
        return _read_item(path, data)
    except Exception:  # noqa: BLE001 - this message's failure, never the inbox's
        name = html.escape(path.name)
        link = f'<a href="{name}" download>{name}</a>'
        return f'<li><div class="subject">(unreadable)</div><div class="meta">{link}</div></li>'


def _read_item(path: Path, data: bytes) -> str:
    msg = email.message_from_bytes(data, policy=default_policy)
    html_part = msg.get_body(preferencelist=("html",))
    view = path.with_suffix(".html")
    if html_part is not None:
        write_whole(view, html_part.get_content().encode("utf-8"))
    subject = html.escape(str(msg["Subject"] or "(no subject)"))
    title = f'<a href="{html.escape(view.name)}">{subject}</a>' if html_part is not None else subject
    return (
        f'<li><div class="subject">{title}</div><div class="meta">to {html.escape(str(msg["To"]))}'
        f" · {html.escape(str(msg['Date']))} · "
        f'<a href="{html.escape(path.name)}" download>{html.escape(path.name)}</a></div></li>'
    )


def write_index(inbox: Path) -> Path:
    """``index.html`` of *inbox* as it is now (``InboxIndex``)."""
    return InboxIndex(inbox).write()
