"""``digestbot demo``: the whole product on embedded defaults, in one command.

A fresh SQLite file in ``var/``, a real SMTP server (aiosmtpd) on 127.0.0.1
that writes what it accepts to ``var/inbox/*.eml`` plus an ``index.html``,
``seeds/`` replayed one day at a time (day 1 = dump 000 ...), and the example
subscribers, one of them with a library (``DEMO_LIBRARY``), so that their digest is
ranked by their own model.  The bot talks to the sink over TCP: the production
code path.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import partial
from pathlib import Path

from bot.choose.tagging import TagRules
from bot.config import Settings, site_url
from bot.delivery.loop import deliver_now
from bot.domain import DigestKind
from bot.ingest.storing import ingest_file
from bot.ingest.watcher import expand
from bot.mail.parts import Parts
from bot.plan import plan
from bot.store.digests import list_digests
from bot.store.engine import make_engine, sessions, upgrade
from bot.store.store_files import database_files
from bot.store.subscribers import get_subscriber, list_subscribers
from bot.subscribers.csv_io import import_csv
from bot.taste.library_service import import_library
from bot.tools.inbox_index import write_index
from bot.tools.sink import Sink, SinkHandler

FIRST_DAY = date(2026, 6, 14)  # the date the seed dumps carry
# Ada's filter is `*`: her library of two spiking-network papers orders her digest.
DEMO_LIBRARY = ("ada@example.org", "config/library.example.bib")
DEMO_HOUR_UTC = 12


@dataclass(frozen=True, slots=True)
class DemoRow:
    day: int
    dump: str
    subscriber: str
    entries: int
    status: str


def _fixed(moment: datetime) -> datetime:
    """The demo's clock: one moment per replayed day."""
    return moment


def run_demo(
    settings: Settings, rules: TagRules, *, subscribers_csv: Path, libraries: dict[str, bytes] | None = None
) -> tuple[list[DemoRow], Path]:
    """*libraries*: a reference manager's export per subscriber address, imported
    before day 1 (their digests are then ranked by their own model)."""
    var = settings.paths.var_dir
    inbox = var / "inbox"
    database = var / "demo.sqlite3"
    shutil.rmtree(inbox, ignore_errors=True)
    for leftover in database_files(database):
        leftover.unlink(missing_ok=True)
    engine = make_engine(f"sqlite:///{database}")
    upgrade(engine)
    factory = sessions(engine)
    start = datetime.combine(FIRST_DAY, time(DEMO_HOUR_UTC), tzinfo=UTC)
    report = import_csv(factory, settings, subscribers_csv.read_text(encoding="utf-8"), start - timedelta(days=1))
    if report.errors:
        raise ValueError(f"{subscribers_csv}:{report.errors[0].line}: {report.errors[0].reason}")
    for email, export in (libraries or {}).items():
        with factory() as session:
            reader = get_subscriber(session, email)
        if reader is not None:
            most = settings.subscribers.library_max_papers
            import_library(factory, reader.id, export, start - timedelta(days=1), most=most)
    rows: list[DemoRow] = []
    handler = SinkHandler(inbox=inbox)
    with Sink(handler) as sink:
        demo_settings = settings.model_copy(
            update={
                "smtp": settings.smtp.model_copy(
                    update={"host": "127.0.0.1", "port": sink.port, "tls": "none", "username": ""}
                ),
                # The links a reader uses (More like this, manage, the web version) need an
                # address: `digestbot serve`'s own on this machine (``demo_serve_line``).
                "web": settings.web.model_copy(update={"public_url": site_url(settings.web)}),
            }
        )
        loaded = Parts(demo_settings, rules=rules)
        for day, dump in enumerate(expand([settings.paths.dump_dir]), start=1):
            now = start + timedelta(days=day - 1)
            ingest_file(factory, dump, now=now, rules=rules)
            plan(factory, demo_settings, rules, now=now, all_due=True)
            asyncio.run(deliver_now(factory, loaded, clock=partial(_fixed, now)))
            with factory() as session:
                digests = {
                    d.subscriber_id: d for d in list_digests(session, local_date=now.date(), kind=DigestKind.SCHEDULED)
                }
                for subscriber in list_subscribers(session):
                    digest = digests.get(subscriber.id)
                    if digest is None:
                        rows.append(DemoRow(day, dump.name, subscriber.email, 0, subscriber.status.value))
                    else:
                        rows.append(DemoRow(day, dump.name, subscriber.email, digest.entry_count, digest.state.value))
    engine.dispose()
    if any(inbox.glob("*.eml")):
        write_index(inbox)
    return rows, inbox


def demo_serve_line(settings: Settings) -> str:
    """How to make the demo's links answer: ``serve`` on the demo's store."""
    store = settings.paths.var_dir / "demo.sqlite3"
    return (
        f"the links in these mails (More like this, manage, web version) answer at {site_url(settings.web)} "
        f"while this runs: DIGESTBOT_DATABASE__URL=sqlite:///{store} digestbot serve"
    )
