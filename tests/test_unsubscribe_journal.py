"""Acknowledged unsubscribes are never lost: journaled before the answer, applied to the
store in the background, honoured by the planner and the worker before they are applied.
Real uvicorn, httpx, SQLite files (and PostgreSQL when DIGESTBOT_TEST_PG is set)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.delivery.loop import deliver_now
from bot.domain import DigestState, SubscriberStatus
from bot.ingest.storing import ingest_file
from bot.mail.parts import Parts
from bot.plan import plan
from bot.store.engine import make_engine, sessions
from bot.store.response_tables import AppliedUnsubscribe, UnsubscribeRequest
from bot.store.schema import Digest
from bot.store.subscribers import get_subscriber, list_subscribers
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.tokens import make_token, signing_key
from bot.tools.sink import Sink, free_port
from bot.unsubscribes import close_journal, journal_of, read_only_sessions
from bot.web import create_app
from bot.web.forms import form_token
from bot.web.limits import MissBudget
from bot.web.unsubscribe_journaling import APPLY_EVERY_SECONDS
from tests.conftest import ROOT, SEEDS
from tests.helpers import DIGESTBOT, Server, settings_for, wait_until_serving

RULES = load_rules(ROOT / "config" / "tags.toml")
KEY = "k" * 32
ONE_CLICK = {"content-type": "application/x-www-form-urlencoded"}
NOW = datetime(2026, 6, 14, 12, tzinfo=UTC)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return settings_for(tmp_path, web={"public_url": "https://digest.example.org", "signing_key": KEY})


def _people(factory: sessionmaker[Session], settings: Settings, count: int) -> dict[int, str]:
    """subscriber id -> token for *count* new subscribers."""
    save(factory, settings, [clean_fields(f"r{i}@example.org", send_hour=0) for i in range(count)], NOW)
    key = signing_key(settings)
    with factory() as session:
        return {s.id: make_token(key, s.id, s.unsubscribe_secret) for s in list_subscribers(session)}


def _stored_status(factory: sessionmaker[Session], email: str) -> SubscriberStatus:
    with factory() as session:
        found = get_subscriber(session, email)
        assert found is not None
        return found.status


def _post_all(port: int, tokens: list[str], concurrency: int = 50) -> list[int]:
    async def run() -> list[int]:
        limits = httpx.Limits(max_connections=concurrency)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30, limits=limits) as client:
            gate = asyncio.Semaphore(concurrency)

            async def one(token: str) -> int:
                async with gate:
                    response = await client.post(
                        f"/u/{token}", content=b"List-Unsubscribe=One-Click", headers=ONE_CLICK
                    )
                    return response.status_code

            return list(await asyncio.gather(*(one(t) for t in tokens)))

    return asyncio.run(run())


def test_an_acknowledged_unsubscribe_is_applied_in_the_background(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    tokens = _people(factory, settings, 2)
    first = min(tokens)
    with Server(create_app(settings, factory)) as client:
        response = client.post(f"/u/{tokens[first]}", content=b"List-Unsubscribe=One-Click", headers=ONE_CLICK)
        assert response.status_code == 200 and "You are unsubscribed" in response.text
        # The page shows it at once, before the store has it.
        assert "You are unsubscribed" in client.get(f"/u/{tokens[first]}").text
        deadline = time.monotonic() + 10
        while _stored_status(factory, "r0@example.org") is not SubscriberStatus.UNSUBSCRIBED:
            assert time.monotonic() < deadline, "not applied within 10 s"
            time.sleep(0.1)
    assert _stored_status(factory, "r1@example.org") is SubscriberStatus.ACTIVE


@contextlib.contextmanager
def _store_held(engine: Engine) -> Iterator[None]:
    """A long delivery or ingest in the middle of its transaction: on SQLite it holds
    the one writer lock, on PostgreSQL a lock on every subscriber's row."""
    if engine.dialect.name == "sqlite":
        locker = sqlite3.connect(engine.url.database, isolation_level=None, timeout=0)
        locker.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            locker.execute("ROLLBACK")
            locker.close()
        return
    with engine.connect() as connection:
        connection.execute(text("UPDATE subscribers SET updated_at = updated_at"))
        try:
            yield
        finally:
            connection.rollback()


