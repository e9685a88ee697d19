"""CLI: mail that came back (``bounces fetch``) and how one returned message reads, as
JSON and as a line (``subscribers show`` lists a reader's).  A thin shell over
``bot.returns``; records nothing itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from bot.cli.output import EXIT_INPUT_FAILED, EXIT_USAGE, JsonObject, fail, jsonable, new_table, out
from bot.cli.shell import command_group, ctx_of
from bot.domain import ReturnEvent, ReturnKind
from bot.domain.text import plural

if TYPE_CHECKING:
    from rich.table import Table

_KIND_WORDS = {
    ReturnKind.HARD: "hard bounce",
    ReturnKind.SOFT: "soft bounce",
    ReturnKind.DELAYED: "delay notice",
    ReturnKind.COMPLAINT: "complaint",
    ReturnKind.UNSUBSCRIBE: "unsubscribe mail",
    ReturnKind.CLEARED: "bounce cleared",
}

bounces_app = command_group("Read bounces, complaints and unsubscribe mails from inbox.url.")


def return_json(event: ReturnEvent) -> JsonObject:
    return {
        "at": jsonable(event.at),
        "kind": event.kind.value,
        "address": event.address,
        "status": event.status,
        "diagnostic": event.diagnostic,
        "digest": event.digest_id,
    }


def return_line(event: ReturnEvent) -> str:
    """ "2026-11-24 08:00 UTC hard bounce 5.1.1 (digest #42): 550 5.1.1 User unknown"."""
    parts = [f"{event.at:%Y-%m-%d %H:%M} UTC", _KIND_WORDS.get(event.kind, event.kind.value)]
    if event.status:
        parts.append(event.status)
    if event.digest_id is not None:
        parts.append(f"(digest #{event.digest_id})")
    line = " ".join(parts)
    return f"{line}: {event.diagnostic}" if event.diagnostic else line


def returns_table(events: list[ReturnEvent]) -> Table:
    table = new_table("returned mail", title="Bounces and complaints read from the inbox")
    for event in events:
        table.add_row(return_line(event))
    return table


@bounces_app.command("fetch")
def bounces_fetch(ctx: typer.Context) -> None:
    """Read inbox.url once: record each bounce, complaint and unsubscribe mail, mark it
    seen, and leave everything else for a person (exit 1 when the mailbox fails)."""
    from bot.returns.inbox_reading import read_configured_inbox
    from bot.returns.mailboxes import MailboxError

    c = ctx_of(ctx)
    if not c.settings.inbox.url:
        fail("inbox.url is not set: nothing to read (docs/deliverability.md, 'Mail that comes back')", EXIT_USAGE)
    try:
        report = read_configured_inbox(c.sessions(), c.settings, c.link_key())
    except MailboxError as exc:
        fail(str(exc), EXIT_INPUT_FAILED)
    counts = ", ".join(plural(n, _KIND_WORDS[kind]) for kind, n in sorted(report.kinds.items()))
    out.print(
        f"read {plural(report.read, 'message')}: {counts or 'nothing recorded'}"
        f"; {report.left} left for a person; {report.repeated} read before",
        markup=False,
    )
    if report.unknown:
        out.print(f"{plural(report.unknown, 'message')} named no subscriber (recorded)", markup=False)
    for email, status in report.changed:
        out.print(f"{email}: now {status.value}", markup=False)
