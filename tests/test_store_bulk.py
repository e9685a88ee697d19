"""Store: the bulk helpers every entity module uses, on SQLite and PostgreSQL."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, delete, insert, select

from bot.store.bulk import among, chunks
from bot.store.engine import sessions, transaction
from bot.store.schema import TagRow

# What a dump may name a key or a tag: any text PostgreSQL holds (not NUL), with the
# characters an array's text form quotes or splits on.
NAMES = st.text(
    alphabet=st.one_of(
        st.sampled_from("{}\",\\' ()NULL"), st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
    ),
    min_size=0,
    max_size=30,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stored=st.sets(NAMES, max_size=20), asked=st.lists(NAMES, max_size=20))
def test_among_finds_exactly_the_values_asked_for(engine: Engine, stored: set[str], asked: list[str]) -> None:
    with transaction(sessions(engine)) as session:
        session.execute(delete(TagRow))
        if stored:
            session.execute(insert(TagRow), [{"name": name, "label": name} for name in stored])
        found = set(session.scalars(select(TagRow.name).where(among(session, TagRow.name, asked))))
    assert found == stored & set(asked)


def test_among_takes_a_chunk_of_ids_in_one_statement_text(engine: Engine) -> None:
    """Every list finds its rows; PostgreSQL gets the same statement for lists of any
    length (one array parameter), so the driver parses it once."""
    with transaction(sessions(engine)) as session:
        session.execute(insert(TagRow), [{"id": n, "name": f"t{n}", "label": f"t{n}"} for n in range(1, 2001)])
    texts = set()
    found: list[int] = []
    with transaction(sessions(engine)) as session:
        for part in chunks([*range(0, 2003, 2), 7, 7]):
            query = select(TagRow.id).where(among(session, TagRow.id, part))
            texts.add(str(query.compile(session.get_bind())))
            found += session.scalars(query)
    assert sorted(found) == sorted([*range(2, 2001, 2), 7])
    if engine.dialect.name == "postgresql":
        assert len(texts) == 1 and "= ANY (" in texts.pop()


def test_among_matches_no_stored_value_on_a_longer_one(engine: Engine) -> None:
    """A value longer than the column (a tag name is 100 characters at most) finds
    nothing, not the stored value it begins with."""
    with transaction(sessions(engine)) as session:
        session.execute(insert(TagRow), [{"name": "x" * 100, "label": "x"}])
        asked = ["x" * 100 + "y", "x" * 101]
        assert list(session.scalars(select(TagRow.name).where(among(session, TagRow.name, asked)))) == []
        assert list(session.scalars(select(TagRow.name).where(among(session, TagRow.name, ["x" * 100])))) == ["x" * 100]