@pytest.mark.slow
def test_a_burst_while_the_store_is_locked_is_answered_and_applied_later(
    engine: Engine, factory: sessionmaker[Session], settings: Settings
) -> None:
    tokens = _people(factory, settings, 100)
    with Server(create_app(settings, factory)) as client:
        port = int(str(client.base_url).rsplit(":", 1)[1])
        with _store_held(engine):
            # Every one answered while the store is still locked: none waited for it.
            codes = _post_all(port, list(tokens.values()))
            assert codes == [200] * len(tokens)
            time.sleep(3 * APPLY_EVERY_SECONDS)  # the applier has tried, and waits
            with read_only_sessions(factory)() as session:
                assert {s.status for s in list_subscribers(session)} == {SubscriberStatus.ACTIVE}
        deadline = time.monotonic() + 15
        while True:
            with factory() as session:
                statuses = {s.status for s in list_subscribers(session)}
            if statuses == {SubscriberStatus.UNSUBSCRIBED}:
                break
            assert time.monotonic() < deadline, f"not all applied 15 s after the lock went: {statuses}"
            time.sleep(0.2)
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(AppliedUnsubscribe)) == len(tokens)


def test_a_change_the_locked_store_cannot_take_is_answered_busy(
    migrated_sqlite: Path, tmp_path: Path, settings: Settings
) -> None:
    """A writer that waits past the busy timeout gets the page that says "busy, nothing
    changed" (503, Retry-After), not a server error, and the next try works."""
    shutil.copyfile(migrated_sqlite, tmp_path / "store.sqlite3")
    engine = make_engine(f"sqlite:///{tmp_path / 'store.sqlite3'}", busy_timeout_ms=200)
    factory = sessions(engine)
    tokens = _people(factory, settings, 1)
    (sid,) = tokens
    token = tokens[sid]
    with Server(create_app(settings, factory)) as client:
        form = {"form": form_token(KEY.encode(), token), "action": "pause"}
        headers = {"origin": "https://digest.example.org"}
        with _store_held(engine):
            busy = client.post(f"/m/{token}", data=form, headers=headers)
        assert busy.status_code == 503 and busy.headers["retry-after"] == "5"
        assert "busy" in busy.text and "Nothing was changed" in busy.text
        assert _stored_status(factory, "r0@example.org") is SubscriberStatus.ACTIVE
        again = client.post(f"/m/{token}", data=form, headers=headers)
        assert again.status_code == 200 and "status: <strong>paused</strong>" in again.text
    close_journal(engine.url.render_as_string(hide_password=False))
    engine.dispose()


def test_an_acknowledged_address_gets_no_digest_even_before_it_is_applied(
    factory: sessionmaker[Session], settings: Settings, sink: Sink
) -> None:
    tokens = _people(factory, settings, 3)
    first, second, third = sorted(tokens)
    for seed in sorted(SEEDS.glob("*.txt"))[:1]:
        ingest_file(factory, seed, rules=RULES)
    settings = settings.model_copy(update={"smtp": settings.smtp.model_copy(update={"port": sink.port})})
    journal = journal_of(factory)
    # Acknowledged before planning: the planner leaves them out.
    journal.append([first], NOW)
    # The second is acknowledged after planning, before delivery, and the store is not
    # told: as if the endpoint's applier had not run yet.
    journal_first = journal.pending_subscribers()
    assert journal_first == {first}
    original_apply = journal.try_apply_pending
    journal.try_apply_pending = lambda _factory: False  # type: ignore[method-assign]  # the store "busy"
    try:
        report = plan(factory, settings, RULES, now=datetime.now(UTC), all_due=True)
        assert len(report.planned) == 2  # second and third
        journal.append([second], NOW)
        delivered = asyncio.run(deliver_now(factory, Parts(settings), clock=lambda: datetime.now(UTC)))
    finally:
        journal.try_apply_pending = original_apply  # type: ignore[method-assign]
    assert delivered.sent == 1 and delivered.cancelled == 1
    assert [m.recipients for m in sink.received] == [["r2@example.org"]]
    with factory() as session:
        states = dict(session.execute(select(Digest.subscriber_id, Digest.state)).all())
    assert states == {second: DigestState.CANCELLED.value, third: DigestState.SENT.value}
    journal.apply_pending(factory)
    assert _stored_status(factory, "r0@example.org") is SubscriberStatus.UNSUBSCRIBED
    assert _stored_status(factory, "r1@example.org") is SubscriberStatus.UNSUBSCRIBED


