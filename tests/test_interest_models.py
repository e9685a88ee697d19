"""A model per interest (``bot.taste.interests``, ``bot.taste.library_service``,
``bot.taste.ranking``): a reader of several named interests has each section ordered
by what they kept and rated for that interest, and a rating trains the interest its
entry was shown under."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.filters import sections_of
from bot.choose.tagging import TagRules, load_rules
from bot.config import Settings
from bot.delivery.loop import deliver_now
from bot.ingest.storing import ingest_bytes, ingest_file
from bot.mail.parts import Parts
from bot.plan import plan
from bot.store.contents import digest_content
from bot.store.digests import list_digests
from bot.store.schema import Entry, SubscriberRow
from bot.store.taste_tables import Feedback, TasteModel
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.taste.interests import Example, Examples, by_interest
from bot.taste.library_service import give_feedback, import_library
from bot.taste.training import refresh_models
from bot.tools.sink import Sink
from bot.web import create_app
from tests.conftest import ROOT, SEEDS
from tests.helpers import Server, render_dump, settings_for

RULES = load_rules(ROOT / "config" / "tags.toml")
DAY = datetime(2026, 6, 14, 12, tzinfo=UTC)
TWO = 'Chips: "chip"; Serving: "serving"'
PUBLIC = "https://digest.example.org"


def _examples(*positives: Example, negatives: tuple[Example, ...] = ()) -> Examples:
    return Examples(list(positives), list(negatives), ["a sample entry"])


def test_a_rating_trains_the_interest_it_was_shown_under_and_a_paper_those_it_matches() -> None:
    sections = sections_of(TWO)
    split = by_interest(
        sections,
        TagRules(()),
        _examples(
            Example("A chip for serving", "rated under Serving", "Serving"),
            Example("Batching", "rated under Serving", "Serving"),
            Example("A photonic chip", "from the library"),  # judged by the filters: Chips
            Example("Another chip", "rated under an interest since renamed", "Hardware"),  # judged: Chips
            negatives=(
                Example("A chip", "said less of under Serving", "Serving"),
                Example("Quantum chip", "from an older digest"),
            ),
        ),
    )
    assert sorted(split) == ["Chips", "Serving"]
    assert [e.title for e in split["Serving"].positives] == ["A chip for serving", "Batching"]
    assert [e.title for e in split["Chips"].positives] == ["A photonic chip", "Another chip"]
    assert [e.title for e in split["Serving"].negatives] == ["A chip"]
    assert [e.title for e in split["Chips"].negatives] == ["Quantum chip"]
    assert split["Chips"].sample == ["a sample entry"]


def test_an_interest_with_fewer_than_two_positives_of_its_own_has_no_model() -> None:
    split = by_interest(
        sections_of(TWO),
        TagRules(()),
        _examples(Example("Serving one", "x", "Serving"), Example("A chip", "x"), Example("Chip two", "x")),
    )
    assert sorted(split) == ["Chips"]


def test_a_library_paper_belongs_to_an_interest_by_the_tags_the_rules_give_it() -> None:
    split = by_interest(
        sections_of("Spiking: snn; Other: gpu"),
        RULES,
        _examples(Example("Neuromorphic computing", "A spiking neural network on chip."), Example("SNN", "spiking")),
    )
    assert sorted(split) == ["Spiking"]


def _paper(title: str, summary: str) -> tuple[str, list[str], date, str]:
    return (title, ["A. Author"], date(2026, 6, 13), summary)


# What the two readers rated: four serving papers on quantum kernels they want more
# of (as Serving), two photonic chips they want more of and two quantum chips they want
# less of (as Chips).  One model of it all learns quantum as "less"; the Serving model
# learns it as "more".
RATED = [
    *[
        (_paper(f"Quantum kernels for serving {n}", f"Serving language models with quantum kernels, {n}."), "more")
        for n in ("alpha", "beta", "gamma", "delta")
    ],
    *[
        (_paper(f"Photonic chip {n}", f"A chip with photonic interconnects, design {n}."), "more")
        for n in ("alpha", "beta")
    ],
    *[(_paper(f"Quantum chip {n}", f"A chip for quantum kernels, design {n}."), "less") for n in ("alpha", "beta")],
]
TODAY = [
    _paper("Photonic serving router", "Serving language models over photonic interconnects."),
    _paper("Quantum serving cache", "Serving language models with quantum kernels."),
]


def _entry_id(session: Session, title: str) -> int:
    found = session.scalar(select(Entry.id).where(Entry.title == title))
    assert found is not None
    return int(found)


def _serving_order(factory: sessionmaker[Session], email: str) -> list[str]:
    with factory() as session:
        sid = session.scalar(select(SubscriberRow.id).where(SubscriberRow.email == email))
        (digest,) = [d for d in list_digests(session, subscriber_id=sid) if d.local_date == date(2026, 6, 15)]
        items = digest_content(session, digest.id).items
    return [i.content.title for i in items if i.content.title in {t for t, *_ in TODAY}]


def test_each_interest_is_ordered_by_its_own_model(factory: sessionmaker[Session], tmp_path: Path) -> None:
    settings = settings_for(tmp_path, web={"public_url": PUBLIC, "signing_key": "k" * 32})
    readers = {"two@example.org": TWO, "one@example.org": '"chip" or "serving"'}
    save(factory, settings, [clean_fields(e, filter=f, backfill="none") for e, f in readers.items()], DAY)
    ingest_file(factory, sorted(SEEDS.glob("*.txt"))[0], now=DAY, rules=RULES)
    ingest_bytes(factory, render_dump([p for p, _ in RATED]).encode(), name="rated", now=DAY, rules=RULES)
    with factory() as session:
        ids = {email: sid for email, sid in session.execute(select(SubscriberRow.email, SubscriberRow.id))}
        entry_ids = [_entry_id(session, paper[0]) for paper, _ in RATED]
    for (paper, verdict), entry_id in zip(RATED, entry_ids, strict=True):
        shown_under = "Chips" if paper[0].endswith(("chip alpha", "chip beta")) else "Serving"
        give_feedback(factory, ids["two@example.org"], entry_id, verdict, DAY, shown_under)
        give_feedback(factory, ids["one@example.org"], entry_id, verdict, DAY)
    tomorrow = DAY + timedelta(days=1)
    ingest_bytes(factory, render_dump(TODAY).encode(), name="today", now=tomorrow, rules=RULES)
    plan(factory, settings, RULES, now=tomorrow, all_due=True)

    with factory() as session:
        models = {
            (sid, section) for sid, section in session.execute(select(TasteModel.subscriber_id, TasteModel.section))
        }
    assert models == {(ids["two@example.org"], ""), (ids["two@example.org"], "Chips")} | {
        (ids["two@example.org"], "Serving"),
        (ids["one@example.org"], ""),
    }
    # The Serving model puts quantum kernels first; the one model of everything, which
    # learned "less quantum" from the chips, puts them last.
    assert _serving_order(factory, "two@example.org") == ["Quantum serving cache", "Photonic serving router"]
    assert _serving_order(factory, "one@example.org") == ["Photonic serving router", "Quantum serving cache"]

    with Server(create_app(settings, factory)) as client:
        manage = client.get(f"/m/{_token(settings, factory, ids['two@example.org'])}").text
    assert "Chips, Serving each have a model of their own, trained on what you kept and rated for them." in manage

    # Nothing changed: nothing is trained again; a new interest is.
    assert refresh_models(factory, tomorrow, rules=RULES).trained == 0
    with factory.begin() as session:
        session.execute(
            update(SubscriberRow).where(SubscriberRow.id == ids["two@example.org"]).values(filter='Serving: "serving"')
        )
    assert refresh_models(factory, tomorrow, rules=RULES).trained == 1
    with factory() as session:
        sections = set(
            session.scalars(select(TasteModel.section).where(TasteModel.subscriber_id == ids["two@example.org"]))
        )
    assert sections == {"", "Serving"}


def test_a_rating_from_the_mail_records_the_interest_it_was_shown_under(
    factory: sessionmaker[Session], tmp_path: Path, seed_files: list[Path], sink: Sink
) -> None:
    settings = settings_for(
        tmp_path,
        web={"public_url": PUBLIC, "signing_key": "k" * 32},
        smtp={"port": sink.port, "timeout_seconds": 5},
        sender={"from_address": "digest@bot.example"},
    )
    filter_text = 'Spiking: snn or fpga; Long context: "sparse attention" or "kv cache" or serving'
    save(factory, settings, [clean_fields("two@example.org", filter=filter_text, backfill="none")], DAY)
    with factory() as session:
        sid = int(session.scalar(select(SubscriberRow.id)) or 0)
    import_library(factory, sid, (ROOT / "tests" / "fixtures" / "library" / "snn.bib").read_bytes(), DAY)
    for day, path in enumerate(seed_files[:3]):
        ingest_file(factory, path, now=DAY + timedelta(days=day), rules=RULES)
        plan(factory, settings, RULES, now=DAY + timedelta(days=day), all_due=True)
        asyncio.run(deliver_now(factory, Parts(settings), clock=lambda day=day: DAY + timedelta(days=day)))
    with factory() as session:
        digest = list_digests(session, subscriber_id=sid)[-1]
        items = digest_content(session, digest.id).items
    shown = {n: item.section for n, item in enumerate(items, 1)}
    assert "Long context" in shown.values()
    ref = next(n for n, section in shown.items() if section == "Long context")
    path = f"/d/{_token(settings, factory, sid)}/{digest.local_date.isoformat()}/{ref}/more"
    with Server(create_app(settings, factory)) as client:
        page = client.get(path)
        assert page.status_code == 200, page.text
        form = re.search(r'name="form" value="([0-9a-f]+)"', page.text)
        assert form is not None
        said = client.post(path, data={"form": form.group(1), "action": "more"}, headers={"origin": PUBLIC})
        assert said.status_code == 200, said.text
    with factory() as session:
        assert [tuple(row) for row in session.execute(select(Feedback.verdict, Feedback.section))] == [
            ("more", "Long context")
        ]


def _token(settings: Settings, factory: sessionmaker[Session], sid: int) -> str:
    from bot.tokens import make_token, signing_key

    with factory() as session:
        secret = session.scalar(select(SubscriberRow.unsubscribe_secret).where(SubscriberRow.id == sid))
    assert secret is not None
    return make_token(signing_key(settings), sid, secret)
