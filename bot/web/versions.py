"""Subscriber endpoint: the web version of a sent digest, and its BibTeX.

``/d/TOKEN/DATE`` shows the subscriber's digest of that local date (the last one
sent) with every summary whole and "more like this" / "less like this" buttons
(``bot.web.feedback`` takes what they post); ``/d/TOKEN/DATE.bib`` is the BibTeX
of all its entries, ``/d/TOKEN/DATE/N.bib`` of entry N.  Reads only; never sends, never
decides who may see what (``app`` checks the token first).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.domain import DigestContent, DigestState, Subscriber
from bot.mail.bibtex import bibtex_entry, bibtex_of
from bot.mail.mailer import rule_keywords
from bot.mail.render import Renderer, web_links
from bot.store.contents import digest_content
from bot.store.digests import list_digests
from bot.store.feedback import entry_ids_of, verdicts_on
from bot.store.retention import removed

_DAY = re.compile(r"(\d{4}-\d{2}-\d{2})(\.bib)?")
_REF = re.compile(r"([1-9]\d{0,3})\.bib")


@dataclass(frozen=True, slots=True)
class Wanted:
    day: date
    bibtex: bool
    ref: int | None  # one entry's BibTeX; None: the page, or every entry


def wanted(day: str, ref: str | None) -> Wanted | None:
    """What a ``/d/`` path asks for; None for anything else (answered 404)."""
    found = _DAY.fullmatch(day)
    if found is None or (ref is not None and found.group(2)):
        return None
    try:
        when = date.fromisoformat(found.group(1))
    except ValueError:
        return None
    if ref is None:
        return Wanted(when, bool(found.group(2)), None)
    number = _REF.fullmatch(ref)
    return Wanted(when, True, int(number.group(1))) if number else None


class WebVersions:
    def __init__(self, settings: Settings, reader: sessionmaker[Session]) -> None:
        self.settings, self.reader = settings, reader
        digest = settings.digest
        self.renderer = Renderer(
            settings.paths.templates_dir,
            search_url=digest.search_url,
            remote_images=digest.remote_images,
            summary_chars=0,
            keywords=rule_keywords(settings.paths.tags_file),
            fit=False,
            top_picks=digest.top_picks,
        )

    def content(self, subscriber: Subscriber, day: date) -> DigestContent | None:
        """The last digest of *day* sent to *subscriber* (blocking: run it in a thread)."""
        with self.reader() as session:
            rows = list_digests(session, subscriber_id=subscriber.id, local_date=day)
            sent = next((row for row in rows if row.state is DigestState.SENT), None)
            return digest_content(session, sent.id) if sent is not None else None

    def removed(self, day: date) -> bool:
        """Whether retention removed the digests of *day* (``database.keep_days``)."""
        with self.reader() as session:
            gone = removed(session)
        return gone is not None and day < gone.before.date()

    def page(self, content: DigestContent, token: str, form_token: str, verdicts: dict[int, str]) -> str:
        """The page, each entry with its "more like this" / "less like this" buttons
        (*verdicts*: what the subscriber said already, by the entry's number)."""
        context = self.renderer.context(content, web_links(self.settings.web.public_url, token))
        context.update(form_token=form_token, verdicts=verdicts)
        context["feed_url"] = f"{self.settings.web.public_url.rstrip('/')}/f/{token}.atom"
        return self.renderer.render_context(context).html

    def verdicts(self, subscriber: Subscriber, content: DigestContent) -> dict[int, str]:
        """The subscriber's feedback on the digest's entries, by number (blocking)."""
        with self.reader() as session:
            ids = entry_ids_of(session, [item.key for item in content.items])
            said = verdicts_on(session, subscriber.id, ids.values())
        refs = enumerate(content.items, start=1)
        return {ref: said[ids[item.key]] for ref, item in refs if ids.get(item.key) in said}

    def bibtex(self, content: DigestContent, ref: int | None) -> str | None:
        search = self.settings.digest.search_url
        if ref is None:
            return bibtex_of(content.items, search)
        if ref > len(content.items):
            return None
        return bibtex_entry(content.items[ref - 1], search)