def test_a_reader_who_leaves_while_their_batch_is_on_the_wire_is_not_sent_to(
    factory: sessionmaker[Session], settings: Settings, sink: Sink
) -> None:
    """Issue 47, item 16: the journal was read once per batch, and under load a batch
    took up to 32 s: 52 digests went out 1 to 32 s after their reader's one-click was
    acknowledged.  It is now read again before each message goes on the wire (at most
    LEAVERS_FRESH_SECONDS old): one SMTP connection, a slow server, and the last ten
    readers of the batch leave after its first message went out."""
    from bot.delivery.leavers import LEAVERS_FRESH_SECONDS
    from bot.tools.sink import Fault
    from tests.helpers import queue_digests

    queue_digests(factory, 20)
    with factory() as session:
        readers = sorted(session.scalars(select(Digest.subscriber_id)))
    smtp = settings.smtp.model_copy(update={"port": sink.port, "pool_size": 1})
    settings = settings.model_copy(update={"smtp": smtp})
    sink.handler.faults = lambda recipient, attempt: Fault("data", stall=0.1)
    journal = journal_of(factory)
    acknowledged: list[float] = []

    async def run() -> object:
        delivering = asyncio.ensure_future(deliver_now(factory, Parts(settings), clock=lambda: datetime.now(UTC)))
        while not sink.received:
            await asyncio.sleep(0.005)
        await asyncio.to_thread(journal.append, readers[10:], datetime.now(UTC))
        acknowledged.append(time.monotonic())
        return await delivering

    report = asyncio.run(run())
    got = {r.recipients[0] for r in sink.received}
    assert {f"reader{n}@example.org" for n in range(10, 20)}.isdisjoint(got), sorted(got)
    assert report.cancelled == 10 and report.sent == len(got) == 10  # type: ignore[attr-defined]
    assert LEAVERS_FRESH_SECONDS <= 0.1
    with factory() as session:
        states = Counter(session.scalars(select(Digest.state)))
    assert states == {DigestState.SENT.value: 10, DigestState.CANCELLED.value: 10}


def test_an_unsubscribe_applied_while_the_batch_waits_for_the_relay_is_honoured(
    factory: sessionmaker[Session], settings: Settings, sink: Sink
) -> None:
    """Issue 61's harness: the endpoint applies a request within a second, and a batch
    waits behind a relay limited to a few messages a second for longer: once applied, a
    request was no longer pending in the journal, and the message went out after the
    answer.  Now a reader whose status is no longer active is left out too."""
    from tests.helpers import queue_digests

    queue_digests(factory, 12)
    with factory() as session:
        readers = sorted(session.scalars(select(Digest.subscriber_id)))
    smtp = settings.smtp.model_copy(update={"port": sink.port, "pool_size": 1, "rate_per_second": 20.0})
    settings = settings.model_copy(update={"smtp": smtp})
    journal = journal_of(factory)

    async def run() -> object:
        delivering = asyncio.ensure_future(deliver_now(factory, Parts(settings), clock=lambda: datetime.now(UTC)))
        while not sink.received:
            await asyncio.sleep(0.005)
        await asyncio.to_thread(journal.append, readers[6:], datetime.now(UTC))
        await asyncio.to_thread(journal.apply_pending, factory)  # as the endpoint does, within a second
        assert not journal.pending_subscribers(readers)
        return await delivering

    report = asyncio.run(run())
    got = {r.recipients[0] for r in sink.received}
    assert {f"reader{n}@example.org" for n in range(6, 12)}.isdisjoint(got), sorted(got)
    assert report.cancelled == 6  # type: ignore[attr-defined]


