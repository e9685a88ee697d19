"""Store: what a restored store is given from the one it replaces (``restores`` made
it): the digests sent since with what they carried, unsubscribes and bounces, purges
done again, the digests in flight settled when there is no store to ask, and the
unsubscribe journal.  SQL only, on the restored file before it is put in place.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from bot.domain import SubscriberStatus
from bot.store.copies import JOURNAL_TABLE, SAVES_TABLE, column_list, connect, read_only_uri
from bot.store.restores import RestoreReport
from bot.store.store_errors import StoreError

_IN_FLIGHT = "('" + "', '".join(sorted({"queued", "sending", "retry_wait"})) + "')"
_STAYS_OFF = (SubscriberStatus.UNSUBSCRIBED.value, SubscriberStatus.BOUNCED.value)
# What the replaced store recorded that a restore carries forward, in the order their keys need.
_CATALOGUE = ("sources", "entries", "entry_appearances", "tags", "entry_tags")


def carry_forward(restored: Path, live: Path, report: RestoreReport) -> None:
    """What the replaced store (*live*) recorded since the backup, into the *restored* one.

    For every digest the replaced store knows, its row and body win (it is newer),
    with the entries and sources they name and the revisions it told.  Subscribers unsubscribed or
    bounced there stay so, and those purged there (ids it gave out, gone from it) are
    purged again.  Subscribers added since the backup are not brought back: they are
    in the replaced store, which stays beside this one; the report names them, and
    those whose settings are as they were at the backup again."""
    with closing(connect(restored)) as connection:
        connection.execute("PRAGMA foreign_keys=OFF")
        connection.execute("ATTACH DATABASE ? AS live", (read_only_uri(live),))
        with connection:
            report.digests_carried = _carry_sends(connection)
            report.statuses_kept = _carry_subscriber_facts(connection)
        report.added_since, report.changed_since = _lost_since(connection)
        gone = (
            "SELECT id FROM main.subscribers WHERE id <= (SELECT coalesce(max(id), 0) FROM live.subscribers) "
            "AND id NOT IN (SELECT id FROM live.subscribers)"
        )
        purged = [row[0] for row in connection.execute(gone)]
        connection.execute("DETACH DATABASE live")
        connection.execute("PRAGMA foreign_keys=ON")
        with connection:
            for subscriber_id in purged:
                _purge(connection, subscriber_id)
        report.purged_again = len(purged)
        problems = connection.execute("PRAGMA foreign_key_check").fetchall()
        if problems:
            raise StoreError(f"{restored}: the restored store has rows that name missing rows: {problems[:3]}")
    report.carried = True


def _lost_since(connection: sqlite3.Connection) -> tuple[list[str], list[str]]:
    """Readers the replaced store added since the backup (the backup never had them), and
    those whose settings it changed since (the backup's are back)."""
    added = [
        row[0]
        for row in connection.execute(
            "SELECT email FROM live.subscribers WHERE id > (SELECT coalesce(max(id), 0) FROM main.subscribers) "
            "ORDER BY id"
        )
    ]
    changed = [
        row[0]
        for row in connection.execute(
            "SELECT l.email FROM live.subscribers l JOIN main.subscribers m ON m.id = l.id "
            "WHERE l.updated_at > m.updated_at AND l.status = m.status ORDER BY l.id"
        )
    ]
    return added, changed


def _carry_sends(connection: sqlite3.Connection) -> int:
    """The replaced store's digests (of subscribers the backup has), their bodies, the
    revisions told them, and the catalogue rows they name; how many digests."""
    for table in _CATALOGUE:
        columns = column_list(table)
        connection.execute(f"INSERT OR IGNORE INTO main.{table} ({columns}) SELECT {columns} FROM live.{table}")
    known = "SELECT id FROM main.subscribers"
    carried = f"SELECT id FROM live.digests WHERE subscriber_id IN ({known})"
    connection.execute(f"DELETE FROM main.digests WHERE id IN ({carried})")
    columns = column_list("digests")
    count = connection.execute(
        f"INSERT INTO main.digests ({columns}) SELECT {columns} FROM live.digests WHERE subscriber_id IN ({known})"
    ).rowcount
    columns = column_list("body_items")
    connection.execute(f"INSERT OR IGNORE INTO main.body_items ({columns}) SELECT {columns} FROM live.body_items")
    columns = column_list("revision_notices")
    connection.execute(
        f"INSERT OR REPLACE INTO main.revision_notices ({columns}) SELECT {columns} FROM live.revision_notices "
        f"WHERE subscriber_id IN ({known})"
    )
    return int(count)


def _carry_subscriber_facts(connection: sqlite3.Connection) -> int:
    """Watermarks and bounce counts from the replaced store; its unsubscribed and
    bounced readers stay so (how many changed back); its applied requests."""
    connection.execute(
        "UPDATE main.subscribers SET (planned_through, planned_key, bounces) = "
        "(SELECT l.planned_through, l.planned_key, l.bounces FROM live.subscribers l "
        "WHERE l.id = main.subscribers.id) WHERE id IN (SELECT id FROM live.subscribers)"
    )
    off = ", ".join(f"'{status}'" for status in _STAYS_OFF)
    kept = connection.execute(
        "UPDATE main.subscribers SET status = (SELECT l.status FROM live.subscribers l "
        f"WHERE l.id = main.subscribers.id) WHERE status NOT IN ({off}) AND id IN "
        f"(SELECT id FROM live.subscribers WHERE status IN ({off}))"
    ).rowcount
    columns = column_list("applied_unsubscribes")
    connection.execute(
        f"INSERT OR IGNORE INTO main.applied_unsubscribes ({columns}) SELECT {columns} FROM live.applied_unsubscribes"
    )
    return int(kept)


def _purge(connection: sqlite3.Connection, subscriber_id: int) -> None:
    """As ``subscribers remove --purge`` did: the reader, what refers to them (foreign
    keys on), and the bodies no other digest shows."""
    keys = [
        row[0]
        for row in connection.execute(
            "SELECT DISTINCT body_key FROM digests WHERE subscriber_id = ? AND body_key IS NOT NULL", (subscriber_id,)
        )
    ]
    connection.execute("DELETE FROM subscribers WHERE id = ?", (subscriber_id,))
    for key in keys:
        connection.execute(
            "DELETE FROM body_items WHERE body_key = ? AND NOT EXISTS (SELECT 1 FROM digests WHERE body_key = ?)",
            (key, key),
        )


def settle_in_flight(store: Path, report: RestoreReport, note: str) -> None:
    """Without the replaced store, a digest on its way when the backup was taken may
    have gone out since: unknown (a resend sends it), never sent again by itself."""
    with closing(connect(store)) as connection, connection:
        report.in_flight_unknown = [
            row[0] for row in connection.execute(f"SELECT id FROM digests WHERE state IN {_IN_FLIGHT} ORDER BY id")
        ]
        connection.execute(
            f"UPDATE digests SET state = 'unknown', lease_owner = NULL, lease_expires_at = NULL, last_error = ? "
            f"WHERE state IN {_IN_FLIGHT}",
            (note,),
        )


def journal_from_backup(store: Path, journal: Path | None, report: RestoreReport) -> None:
    """The backup's unsubscribe requests go back into the journal file (those received
    since stay there), and every request the restored store has not applied is
    pending again, so the next start applies it."""
    if journal is None:
        return
    with closing(connect(journal)) as connection:
        connection.execute(
            f"CREATE TABLE IF NOT EXISTS {JOURNAL_TABLE} (id VARCHAR(32) NOT NULL PRIMARY KEY, "
            "subscriber_id INTEGER NOT NULL, received_at DATETIME NOT NULL, applied BOOLEAN NOT NULL)"
        )
        connection.execute("ATTACH DATABASE ? AS restored", (store.resolve().as_uri(),))
        with connection:
            columns = column_list(JOURNAL_TABLE)
            connection.execute(
                f"INSERT OR IGNORE INTO main.{JOURNAL_TABLE} ({columns}) SELECT {columns} FROM restored.{JOURNAL_TABLE}"
            )
            connection.execute(f"DELETE FROM restored.{JOURNAL_TABLE}")
            connection.execute(
                f"UPDATE main.{JOURNAL_TABLE} SET applied = "
                f"(id IN (SELECT request_id FROM restored.applied_unsubscribes))"
            )
            report.requests_to_apply = connection.execute(
                f"SELECT count(*) FROM main.{JOURNAL_TABLE} WHERE NOT applied"
            ).fetchone()[0]
            _saves_from_backup(connection)
        connection.execute("DETACH DATABASE restored")


def _saves_from_backup(connection: sqlite3.Connection) -> None:
    """The backup's "Save to Zotero" asks go back into the journal too; an ask is pending
    again unless the restored store holds its save (taking one again adds nothing)."""
    connection.execute(
        f"CREATE TABLE IF NOT EXISTS {SAVES_TABLE} (id VARCHAR(32) NOT NULL PRIMARY KEY, subscriber_id INTEGER "
        "NOT NULL, entry_id INTEGER NOT NULL, received_at DATETIME NOT NULL, applied BOOLEAN NOT NULL)"
    )
    if connection.execute("SELECT 1 FROM restored.sqlite_master WHERE name = ?", (SAVES_TABLE,)).fetchone() is None:
        return  # a backup from before digestbot kept any
    columns = column_list(SAVES_TABLE)
    connection.execute(
        f"INSERT OR IGNORE INTO main.{SAVES_TABLE} ({columns}) SELECT {columns} FROM restored.{SAVES_TABLE}"
    )
    connection.execute(f"DELETE FROM restored.{SAVES_TABLE}")
    connection.execute(
        f"UPDATE main.{SAVES_TABLE} SET applied = EXISTS (SELECT 1 FROM restored.zotero_saves s "
        f"WHERE s.subscriber_id = {SAVES_TABLE}.subscriber_id AND s.entry_id = {SAVES_TABLE}.entry_id)"
    )
