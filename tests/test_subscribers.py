"""Subscriber input: validation at the door, CSV import/export, soft and hard removal."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.domain import SubscriberStatus
from bot.store.subscribers import get_subscriber, list_subscribers
from bot.subscribers.csv_io import export_csv, import_csv
from bot.subscribers.fields import SubscriberInputError, clean_fields
from bot.subscribers.settings import SETTINGS
from bot.subscribers.subscriptions import AlreadySubscribed, add, remove

NOW = datetime(2026, 6, 14, 12, tzinfo=UTC)


def test_addresses_are_normalized_and_idn_accepted() -> None:
    assert clean_fields("  Ada@EXAMPLE.org ").email == "Ada@example.org"
    assert clean_fields("linus@bücher.example").email == "linus@bücher.example"
    assert clean_fields("yuki@xn--bcher-kva.example").email == "yuki@bücher.example"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"email": "not-an-address"}, "email:"),
        ({"email": "a@b.example\r\nBcc: victim@example.org"}, "email: contains control characters"),
        ({"email": "a@b.example", "name": "Eve\r\nBcc: x@y.z"}, "name: contains control characters"),
        ({"email": "a@b.example", "filter": "gpu and"}, "filter: 'gpu and': position 8"),
        ({"email": "a@b.example", "timezone": "Mars/Olympus"}, "timezone: 'Mars/Olympus' is not an IANA time zone"),
        ({"email": "a@b.example", "timezone": "../../etc/passwd"}, "timezone:"),
        ({"email": "a@b.example", "send_hour": "24"}, "send_hour: 24 is not a whole hour"),
        ({"email": "a@b.example", "send_hour": "8am"}, "send_hour: '8am'"),
        ({"email": "a@b.example", "backfill": "a week"}, "backfill:"),
        ({"email": "a@b.example", "status": "gone"}, "status: 'gone' is not one of"),
    ],
)
def test_bad_fields_are_rejected_with_the_field_named(kwargs: dict[str, str], field: str) -> None:
    with pytest.raises(SubscriberInputError) as info:
        clean_fields(**kwargs)
    assert str(info.value).startswith(field) or field in str(info.value)
    assert "\n" not in str(info.value)


def _csv_10k_with_3_percent_bad() -> tuple[str, dict[int, str]]:
    rng = random.Random(7)
    lines = ["email,name,filter,timezone,send_hour"]
    bad: dict[int, str] = {}
    for i in range(10_000):
        line_number = i + 2
        if i % 100 < 3:
            kind = rng.choice(["email", "filter", "timezone", "send_hour"])
            bad[line_number] = kind
            row = {
                "email": f"broken{i}@@example.org,Name {i},*,UTC,8",
                "filter": f"user{i}@example.org,Name {i},gpu and (llm,UTC,8",
                "timezone": f"user{i}@example.org,Name {i},*,Nowhere/City,8",
                "send_hour": f"user{i}@example.org,Name {i},*,UTC,25",
            }[kind]
        else:
            row = (
                f"user{i}@example.org,Name {i},{rng.choice(['*', 'gpu and llm', 'snn or fpga'])},Europe/Berlin,{i % 24}"
            )
        lines.append(row)
    return "\n".join(lines) + "\n", bad


def test_csv_import_of_10k_rows_keeps_the_good_and_lists_the_bad(factory: sessionmaker[Session]) -> None:
    text, bad = _csv_10k_with_3_percent_bad()
    report = import_csv(factory, Settings(), text, NOW)
    assert (report.created, report.updated) == (10_000 - len(bad), 0)
    assert len(bad) == 300
    assert {e.line: e.reason.split(":")[0] for e in report.errors} == bad
    again = import_csv(factory, Settings(), text, NOW)  # idempotent
    assert (again.created, again.updated, again.unchanged, len(again.errors)) == (0, 0, 9_700, 300)
    with factory() as s:
        assert len(list_subscribers(s)) == 9_700


def test_csv_header_problems_are_reported_once(factory: sessionmaker[Session]) -> None:
    assert (
        import_csv(factory, Settings(), "mail,name\nx@y.z,X\n", NOW)
        .errors[0]
        .reason.startswith("header must name an 'email' column")
    )
    assert (
        "unknown column(s) colour" in import_csv(factory, Settings(), "email,colour\nx@y.z,red\n", NOW).errors[0].reason
    )
    report = import_csv(factory, Settings(), "email,name\nx@y.example,X,extra\n\n", NOW)
    assert [(e.line, e.reason) for e in report.errors] == [(2, "more cells than header columns")]


def test_export_round_trips_through_import(factory: sessionmaker[Session], tmp_path) -> None:
    from tests.conftest import ROOT

    import_csv(factory, Settings(), (ROOT / "config" / "subscribers.example.csv").read_text(), NOW)
    exported = export_csv(factory)
    settings = "".join(f",{s.name}" for s in SETTINGS)  # the yes/no settings follow, each a column
    assert exported.splitlines()[0] == "email,name,filter,timezone,send_hour,status,backfill,cadence" + settings
    report = import_csv(factory, Settings(), exported, NOW)
    assert (report.created, report.updated, report.unchanged, report.errors) == (0, 0, 5, ())
    assert export_csv(factory) == exported


def test_a_repeated_address_is_a_bad_row_and_changes_are_told_from_no_change(factory: sessionmaker[Session]) -> None:
    text = "email,name\nada@example.org,Ada\nbob@example.org,Bob\nADA@example.org,Ada L.\n"
    report = import_csv(factory, Settings(), text, NOW)
    assert (report.created, report.updated, report.unchanged) == (2, 0, 0)
    assert [(e.line, e.reason) for e in report.errors] == [
        (4, "ADA@example.org is already on line 2 (one row per address)")
    ]
    with factory() as session:
        assert {s.email: s.name for s in list_subscribers(session)} == {
            "ada@example.org": "Ada",
            "bob@example.org": "Bob",
        }
    changed = import_csv(factory, Settings(), "email,name\nada@example.org,Ada L.\nbob@example.org,Bob\n", NOW)
    assert (changed.created, changed.updated, changed.unchanged, changed.errors) == (0, 1, 1, ())
    # A row that gives fewer fields changes only those it gives.
    fewer = import_csv(factory, Settings(), "email\nada@example.org\n", NOW)
    assert (fewer.updated, fewer.unchanged) == (0, 1)


def test_soft_remove_then_add_reactivates_and_purge_deletes(factory: sessionmaker[Session]) -> None:
    settings = Settings()
    subscriber, created = add(factory, settings, clean_fields("a@example.org", filter="gpu"), NOW)
    assert created and subscriber.filter == "gpu" and subscriber.backfill == "7d"
    with pytest.raises(AlreadySubscribed):
        add(factory, settings, clean_fields("A@example.org"), NOW)
    remove(factory, "a@example.org", purge=False, now=NOW)
    with factory() as s:
        found = get_subscriber(s, "a@example.org")
        assert found is not None and found.status is SubscriberStatus.UNSUBSCRIBED
    again, created = add(factory, settings, clean_fields("a@example.org"), NOW)
    assert not created and again.status is SubscriberStatus.ACTIVE and again.id == subscriber.id
    assert again.unsubscribe_secret == subscriber.unsubscribe_secret
    remove(factory, "a@example.org", purge=True, now=NOW)
    with factory() as s:
        assert get_subscriber(s, "a@example.org") is None


def test_csv_lines_are_counted_at_line_feeds_and_a_bare_cr_is_that_lines_error() -> None:
    from bot.subscribers.csv_io import read_csv

    text = 'email,name\r\na@example.org,A\r\nb@example.org,B\x0cC\r\nc@example.org,C\rD\r\n\r\nd@example.org,"E\r\n'
    good, bad = read_csv(text + "e@example.org,E\r\n")
    # The quote opened on line 6 is never closed: that line is bad, and the line after
    # it is read on its own (a cell may not hold a line break), never swallowed.
    assert [g.email for g in good] == ["a@example.org", "e@example.org"]
    assert [(b.line, b.reason.split(":")[0]) for b in bad] == [
        (3, "name"),
        (4, "not a CSV record"),
        (6, "not a CSV record"),
    ]
    assert "(CR)" in bad[1].reason and "quote opened on this line is never closed" in bad[2].reason


def test_an_unbalanced_quote_is_its_lines_error_and_the_rows_after_it_are_imported(
    factory: sessionmaker[Session],
) -> None:
    text = 'email,name\nq4@example.org,"Unbalanced\ng1@example.org,G1\ng2@example.org,G2\ng3@example.org,G3\n'
    report = import_csv(factory, Settings(), text, NOW)
    assert [(e.line, e.reason.split(":")[0]) for e in report.errors] == [(2, "not a CSV record")]
    with factory() as session:
        assert sorted(s.email for s in list_subscribers(session)) == [f"g{n}@example.org" for n in (1, 2, 3)]


def test_a_csv_record_is_what_the_csv_module_reads_never_a_line_inside_a_quoted_cell(
    factory: sessionmaker[Session],
) -> None:
    """A quoted cell that holds a line break (RFC 4180) is refused with every line it
    runs over, each listed: a line inside it is never a record of its own, whatever it
    looks like."""
    text = (
        "email,name,filter\n"
        'alice@example.org,"Alice, note:\nmallory@example.org,M,*\n",gpu\n'
        "bob@example.org,Bob,*\n"
        '"carol@example.org","Carol ""C"" Shaw",snn\n'
    )
    report = import_csv(factory, Settings(), text, NOW)
    assert [(e.line, e.reason.split(":")[0]) for e in report.errors] == [
        (2, "not a CSV record"),
        (3, "inside the quoted cell opened on line 2"),
        (4, "inside the quoted cell opened on line 2"),
    ]
    assert "runs from line 2 to line 4" in report.errors[0].reason
    with factory() as session:
        found = {s.email: s.name for s in list_subscribers(session)}
    assert found == {"bob@example.org": "Bob", "carol@example.org": 'Carol "C" Shaw'}


def test_a_yes_no_setting_is_a_csv_column_read_and_written_as_yes_or_no(factory: sessionmaker[Session]) -> None:
    text = (
        "email,send_updates\n"
        "told@example.org,yes\n"
        "quiet@example.org,No\n"
        "unsaid@example.org,\n"  # left to the default
        "odd@example.org,maybe\n"
    )
    report = import_csv(factory, Settings(), text, NOW)
    assert [(e.line, e.reason) for e in report.errors] == [(5, "send_updates: 'maybe' is not yes or no")]
    with factory() as session:
        found = {s.email: s.send_updates for s in list_subscribers(session)}
    assert found == {"told@example.org": True, "quiet@example.org": False, "unsaid@example.org": True}
    exported = export_csv(factory).splitlines()
    column = exported[0].split(",").index("send_updates")
    assert {line.split(",")[0]: line.split(",")[column] for line in exported[1:]} == {
        "quiet@example.org": "no",
        "told@example.org": "yes",
        "unsaid@example.org": "yes",
    }
    again = import_csv(factory, Settings(), "email,send_updates\nquiet@example.org,yes\n", NOW)
    assert again.updated == 1
    with factory() as session:
        assert get_subscriber(session, "quiet@example.org").send_updates is True  # type: ignore[union-attr]


def test_every_yes_no_setting_is_on_every_surface(tmp_path) -> None:
    """A setting added to bot.subscribers.settings (and its field and column) is carried
    by the CLI's add and edit, --json and show, CSV import and export, and the manage page
    with no other edit: this walks each surface for each setting."""
    from bot.domain import SUBSCRIBER_SETTINGS, Subscriber, SubscriberFields
    from bot.store.schema import SubscriberRow
    from bot.subscribers.csv_io import CSV_COLUMNS
    from bot.subscribers.settings import by_action
    from bot.web.manage_view import toggles
    from tests.helpers import Cli

    assert tuple(s.name for s in SETTINGS) == SUBSCRIBER_SETTINGS
    cli = Cli(tmp_path)
    for setting in SETTINGS:
        assert setting.name in Subscriber.__dataclass_fields__ and setting.name in SubscriberFields.__dataclass_fields__
        assert setting.name in SubscriberRow.__table__.c
        assert setting.name in CSV_COLUMNS
        assert by_action(f"{setting.flag}_on") == (setting, True) and by_action(f"{setting.flag}_off") == (
            setting,
            False,
        )
        for command in ("add", "edit"):
            assert f"--{setting.flag} / --no-{setting.flag}" in cli("subscribers", command, "--help").stdout
        address = f"{setting.flag}@example.org"
        flipped = "--no-" + setting.flag if setting.default else "--" + setting.flag
        cli("subscribers", "add", address, flipped)
        shown = cli("subscribers", "list", "--json").stdout
        assert f'"{setting.name}": {str(not setting.default).lower()}' in shown
        cli("subscribers", "edit", address, ("--" if not setting.default else "--no-") + setting.flag)
        cli("subscribers", "edit", address, ("--" if setting.default else "--no-") + setting.flag)
        shown = cli("subscribers", "show", address).stdout
        said = "yes" if setting.default else "no"  # as CSV says it
        assert f"{setting.name.replace('_', ' ')} {said}" in " ".join(shown.split())
        exported = cli("subscribers", "export").stdout.splitlines()
        assert exported[0].split(",")[CSV_COLUMNS.index(setting.name)] == setting.name
        subscriber = Subscriber(1, address, "", "*", "UTC", 8, SubscriberStatus.ACTIVE, "7d", NOW, NOW)
        assert (f"{setting.flag}_off" if setting.default else f"{setting.flag}_on") in dict(toggles(subscriber))


@pytest.mark.parametrize("zone", ["posixrules", "Factory", "localtime", "posix/Europe/Berlin", "right/UTC", "../UTC"])
def test_only_a_zone_of_a_place_is_a_time_zone(zone: str) -> None:
    """The zone folder holds files ZoneInfo opens that are no zone of a place."""
    from bot.subscribers.fields import clean_timezone

    with pytest.raises(SubscriberInputError, match="is not an IANA time zone"):
        clean_timezone(zone)
    assert clean_timezone(" Europe/Berlin ") == "Europe/Berlin" and clean_timezone("UTC") == "UTC"


def test_subscribed_is_active_or_paused_and_nothing_else() -> None:
    """The one rule every stage asks (sign-up, returned mail, the manage page, the CLI)."""
    assert {s for s in SubscriberStatus if s.subscribed} == {SubscriberStatus.ACTIVE, SubscriberStatus.PAUSED}