@pytest.mark.slow
def test_kill_9_in_a_burst_loses_no_acknowledged_unsubscribe(tmp_path: Path) -> None:
    database = tmp_path / "web.sqlite3"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
    env |= {
        "DIGESTBOT_DATABASE__URL": f"sqlite:///{database}",
        "DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var"),
        "DIGESTBOT_WEB__SIGNING_KEY": KEY,
    }
    subprocess.run([DIGESTBOT, "db", "upgrade"], env=env, cwd=tmp_path, check=True, capture_output=True)
    from bot.store.engine import make_engine, sessions

    engine = make_engine(f"sqlite:///{database}")
    factory = sessions(engine)
    settings = settings_for(tmp_path, web={"signing_key": KEY})
    tokens = _people(factory, settings, 2000)

    def serve() -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [DIGESTBOT, "serve", "--port", str(port)], env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True
        )
        wait_until_serving(proc, port)
        return proc

    proc = serve()
    answered: dict[int, int] = {}

    async def burst() -> None:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            gate = asyncio.Semaphore(100)

            async def one(sid: int, token: str) -> None:
                async with gate:
                    try:
                        response = await client.post(
                            f"/u/{token}", content=b"List-Unsubscribe=One-Click", headers=ONE_CLICK
                        )
                        answered[sid] = response.status_code
                    except httpx.TransportError:
                        pass  # the server died under it: not acknowledged

            async def killer() -> None:
                while len(answered) < 600:
                    await asyncio.sleep(0.005)
                proc.send_signal(signal.SIGKILL)

            await asyncio.gather(killer(), *(one(s, t) for s, t in tokens.items()))

    asyncio.run(burst())
    proc.wait(timeout=10)
    acknowledged = {sid for sid, code in answered.items() if code == 200}
    assert 600 <= len(acknowledged) < len(tokens), len(acknowledged)
    assert set(answered.values()) == {200}
    proc = serve()  # the restarted endpoint applies what the killed one journaled
    try:
        deadline = time.monotonic() + 30
        while True:
            with factory() as session:
                left = {s.id for s in list_subscribers(session) if s.status is SubscriberStatus.UNSUBSCRIBED}
            if acknowledged <= left:
                break
            assert time.monotonic() < deadline, f"{len(acknowledged - left)} acknowledged, not applied"
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    journal = journal_of(factory)
    with journal.factory() as session:
        requests = session.scalar(select(func.count()).select_from(UnsubscribeRequest))
        pending = journal.pending_subscribers()
    with factory() as session:
        applied = session.scalar(select(func.count()).select_from(AppliedUnsubscribe))
        left = {s.id for s in list_subscribers(session) if s.status is SubscriberStatus.UNSUBSCRIBED}
    assert not pending and applied == requests  # each journaled request applied once
    assert left <= set(tokens) and len(left) == requests  # nobody else, nobody twice
    engine.dispose()


def test_the_miss_budget_refills_and_forgets_old_clients() -> None:
    budget = MissBudget(per_second=2, burst=3)
    for _ in range(3):
        assert not budget.exhausted("a", 0.0)
        budget.spend("a", 0.0)
    assert budget.exhausted("a", 0.0) and not budget.exhausted("b", 0.0)
    assert not budget.exhausted("a", 0.5)  # one miss back after half a second
    assert not MissBudget(per_second=0, burst=1).exhausted("a", 0.0)  # 0: no limit


