"""One door per form (bot.web.doors), on SQLite and PostgreSQL: every POST route the app
serves, found by walking its route table, has a door, and a cross-origin, a token-less
and an oversize POST to each is refused (403, 403, 413) and changes nothing, but where
the door itself says a POST may come from elsewhere (RFC 8058's one-click unsubscribe)
or carry no token of the page's."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker
from starlette.routing import Route

from bot.choose.tagging import load_rules
from bot.config import Settings
from bot.ingest.storing import ingest_file
from bot.plan import plan
from bot.store.schema import Digest, SubscriberRow
from bot.store.subscribers import get_subscriber
from bot.store.taste_tables import Feedback
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.tokens import make_token
from bot.tools.sink import Sink
from bot.web import create_app
from bot.web.doors import Door
from bot.web.forms import form_token
from tests.conftest import ROOT
from tests.helpers import Clock, Server, settings_for
from tests.test_signup import link_in, mails_to, settled, sign_up

NOW = datetime(2026, 11, 24, 9, tzinfo=UTC)
RULES = load_rules(ROOT / "config" / "tags.toml")
OURS = {"Origin": "http://digest.example.org", "Sec-Fetch-Site": "same-origin"}
ELSEWHERE = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}


@pytest.fixture
def settings(tmp_path: Path, sink: Sink) -> Settings:
    return settings_for(tmp_path, site=True, smtp_port=sink.port, web={"signup": True, "signups_per_hour": 50})


@pytest.fixture
def app_and_web(factory: sessionmaker[Session], settings: Settings) -> Iterator[tuple[object, httpx.Client]]:
    app = create_app(settings, factory, clock=Clock(NOW))
    with Server(app) as client:
        yield app, client


def _state(factory: sessionmaker[Session]) -> tuple[object, ...]:
    with factory() as session:
        people = sorted(tuple(row) for row in session.execute(select(SubscriberRow.email, SubscriberRow.status)))
        return people, session.scalar(select(func.count()).select_from(Feedback))


def _post_routes(app: object) -> list[Route]:
    return [r for r in app.routes if isinstance(r, Route) and "POST" in (r.methods or ())]


def test_every_post_route_has_a_door_that_refuses_what_it_must(
    factory: sessionmaker[Session], settings: Settings, sink: Sink, seed_files: list[Path], app_and_web
) -> None:
    app, web = app_and_web
    save(factory, settings, [clean_fields("ada@example.org", filter="*", backfill="all")], NOW - timedelta(days=1))
    ingest_file(factory, seed_files[0], now=NOW, rules=RULES)
    plan(factory, settings, RULES, now=NOW, all_due=True)
    with factory() as session, session.begin():
        session.execute(update(Digest).values(state="sent", sent_at=NOW))
        ada = get_subscriber(session, "ada@example.org")
        assert ada is not None
        day = session.scalar(select(Digest.local_date))
    assert sign_up(web, "grace@example.org").status_code == 200
    settled(sink, 1)
    confirm_path = link_in(mails_to(sink, "grace@example.org")[0])
    key = settings.web.signing_key.get_secret_value().encode()
    token = make_token(key, ada.id, ada.unsubscribe_secret)
    confirm_token = confirm_path.rsplit("/", 1)[1]
    csrf = re.search(r'name="csrf" value="([^"]+)"', web.get("/subscribe").text)
    assert csrf is not None
    paths = {
        "/m/{token}": (f"/m/{token}", {"form": form_token(key, token), "action": "pause"}),
        "/u/{token}": (f"/u/{token}", {"reason": "none"}),  # never the one-click field: nobody leaves
        "/d/{token}/{day}/{ref}/{verdict}": (
            f"/d/{token}/{day}/1/more",
            {"form": form_token(key, token), "action": "more"},
        ),
        "/d/{token}/{day}/{ref}/zotero": (
            f"/d/{token}/{day}/1/zotero",
            {"form": form_token(key, token), "action": "save"},
        ),
        "/c/{token}": (confirm_path, {"form": form_token(key, "confirm:" + confirm_token)}),
        "/subscribe": ("/subscribe", {"csrf": csrf.group(1), "email": "mallory@example.org", "tag": "cs.LG"}),
    }
    before = _state(factory)
    routes = _post_routes(app)
    assert sorted(r.path for r in routes) == sorted(paths)  # a new POST route must be knocked on here too
    for route in routes:
        door = getattr(route.endpoint, "door", None)
        assert isinstance(door, Door), f"{route.path}: a POST route without a door"
        path, valid = paths[route.path]
        tokenless = {k: v for k, v in valid.items() if k not in ("form", "csrf")}
        oversize = {"pad": "x" * (door.max_bytes + 1)}
        # Cross-origin (with the page's own token): only a door for posts from elsewhere lets it in.
        answer = web.post(path, data=valid, headers=ELSEWHERE)
        assert (answer.status_code != 403) if door.cross_site else (answer.status_code == 403), (route.path, answer)
        # Without the page's token: refused, but where the link's token is the only secret.
        answer = web.post(path, data=tokenless, headers=OURS)
        assert (answer.status_code != 403) if door.token is None else (answer.status_code == 403), (route.path, answer)
        # Over the door's size: refused before the handler, whatever else it carries.
        assert web.post(path, data=oversize, headers=OURS).status_code == 413, route.path
    assert _state(factory) == before  # nobody paused, rated, confirmed, signed up or left
