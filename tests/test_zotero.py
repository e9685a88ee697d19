"""A reader's Zotero library: connected with a key checked once and sealed, synced by
version against a server that speaks the Web API v3 (``tests/zotero_server.py``, run as
a process) honestly and in its hostile ways, and saved to from the digest, never twice."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.config.services import ZoteroConfig
from bot.ingest.storing import ingest_bytes
from bot.sealed import Sealer, sealer_of
from bot.store.engine import transaction
from bot.store.feedback import feedback_of
from bot.store.library import library_of
from bot.store.schema import Entry
from bot.store.subscribers import get_subscriber
from bot.store.zotero import connection_of, save_of
from bot.store.zotero_tables import ZoteroConnectionRow
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.unsubscribes import journal_of
from bot.zotero.api import ZoteroApi
from bot.zotero.api_shapes import (
    ZoteroAnswerError,
    read_items,
    read_key,
    read_versions,
    wait_asked,
)
from bot.zotero.connection import BROKEN, NEW, SAVED, SYNCED, ConnectError, connect, disconnect, shown
from bot.zotero.library_sync import sync_due, sync_one
from bot.zotero.saves import take_asks, write_saves
from tests.zotero_server import ZoteroServer, zotero_server

NOW = datetime(2026, 12, 7, 12, tzinfo=UTC)
SEARCH = "https://scholar.example/?q={title}"
DUMP = b"""<?xml version="1.0"?>
<rss version="2.0"><channel><title>t</title><link>https://example.org/</link><description>d</description>
<item><title>Sparse Attention Kernels for Long Contexts</title><link>https://arxiv.org/abs/2512.00001</link>
<author>Ada Lovelace</author><description>We make attention sparse on GPUs.</description></item>
<item><title>A Journal Paper on Tokenizers</title><link>https://doi.org/10.1000/tok.1</link>
<description>Tokenizers, measured.</description></item>
</channel></rss>
"""


@pytest.fixture(scope="module")
def server() -> Iterator[ZoteroServer]:
    with zotero_server() as running:
        yield running


@pytest.fixture
def fresh(server: ZoteroServer) -> ZoteroServer:
    server.control("calm")
    return server


def _config(server: ZoteroServer, **changes: object) -> ZoteroConfig:
    base = ZoteroConfig(base_url=server.url, answer_seconds=3, connect_seconds=2, longest_wait_seconds=2)
    return base.model_copy(update=changes)


_emails = (f"reader{n}@example.com" for n in range(1, 100_000))


def _reader(factory: sessionmaker[Session], email: str = "") -> int:
    email = email or next(_emails)
    save(factory, Settings(), [clean_fields(email)], NOW)
    with factory() as session:
        found = get_subscriber(session, email)
        assert found is not None
        return found.id


SEALER = Sealer(b"q4GzQhSqfGQJtGHC2g2sD0x8X6L6o4m5E4Qb7n8y0kM=")
_user_ids = iter(range(100, 10_000))


def _library(server: ZoteroServer, *, write: bool = True) -> tuple[str, str]:
    """A fresh user library on the server and its key."""
    user = next(_user_ids)
    return f"users/{user}", server.key(user, write=write)


def test_connect_checks_the_key_once_and_seals_it(factory: sessionmaker[Session], fresh: ZoteroServer) -> None:
    reader = _reader(factory)
    library, key = _library(fresh, write=False)
    with ZoteroApi(_config(fresh)) as api:
        connected = connect(factory, api, SEALER, reader, "user", key, NOW)
        assert (connected.library, connected.can, connected.state) == ("your library", "read only", NEW)
        with factory() as session:
            row = connection_of(session, reader)
            assert row is not None and key not in row.sealed_key and SEALER.open(row.sealed_key) == key
            assert row.library == library
        with pytest.raises(ConnectError, match="does not know that key"):
            connect(factory, api, SEALER, reader, "user", "A" * 24, NOW)
        with pytest.raises(ConnectError, match="not a Zotero API key"):
            connect(factory, api, SEALER, reader, "user", "key with spaces; DROP", NOW)
        with pytest.raises(ConnectError, match="may not read group 7"):
            connect(factory, api, SEALER, reader, "group:7", key, NOW)
    assert disconnect(factory, reader) and shown(factory, reader) is None


def test_a_group_the_key_may_write_to(factory: sessionmaker[Session], fresh: ZoteroServer) -> None:
    reader = _reader(factory)
    key = fresh.key(next(_user_ids), write=False, groups={"4242": True})
    with ZoteroApi(_config(fresh)) as api:
        connected = connect(factory, api, SEALER, reader, "group:4242", key, NOW)
    assert (connected.library, connected.can) == ("group 4242", "read and save to your library")


def _connected(factory: sessionmaker[Session], server: ZoteroServer, *, write: bool = True) -> tuple[int, str, str]:
    reader = _reader(factory)
    library, key = _library(server, write=write)
    with ZoteroApi(_config(server)) as api:
        connect(factory, api, SEALER, reader, "user", key, NOW)
    return reader, library, key


def _sync(factory: sessionmaker[Session], server: ZoteroServer, reader: int, **config: object):  # type: ignore[no-untyped-def]
    with ZoteroApi(_config(server, **config)) as api:
        return sync_one(factory, api, SEALER, reader, NOW, most=5000)


def _paper_keys(factory: sessionmaker[Session], reader: int) -> set[str]:
    with factory() as session:
        return {p.key for p in library_of(session, reader)}


def test_sync_by_version_adds_changes_and_removes(factory: sessionmaker[Session], fresh: ZoteroServer) -> None:
    reader, library, _ = _connected(factory, fresh)
    collection = fresh.control("collection", library=library, name="To read")["key"]
    made = fresh.control(
        "add",
        library=library,
        items=[
            {"title": "Sparse Attention Kernels", "url": "https://arxiv.org/abs/2512.00001v2", "itemType": "preprint"},
            {"title": "Tokenizers, measured", "DOI": "10.1000/TOK.1", "collections": [collection]},
            {"itemType": "note", "note": "<p>a note</p>"},
            {"itemType": "attachment", "title": "Full text PDF"},
            {"title": "", "DOI": "10.1000/untitled"},
            {"title": "<b>Bold</b> claims \u202eevil\u202c <a href='https://x'>link</a>", "DOI": "10.1000/markup"},
        ],
    )["keys"]
    first = _sync(factory, fresh, reader)
    assert (first.added, first.removed, first.problem) == (3, 0, None)
    assert _paper_keys(factory, reader) == {"arxiv:2512.00001", "doi:10.1000/tok.1", "doi:10.1000/markup"}
    with factory() as session:
        titles = {p.key: p.title for p in library_of(session, reader)}
        row = connection_of(session, reader)
        assert row is not None and row.state == SYNCED and row.known_collections == [[collection, "To read"]]
    assert "\u202e" not in titles["doi:10.1000/markup"]

    asked = fresh.requests()
    again = _sync(factory, fresh, reader)
    assert again.unchanged and fresh.requests() - asked == 1  # one request: a 304

    fresh.control("delete", library=library, keys=[made[0]])
    fresh.control("change", library=library, keys=[made[1]], fields={"deleted": 1})  # to the trash
    fresh.control("add", library=library, items=[{"title": "A third paper", "DOI": "10.1000/three"}])
    third = _sync(factory, fresh, reader)
    assert (third.added, third.removed) == (1, 2)
    assert _paper_keys(factory, reader) == {"doi:10.1000/three", "doi:10.1000/markup"}


def test_only_the_chosen_collections_count(factory: sessionmaker[Session], fresh: ZoteroServer) -> None:
    from bot.zotero.connection import choose_collections

    reader, library, _ = _connected(factory, fresh)
    chosen = fresh.control("collection", library=library, name="Mine")["key"]
    fresh.control(
        "add",
        library=library,
        items=[
            {"title": "In it", "DOI": "10.1000/in", "collections": [chosen]},
            {"title": "Out", "DOI": "10.1000/out"},
        ],
    )
    _sync(factory, fresh, reader)
    assert _paper_keys(factory, reader) == {"doi:10.1000/in", "doi:10.1000/out"}
    choose_collections(factory, reader, [chosen, "NOTAKEY1"], chosen)
    synced = _sync(factory, fresh, reader)  # from the start: what counts changed
    assert synced.removed == 1 and _paper_keys(factory, reader) == {"doi:10.1000/in"}


def test_an_uploaded_paper_stays_when_the_item_goes(factory: sessionmaker[Session], fresh: ZoteroServer) -> None:
    from bot.taste.library_service import import_library

    reader, library, _ = _connected(factory, fresh)
    import_library(factory, reader, b"10.1000/both\n", NOW)
    made = fresh.control("add", library=library, items=[{"title": "Both", "DOI": "10.1000/both"}])["keys"]
    _sync(factory, fresh, reader)
    fresh.control("delete", library=library, keys=made)
    assert _sync(factory, fresh, reader).removed == 0
    assert _paper_keys(factory, reader) == {"doi:10.1000/both"}


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("html", "not JSON"),
        ("big", "over the cap"),
        ("redirect", "a redirect, not followed"),
        ("hang", "no whole answer"),
        ("dribble", "no whole answer"),
    ],
)
def test_a_hostile_answer_is_that_pass_only(
    factory: sessionmaker[Session], fresh: ZoteroServer, mode: str, said: str
) -> None:
    reader, library, _ = _connected(factory, fresh)
    fresh.control("add", library=library, items=[{"title": "Kept", "DOI": "10.1000/kept"}])
    fresh.control("mode", name=mode, value=True)
    failed = _sync(factory, fresh, reader, max_answer_mb=1, answer_seconds=1.5)
    assert failed.problem is not None and said in failed.problem and failed.broken is None
    assert fresh.state()["keys_seen_elsewhere"] == 0
    fresh.control("calm")
    assert _sync(factory, fresh, reader).added == 1  # asked again next pass


def test_a_revoked_key_breaks_the_connection_until_reconnected(
    factory: sessionmaker[Session], fresh: ZoteroServer
) -> None:
    reader, library, key = _connected(factory, fresh)
    other, other_library, _ = _connected(factory, fresh)
    fresh.control("add", library=other_library, items=[{"title": "Other's", "DOI": "10.1000/other"}])
    fresh.control("revoke", key=key)
    with ZoteroApi(_config(fresh)) as api:
        results = {r.subscriber_id: r for r in sync_due(factory, api, SEALER, NOW, every=timedelta(hours=6), most=50)}
    assert results[reader].broken and results[other].added == 1  # one reader's failure is theirs
    asked = fresh.requests()
    with ZoteroApi(_config(fresh)) as api:
        assert sync_due(factory, api, SEALER, NOW + timedelta(days=1), every=timedelta(hours=6), most=50) == [
            replace(results[other], added=0, unchanged=True)
        ]
    assert fresh.requests() - asked == 1  # the broken one asks nothing
    assert (shown(factory, reader) or pytest.fail()).state == BROKEN


def test_403_midway_through_a_sync_breaks_it_cleanly(factory: sessionmaker[Session], fresh: ZoteroServer) -> None:
    reader, library, _ = _connected(factory, fresh)
    fresh.control("add", library=library, items=[{"title": f"Paper {n}", "DOI": f"10.1000/p{n}"} for n in range(120)])
    fresh.control("mode", name="forbid_after", value=3)
    assert _sync(factory, fresh, reader).broken
    assert _paper_keys(factory, reader) == set()  # nothing half-kept


def test_a_version_going_backwards_syncs_in_full_without_a_loop(
    factory: sessionmaker[Session], fresh: ZoteroServer
) -> None:
    reader, library, _ = _connected(factory, fresh)
    made = fresh.control("add", library=library, items=[{"title": "One", "DOI": "10.1000/one"}])["keys"]
    for n in range(4):
        fresh.control("change", library=library, keys=made, fields={"extra": f"edit {n}"})
    _sync(factory, fresh, reader)
    fresh.control("mode", name="backwards", value=True)
    fresh.control("add", library=library, items=[{"title": "Two", "DOI": "10.1000/two"}])
    went_back = _sync(factory, fresh, reader)
    assert went_back.problem and "went back" in went_back.problem
    full = _sync(factory, fresh, reader)  # from version 0: every item listed again
    assert full.problem is None and _paper_keys(factory, reader) == {"doi:10.1000/one", "doi:10.1000/two"}


def test_a_page_that_repeats_an_item_and_backoff(factory: sessionmaker[Session], fresh: ZoteroServer) -> None:
    reader, library, _ = _connected(factory, fresh)
    fresh.control("add", library=library, items=[{"title": f"P{n}", "DOI": f"10.1000/r{n}"} for n in range(60)])
    fresh.control("mode", name="repeat", value=True)
    fresh.control("mode", name="busy", value={"times": 1, "after": 1, "status": 429})
    waits: list[float] = []
    with ZoteroApi(_config(fresh), sleep=waits.append) as api:
        synced = sync_one(factory, api, SEALER, reader, NOW, most=5000)
    assert synced.added == 60 and waits and waits[0] == pytest.approx(1, abs=0.2)


def test_a_long_retry_after_ends_the_pass_for_every_reader(factory: sessionmaker[Session], fresh: ZoteroServer) -> None:
    readers = [_connected(factory, fresh)[0] for _ in range(3)]
    fresh.control("mode", name="busy", value={"times": 1, "after": 3600, "status": 503})
    asked = fresh.requests()
    with ZoteroApi(_config(fresh, in_flight=1)) as api:
        results = sync_due(factory, api, SEALER, NOW, every=timedelta(hours=6), most=50)
    assert {r.subscriber_id for r in results} == set(readers)
    assert all(r.skipped for r in results) and fresh.requests() - asked == 1


def test_at_most_four_requests_in_flight(factory: sessionmaker[Session], fresh: ZoteroServer) -> None:
    readers = [_connected(factory, fresh) for _ in range(10)]
    for _, library, _ in readers:
        fresh.control("add", library=library, items=[{"title": "One each", "DOI": "10.1000/each"}])
    with ZoteroApi(_config(fresh, in_flight=4)) as api:
        results = sync_due(factory, api, SEALER, NOW, every=timedelta(hours=6), most=50)
    assert all(r.added == 1 for r in results) and fresh.state()["most_in_flight"] <= 4


# -- saving ------------------------------------------------------------------------


def _entry(factory: sessionmaker[Session], title: str) -> int:
    with factory() as session:
        found = session.scalar(select(Entry.id).where(Entry.title == title))
    if found is None:
        ingest_bytes(factory, DUMP, name="zotero.txt", now=NOW)
        with factory() as session:
            found = session.scalar(select(Entry.id).where(Entry.title == title))
    assert found is not None
    return found


def test_a_save_is_journaled_made_once_and_counts_as_a_like(
    factory: sessionmaker[Session], fresh: ZoteroServer
) -> None:
    reader, library, _ = _connected(factory, fresh)
    entry = _entry(factory, "Sparse Attention Kernels for Long Contexts")
    journal = journal_of(factory)
    journal.append_saves([(reader, entry), (reader, entry)], NOW)  # a double click
    assert take_asks(journal, factory, NOW, SEARCH) == 2
    with factory() as session:
        assert [(r.entry_id, r.verdict) for r in feedback_of(session, reader)] == [(entry, "more")]
    assert "arxiv:2512.00001" in _paper_keys(factory, reader)
    fresh.control("mode", name="lose_writes", value=1)  # made, and its answer lost
    writes, refused = fresh.requests("writes"), fresh.requests("412")
    with ZoteroApi(_config(fresh)) as api:
        written = write_saves(factory, api, SEALER, NOW, SEARCH)
        assert written.saved == 1
        assert write_saves(factory, api, SEALER, NOW + timedelta(minutes=5), SEARCH) == type(written)()
    # Asked again with the same write token: Zotero answered 412, and made nothing more.
    assert (fresh.requests("writes") - writes, fresh.requests("412") - refused) == (2, 1)
    made = [i for i in fresh.items(library) if i.get("archiveID") == "arXiv:2512.00001"]
    assert len(made) == 1 and made[0]["itemType"] == "preprint" and made[0]["creators"][0]["lastName"] == "Lovelace"
    with factory() as session:
        assert (save_of(session, reader, entry) or pytest.fail()).state == SAVED


def test_a_retry_with_the_same_write_token_is_answered_412(factory: sessionmaker[Session], fresh: ZoteroServer) -> None:
    reader, library, key = _connected(factory, fresh)
    entry = _entry(factory, "A Journal Paper on Tokenizers")
    journal = journal_of(factory)
    journal.append_saves([(reader, entry)], NOW)
    take_asks(journal, factory, NOW, SEARCH)
    with factory() as session:
        token = (save_of(session, reader, entry) or pytest.fail()).write_token
    with ZoteroApi(_config(fresh)) as api:
        from bot.zotero.api import WriteTokenUsed

        api.create(library, key, {"itemType": "journalArticle", "title": "x"}, token)  # as if a lost first try
        with pytest.raises(WriteTokenUsed):
            api.create(library, key, {"itemType": "journalArticle", "title": "x"}, token)
        assert write_saves(factory, api, SEALER, NOW, SEARCH).saved == 1  # 412: it was made
    assert len(fresh.items(library)) == 1


def test_an_item_already_in_the_library_is_not_made_again(factory: sessionmaker[Session], fresh: ZoteroServer) -> None:
    reader, library, _ = _connected(factory, fresh)
    entry = _entry(factory, "A Journal Paper on Tokenizers")
    fresh.control("add", library=library, items=[{"title": "Tokenizers (mine)", "DOI": "10.1000/TOK.1"}])
    journal = journal_of(factory)
    journal.append_saves([(reader, entry)], NOW)
    take_asks(journal, factory, NOW, SEARCH)
    with ZoteroApi(_config(fresh)) as api:
        assert write_saves(factory, api, SEALER, NOW, SEARCH).found == 1
    assert len(fresh.items(library)) == 1


def test_a_read_only_key_saves_nothing(factory: sessionmaker[Session], fresh: ZoteroServer) -> None:
    reader, library, _ = _connected(factory, fresh, write=False)
    entry = _entry(factory, "A Journal Paper on Tokenizers")
    journal = journal_of(factory)
    journal.append_saves([(reader, entry)], NOW)
    take_asks(journal, factory, NOW, SEARCH)
    with factory() as session:
        assert save_of(session, reader, entry) is None


def test_a_store_restored_without_its_secrets_key_asks_to_reconnect(
    factory: sessionmaker[Session], fresh: ZoteroServer
) -> None:
    reader, _, _ = _connected(factory, fresh)
    other = Sealer(b"Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmE=")
    with ZoteroApi(_config(fresh)) as api:
        synced = sync_one(factory, api, other, reader, NOW, most=50)
    assert synced.broken and "connect the library again" in synced.broken


def test_the_secrets_key_is_made_once_beside_the_signing_key(tmp_path: Path) -> None:
    settings = Settings(paths={"var_dir": tmp_path})
    first = sealer_of(settings)
    assert sealer_of(settings).key == first.key and (tmp_path / "secrets.key").stat().st_mode & 0o777 == 0o600
    assert first.open(first.seal("K" * 24)) == "K" * 24 and first.open("not sealed") is None
    (tmp_path / "secrets.key").write_text("short")
    from bot.config import ConfigError

    with pytest.raises(ConfigError, match="not a secrets key"):
        sealer_of(settings)


# -- the answers' readers, on any bytes -------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_every_reader_of_an_answer_fails_as_that_answer(body: bytes) -> None:
    for reader in (read_key, read_versions, read_items):
        try:
            reader(body)
        except ZoteroAnswerError:
            pass


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda c: st.lists(c) | st.dictionaries(st.text(max_size=8), c),
        max_leaves=30,
    )
)
def test_any_json_is_read_or_refused(value: object) -> None:
    import json

    body = json.dumps(value).encode()
    for reader in (read_key, read_versions, read_items):
        try:
            reader(body)
        except ZoteroAnswerError:
            pass


def test_deep_nesting_and_long_numbers_are_refused() -> None:
    with pytest.raises(ZoteroAnswerError, match="nested too deep"):
        read_items(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(ZoteroAnswerError):
        read_versions(b'{"ABCD2345": ' + b"9" * 50_000 + b"}")


def test_retry_after_as_seconds_or_a_date() -> None:
    assert wait_asked({"Retry-After": "12"}) == 12
    assert wait_asked({"Backoff": "30"}) == 30
    at = datetime(2026, 12, 7, 12, 0, 30, tzinfo=UTC)
    assert wait_asked({"Retry-After": "Mon, 07 Dec 2026 12:00:30 GMT"}, at - timedelta(seconds=10)) == 10
    assert wait_asked({"Retry-After": "soon"}) is None


def test_the_connection_row_never_holds_the_key_in_clear(factory: sessionmaker[Session], fresh: ZoteroServer) -> None:
    reader, _, key = _connected(factory, fresh)
    with factory() as session:
        row = session.get(ZoteroConnectionRow, reader)
        assert row is not None
        assert all(key not in str(getattr(row, c.name)) for c in ZoteroConnectionRow.__table__.columns)


# -- the daemon's job and the digest --------------------------------------------------


def test_the_daemons_job_syncs_a_new_connection_and_writes_saves(
    migrated_sqlite: Path, tmp_path: Path, server: ZoteroServer, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio
    import logging
    import shutil

    from bot.choose.tagging import load_rules
    from bot.mail.parts import Parts
    from bot.run.scheduler import Daemon
    from bot.store.engine import make_engine, sessions
    from bot.unsubscribes import close_journal
    from tests.conftest import ROOT
    from tests.helpers import settings_for

    server.control("calm")
    shutil.copyfile(migrated_sqlite, tmp_path / "store.sqlite3")
    engine = make_engine(f"sqlite:///{tmp_path / 'store.sqlite3'}")
    factory = sessions(engine)
    settings = settings_for(tmp_path, zotero={"base_url": server.url})
    reader, library, key = _connected_with(factory, server, sealer_of(settings))
    server.control("add", library=library, items=[{"title": "Kept", "DOI": "10.1000/daemon"}])
    entry = _entry(factory, "A Journal Paper on Tokenizers")
    journal_of(factory).append_saves([(reader, entry)], NOW)
    daemon = Daemon(factory, Parts(settings, rules=load_rules(ROOT / "config" / "tags.toml")), engine=engine)

    async def work() -> list[str]:
        assert daemon.leadership.try_acquire()
        ran = await daemon.run_job("zotero")
        daemon.leadership.release()
        return ran

    try:
        with caplog.at_level(logging.INFO):
            assert asyncio.run(work()) == ["zotero"]
        assert "doi:10.1000/daemon" in _paper_keys(factory, reader)
        assert len([i for i in server.items(library) if i.get("DOI") == "10.1000/tok.1"]) == 1
        assert key not in caplog.text and "Zotero: 1 ask taken; saves: 1 made" in caplog.text
    finally:
        if daemon.worker_lock is not None:
            daemon.worker_lock.release()
        close_journal(engine.url.render_as_string(hide_password=False))
        engine.dispose()


def _connected_with(factory: sessionmaker[Session], server: ZoteroServer, sealer: Sealer) -> tuple[int, str, str]:
    reader = _reader(factory)
    library, key = _library(server)
    with ZoteroApi(_config(server)) as api:
        connect(factory, api, sealer, reader, "user", key, NOW)
    return reader, library, key


def test_a_broken_connection_is_said_once_by_the_next_digest(
    factory: sessionmaker[Session], fresh: ZoteroServer, tmp_path: Path
) -> None:
    from bot.mail.parts import Parts
    from bot.mail.render import Renderer, web_links
    from bot.plan import plan
    from bot.store.contents import digest_contents
    from bot.store.schema import Digest
    from bot.store.zotero import tell_broken
    from tests.conftest import ROOT
    from tests.helpers import settings_for

    settings = settings_for(tmp_path)
    reader, _, key = _connected(factory, fresh)
    with transaction(factory) as session:
        session.execute(
            ZoteroConnectionRow.__table__.update().values(can_write=True, state=SYNCED)  # a writer, synced
        )
    ingest_bytes(factory, DUMP, name="zotero.txt", now=NOW)
    with transaction(factory) as session:
        session.execute(ZoteroConnectionRow.__table__.update().values(state=BROKEN, problem="the key was refused"))
    from bot.subscribers.subscriptions import edit

    edit(factory, settings, clean_fields(_email_of(factory, reader), filter="*", backfill="all"), NOW)
    plan(factory, settings, Parts(settings).rules, now=NOW + timedelta(days=1), all_due=True)
    with transaction(factory) as session:
        assert tell_broken(session) == 1 and tell_broken(session) == 0
    with factory() as session:
        digest_ids = list(session.scalars(select(Digest.id).where(Digest.subscriber_id == reader)))
        contents = digest_contents(session, digest_ids)
    told = [c for c in contents.values() if c.zotero_broken]
    assert len(told) == 1 and not told[0].zotero_save
    links = web_links("https://digest.example.org", "7.AAAAAAAAAAAAAAAAAAAAAAAA")
    rendered = Renderer(ROOT / "templates", search_url=SEARCH).render(told[0], links)
    assert "connection is broken" in rendered.text and "connection is broken" in rendered.html
    assert "Save to Zotero" not in rendered.text and key not in rendered.text + rendered.html
    saving = Renderer(ROOT / "templates", search_url=SEARCH).render(
        replace(told[0], zotero_save=True, zotero_broken=False), links
    )
    assert "Save to Zotero: https://digest.example.org/d/7.AAAAAAAAAAAAAAAAAAAAAAAA/" in saving.text
    assert "connection is broken" not in saving.text


def _email_of(factory: sessionmaker[Session], subscriber_id: int) -> str:
    from bot.store.schema import SubscriberRow

    with factory() as session:
        return str(session.scalar(select(SubscriberRow.email).where(SubscriberRow.id == subscriber_id)))


def test_a_failed_sync_is_asked_again_after_a_while_not_every_minute(
    factory: sessionmaker[Session], fresh: ZoteroServer
) -> None:
    from bot.zotero.library_sync import AGAIN_AFTER

    reader, library, _ = _connected(factory, fresh)
    fresh.control("add", library=library, items=[{"title": "Later", "DOI": "10.1000/later"}])
    fresh.control("mode", name="html", value=True)

    def due_pass(at: datetime) -> list[int]:
        with ZoteroApi(_config(fresh)) as api:
            return [r.subscriber_id for r in sync_due(factory, api, SEALER, at, every=timedelta(hours=6), most=50)]

    assert due_pass(NOW) == [reader]  # failed: that pass's
    assert due_pass(NOW + timedelta(minutes=1)) == []
    fresh.control("calm")
    assert due_pass(NOW + AGAIN_AFTER + timedelta(minutes=1)) == [reader]
    assert _paper_keys(factory, reader) == {"doi:10.1000/later"}


def test_a_library_over_the_cap_keeps_its_newest_papers_and_fetches_no_more(
    factory: sessionmaker[Session], fresh: ZoteroServer
) -> None:
    reader, library, _ = _connected(factory, fresh)
    for n in range(3):  # three versions: the last ones are the newest
        fresh.control(
            "add", library=library, items=[{"title": f"V{n} P{k}", "DOI": f"10.1000/v{n}p{k}"} for k in range(60)]
        )
    fetched = fresh.requests("items")
    with ZoteroApi(_config(fresh)) as api:
        synced = sync_one(factory, api, SEALER, reader, NOW, most=70)
    assert synced.added == 70 and fresh.requests("items") - fetched == 2  # 100 fetched, not 180
    assert {k for k in _paper_keys(factory, reader) if k.startswith("doi:10.1000/v2")} == {
        f"doi:10.1000/v2p{k}" for k in range(60)
    }