def test_a_flood_of_forged_tokens_is_limited_per_client_and_valid_ones_still_answer(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    settings = settings.model_copy(
        # Almost no refill: at 1 a second, 80 requests on a loaded machine earn misses back.
        update={"web": settings.web.model_copy(update={"misses_per_second": 0.001, "misses_burst": 50})}
    )
    tokens = _people(factory, settings, 2)
    flood = {"x-forwarded-for": "203.0.113.9", **ONE_CLICK}
    with Server(create_app(settings, factory)) as client:
        codes = Counter(
            client.post(f"/u/{n}.{'A' * 24}", content=b"List-Unsubscribe=One-Click", headers=flood).status_code
            for n in range(1, 81)
        )
        assert codes[404] == 50 and codes[429] == 30
        provider = {"x-forwarded-for": "198.51.100.7", **ONE_CLICK}
        for token in tokens.values():
            response = client.post(f"/u/{token}", content=b"List-Unsubscribe=One-Click", headers=provider)
            assert response.status_code == 200
        assert client.get(f"/u/{min(tokens)}.{'B' * 24}", headers=flood).status_code == 429


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_serve_with_several_workers(tmp_path: Path, backend: str) -> None:
    from tests.helpers import postgres_schema

    pg = os.environ.get("DIGESTBOT_TEST_PG")
    if backend == "postgresql" and not pg:
        pytest.skip("PostgreSQL tests need DIGESTBOT_TEST_PG=postgresql+psycopg://user@host/db (CI sets it)")
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(postgres_schema(pg)) if backend == "postgresql" else f"sqlite:///{tmp_path / 'w.db'}"
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
        env |= {"DIGESTBOT_DATABASE__URL": url, "DIGESTBOT_PATHS__VAR_DIR": str(tmp_path / "var")}
        env["DIGESTBOT_WEB__SIGNING_KEY"] = KEY
        subprocess.run([DIGESTBOT, "db", "upgrade"], env=env, cwd=tmp_path, check=True, capture_output=True)
        from bot.store.engine import make_engine, sessions

        engine = make_engine(url)
        stack.callback(engine.dispose)
        factory = sessions(engine)
        settings = settings_for(tmp_path, web={"signing_key": KEY})
        tokens = _people(factory, settings, 200)
        proc = subprocess.Popen(
            [DIGESTBOT, "serve", "--port", str(port), "--workers", "2"],
            env=env,
            cwd=tmp_path,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_until_serving(proc, port)
            assert _post_all(port, list(tokens.values()), concurrency=20) == [200] * len(tokens)
            deadline = time.monotonic() + 20
            while True:
                with factory() as session:
                    statuses = {s.status for s in list_subscribers(session)}
                if statuses == {SubscriberStatus.UNSUBSCRIBED}:
                    break
                assert time.monotonic() < deadline, statuses
                time.sleep(0.2)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, errors = proc.communicate(timeout=30)
        assert proc.returncode == 0, errors
        with factory() as session:
            assert session.scalar(select(func.count()).select_from(AppliedUnsubscribe)) == len(tokens)


def test_subscribing_again_on_the_manage_page_is_not_undone_by_a_pending_unsubscribe(
    factory: sessionmaker[Session], settings: Settings
) -> None:
    tokens = _people(factory, settings, 1)
    ((subscriber_id, token),) = tokens.items()
    journal_of(factory).append([subscriber_id], NOW)  # acknowledged by another worker, not applied
    with Server(create_app(settings, factory)) as client:
        page = client.get(f"/m/{token}")
        assert page.status_code == 200 and "Subscribe again" in page.text
        form = {"form": form_token(KEY.encode(), token), "action": "resubscribe"}
        again = client.post(f"/m/{token}", data=form)
        assert again.status_code == 200 and "Subscribed again" in again.text
        time.sleep(1.5)  # the background applier runs meanwhile
    assert _stored_status(factory, "r0@example.org") is SubscriberStatus.ACTIVE
    assert not journal_of(factory).pending_subscribers()


@pytest.mark.slow
def test_manage_pages_stay_correct_during_a_burst(factory: sessionmaker[Session], settings: Settings) -> None:
    tokens = _people(factory, settings, 300)
    ids = sorted(tokens)
    leaving, pausing, refiltering = ids[:200], ids[200:250], ids[250:]
    key = KEY.encode()

    async def run(port: int) -> tuple[list[int], list[tuple[int, str]]]:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:

            async def leave(sid: int) -> int:
                body = b"List-Unsubscribe=One-Click"
                return (await client.post(f"/u/{tokens[sid]}", content=body, headers=ONE_CLICK)).status_code

            async def manage(sid: int) -> tuple[int, str]:
                page = await client.get(f"/m/{tokens[sid]}")
                assert page.status_code == 200 and "status: <strong>active</strong>" in page.text
                form = {"form": form_token(key, tokens[sid])}
                if sid in pausing:
                    form["action"] = "pause"
                else:
                    form.update(action="filter", filter=f'"topic {sid}"')
                changed = await client.post(f"/m/{tokens[sid]}", data=form)
                return changed.status_code, changed.text

            burst = asyncio.gather(*(leave(sid) for sid in leaving))
            pages = asyncio.gather(*(manage(sid) for sid in pausing + refiltering))
            return list(await burst), list(await pages)

    with Server(create_app(settings, factory)) as client:
        port = int(str(client.base_url).rsplit(":", 1)[1])
        codes, answers = asyncio.run(run(port))
        assert codes == [200] * len(leaving)
        assert [code for code, _ in answers] == [200] * len(answers)
        assert all("Paused" in text for _, text in answers[: len(pausing)])
        assert all("Filter saved" in text for _, text in answers[len(pausing) :])
        # A page opened after the burst shows each leaver unsubscribed, applied or not.
        for sid in leaving[:20]:
            assert "status: <strong>unsubscribed</strong>" in client.get(f"/m/{tokens[sid]}").text
    journal_of(factory).apply_pending(factory)
    with factory() as session:
        stored = {s.id: s for s in list_subscribers(session)}
    assert {stored[sid].status for sid in leaving} == {SubscriberStatus.UNSUBSCRIBED}
    assert {stored[sid].status for sid in pausing} == {SubscriberStatus.PAUSED}
    assert all(stored[sid].filter == f'"topic {sid}"' for sid in refiltering)
    assert {stored[sid].status for sid in refiltering} == {SubscriberStatus.ACTIVE}


def test_the_consent_record_says_how_a_reader_left_and_came_back(
    factory: sessionmaker[Session], settings: Settings, tmp_path: Path
) -> None:
    """Issue 48, item 4: the consent record had no line for an unsubscribe or a
    resubscribe; `subscribers show` could not confirm what a reader did."""
    from bot.store.consents import consents_of
    from tests.helpers import Cli

    tokens = _people(factory, settings, 1)
    ((subscriber_id, token),) = tokens.items()
    with Server(create_app(settings, factory)) as client:
        assert client.post(f"/u/{token}", content=b"List-Unsubscribe=One-Click", headers=ONE_CLICK).status_code == 200
        deadline = time.monotonic() + 10
        while _stored_status(factory, "r0@example.org") is not SubscriberStatus.UNSUBSCRIBED:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        form = {"form": form_token(KEY.encode(), token), "action": "resubscribe"}
        assert "Subscribed again" in client.post(f"/m/{token}", data=form).text
    with factory() as session:
        events = [(e.event, e.address, e.page, e.client) for e in consents_of(session, subscriber_id)]
    assert events[-2][:2] == ("unsubscribe", "r0@example.org") and "one-click" in events[-2][2]
    assert events[-1][:2] == ("resubscribe", "r0@example.org") and "/m/ (their manage page)" in events[-1][2]
    assert events[-1][3] == "127.0.0.1" and token not in " ".join(map(str, events))
    url = factory.kw["bind"].url.render_as_string(hide_password=False)
    cli = Cli(tmp_path, {"DIGESTBOT_DATABASE__URL": url, "DIGESTBOT_WEB__SIGNING_KEY": KEY})
    cli("subscribers", "remove", "r0@example.org")
    shown = " ".join(cli("subscribers", "show", "r0@example.org").stdout.split())
    assert "r0@example.org unsubscribed at the one-click unsubscribe link" in shown
    assert "r0@example.org subscribed again from 127.0.0.1" in shown
    assert "r0@example.org unsubscribed at digestbot subscribers remove (by " in shown
    assert "library 0 papers" in shown and "ratings 0 more like this, 0 less like this" in shown
    assert "send updates yes" in shown
