"""Subscriber endpoint: a reader's own Atom feed, ``/f/TOKEN.atom``.

One feed entry per paper their recent digests carried (a feed app lists, marks
read and opens papers one by one; one entry per digest would be the mail again, as
one long item), newest digest first, for the last ``FEED_DAYS`` days and at most
``FEED_ENTRIES`` papers.  Each entry's id names the paper, not the digest, so a
reader's feed program never shows a paper twice.  The answer carries an ETag and
Last-Modified from the digests it lists, so a feed program polling every few
minutes costs a 304.  Reads only; never sends, never decides who may see what
(``bot.web.site.with_reader`` checks the token first).
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from email.utils import format_datetime, parsedate_to_datetime
from html import escape
from xml.etree import ElementTree as ET  # noqa: N817 - the name the standard library's own docs use

from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from bot.choose.filters import filter_fault, sections_of, shown_filter
from bot.config import Settings
from bot.domain import DigestContent, DigestItem, DigestKind, DigestState, Subscriber, SubscriberStatus
from bot.domain.links import primary_url
from bot.domain.routes import FEED, FEED_IDENTITY, MANAGE, WEB_VERSION, ZOTERO_SAVE
from bot.domain.text import one_line
from bot.mail.framing import tldr_html
from bot.mail.prose import summary_of, title_text
from bot.mail.why import reader_why
from bot.store.contents import digest_contents
from bot.store.digests import list_digests
from bot.web.forms import SECURITY_HEADERS
from bot.web.site import Site, with_reader

FEED_DAYS = 30
FEED_ENTRIES = 200
ATOM = "http://www.w3.org/2005/Atom"
# What a feed entry's <summary> holds of the abstract: a feed program's preview of it.
FEED_SUMMARY_CHARACTERS = 600
# What XML 1.0 cannot carry at all, even escaped (a dump may hold any of it).
UNSUBSCRIBED_FEED = "You unsubscribed: this feed ends here. Your manage page can subscribe you again.\n"
NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


@dataclass(frozen=True, slots=True)
class FeedDigest:
    """A sent digest as the feed lists it: when it went out, and what it carried."""

    sent_at: datetime
    content: DigestContent


# An entity tag in If-None-Match: weak or strong, its quoted opaque part (RFC 9110, 8.8.3).
_ENTITY_TAG = re.compile(r'(?:W/)?"[^"]*"')


@dataclass(frozen=True, slots=True)
class Validators:
    etag: str
    last_modified: datetime | None

    def headers(self) -> dict[str, str]:
        found = {"ETag": self.etag}
        if self.last_modified is not None:
            found["Last-Modified"] = format_datetime(self.last_modified.astimezone(UTC), usegmt=True)
        return found

    def unchanged_for(self, if_none_match: str | None, if_modified_since: str | None) -> bool:
        """Whether a conditional GET with these headers gets a 304 (RFC 9110: an
        If-None-Match present decides alone)."""
        if if_none_match is not None:
            if if_none_match.strip() == "*":
                return True
            # The weak comparison (RFC 9110, 13.1.2): W/"x" and "x" are the same tag here.
            ours = self.etag.removeprefix("W/")
            return any(tag.removeprefix("W/") == ours for tag in _ENTITY_TAG.findall(if_none_match))
        if if_modified_since is None or self.last_modified is None:
            return False
        try:
            since = parsedate_to_datetime(if_modified_since)
        except (TypeError, ValueError, IndexError):
            return False
        if since.tzinfo is None:
            return False
        return self.last_modified.replace(microsecond=0) <= since


def feed_title(title: str, key: str) -> str:
    """An entry's title on one line, what XML 1.0 cannot carry left out (an XML parser
    would turn a carriage return into a line feed): its key when nothing is left."""
    for text in (title_text(title), key):
        line = " ".join(NOT_XML.sub("", text).split())
        if line:
            return line
    return "Untitled"


def feed_entry_id(key: str) -> str:
    """A paper's id in every reader's feed: stable, opaque, a URN (RFC 4287 4.2.6)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"digestbot:entry:{key}").urn


class PersonalFeeds:
    def __init__(self, settings: Settings, read_only: sessionmaker[Session]) -> None:
        self.settings, self.read_only = settings, read_only

    def recent(self, subscriber: Subscriber, now: datetime) -> list[FeedDigest]:
        """The subscriber's digests sent in the last ``FEED_DAYS`` days, newest first,
        holding at most ``FEED_ENTRIES`` papers between them (blocking: run it in a thread)."""
        since = now - timedelta(days=FEED_DAYS)
        with self.read_only() as session:
            rows = [
                row
                for row in list_digests(session, subscriber_id=subscriber.id, state=DigestState.SENT)
                if row.kind is not DigestKind.RESEND and row.sent_at is not None and row.sent_at >= since
            ]
            rows.sort(key=lambda row: (row.sent_at, row.id), reverse=True)
            contents = digest_contents(session, [row.id for row in rows])
        listed: list[FeedDigest] = []
        papers = 0
        for row in rows:
            content = contents.get(row.id)
            if content is None or not content.items or row.sent_at is None:
                continue
            if papers + len(content.items) > FEED_ENTRIES and listed:
                break
            listed.append(FeedDigest(row.sent_at, content))
            papers += len(content.items)
        return listed

    @staticmethod
    def validators(digests: list[FeedDigest]) -> Validators:
        """What a conditional GET compares: the digests listed, and when the newest went out."""
        listed = ",".join(f"{d.content.digest_id}@{d.sent_at.isoformat()}" for d in digests)
        tag = hashlib.sha256(f"feed-1|{listed}".encode()).hexdigest()[:32]
        return Validators(f'"{tag}"', max((d.sent_at for d in digests), default=None))

    def atom(self, subscriber: Subscriber, token: str, digests: list[FeedDigest]) -> bytes:
        """The feed document (UTF-8 XML)."""
        public = self.settings.web.public_url
        name = self.settings.sender.from_name or "digestbot"
        feed = ET.Element("feed", xmlns=ATOM)
        ET.SubElement(feed, "id").text = uuid.uuid5(
            uuid.NAMESPACE_URL, FEED_IDENTITY.url(public, subscriber_id=subscriber.id)
        ).urn
        ET.SubElement(feed, "title").text = feed_name(name, subscriber)
        ET.SubElement(feed, "subtitle").text = "What your recent digests carried, one entry per paper."
        updated = max((d.sent_at for d in digests), default=subscriber.created_at)
        ET.SubElement(feed, "updated").text = _stamp(updated)
        ET.SubElement(ET.SubElement(feed, "author"), "name").text = name
        ET.SubElement(feed, "link", rel="self", type="application/atom+xml", href=FEED.url(public, token=token))
        ET.SubElement(feed, "link", rel="related", type="text/html", href=MANAGE.url(public, token=token))
        ET.SubElement(feed, "link", rel="alternate", type="text/html", href=feed_home(public, token, digests))
        ET.SubElement(feed, "generator").text = "digestbot"
        search = self.settings.digest.search_url
        for digest in digests:
            day = digest.content.local_date.isoformat()
            for ref, item in enumerate(digest.content.items, start=1):
                entry = ET.SubElement(feed, "entry")
                ET.SubElement(entry, "id").text = feed_entry_id(item.key)
                ET.SubElement(entry, "title").text = feed_title(item.content.title, item.key)
                ET.SubElement(entry, "updated").text = _stamp(entry_time(item, digest.sent_at))
                ET.SubElement(
                    entry, "link", rel="alternate", type="text/html", href=primary_url(item.content, search, item.url)
                )
                ET.SubElement(
                    entry,
                    "link",
                    rel="via",
                    type="text/html",
                    href=f"{WEB_VERSION.url(public, token=token, day=day)}#e{ref}",
                )
                for author in item.content.authors[:20]:
                    ET.SubElement(ET.SubElement(entry, "author"), "name").text = author
                if item.section:  # the reader's interest it was shown under, first
                    ET.SubElement(entry, "category", term=item.section, label=f"Your interest: {item.section}")
                for tag in item.tags:
                    ET.SubElement(entry, "category", term=tag)
                # A feed program's preview shows the summary: the paper's abstract, and the
                # why line in the content, after it.
                summary = summary_of(item.content, 0)
                ET.SubElement(entry, "summary", type="text").text = summary_of(
                    item.content, FEED_SUMMARY_CHARACTERS
                ).text
                why = f'<p class="why"><em>{escape(reader_why(item.why, item.section))}</em></p>'
                save = ""
                if digest.content.zotero_save:
                    saving = ZOTERO_SAVE.url(public, token=token, day=day, ref=ref)
                    ET.SubElement(entry, "link", rel="related", type="text/html", title="Save to Zotero", href=saving)
                    save = f'<p><a href="{escape(saving)}">Save to Zotero</a></p>'
                ET.SubElement(entry, "content", type="html").text = f"{tldr_html(item)}{summary.html}{why}{save}"
        for element in feed.iter():
            if element.text:
                element.text = NOT_XML.sub("", element.text)
            for attribute, value in element.attrib.items():
                element.set(attribute, NOT_XML.sub("", value))
        return b'<?xml version="1.0" encoding="utf-8"?>\n' + bytes(ET.tostring(feed, encoding="utf-8"))


def _stamp(moment: datetime) -> str:
    """RFC 3339, as Atom's date constructs want it."""
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


class FeedPage:
    def __init__(self, site: Site) -> None:
        self.site = site
        self.feeds = PersonalFeeds(site.settings, site.read_only)

    def routes(self) -> list[Route]:
        return [Route(FEED.pattern, self.feed, methods=["GET"])]

    @with_reader
    async def feed(self, request: Request, subscriber: Subscriber) -> Response:
        if subscriber.status is SubscriberStatus.UNSUBSCRIBED:
            # Gone on purpose: feed programs stop polling a 410, and what they were sent
            # stays out of anyone's reach who has the address.  Subscribing again from
            # the manage page brings the feed back.
            return PlainTextResponse(UNSUBSCRIBED_FEED, 410, headers={**SECURITY_HEADERS, "Cache-Control": "no-store"})
        feeds = self.feeds
        digests = await run_in_threadpool(feeds.recent, subscriber, self.site.now())
        validators = feeds.validators(digests)
        headers = {**SECURITY_HEADERS, **validators.headers(), "Cache-Control": "private, max-age=300"}
        if validators.unchanged_for(request.headers.get("if-none-match"), request.headers.get("if-modified-since")):
            return Response(status_code=304, headers=headers)
        body = await run_in_threadpool(feeds.atom, subscriber, request.path_params["token"], digests)
        return Response(body, media_type="application/atom+xml; charset=utf-8", headers=headers)


def feed_name(list_name: str, subscriber: Subscriber) -> str:
    """The feed's title: the list's name and whose papers they are (a feed app lists
    many feeds; "your papers" named none of them)."""
    if subscriber.name:  # never the address: a feed app may sync its titles elsewhere
        return one_line(f"{list_name}: papers for {subscriber.name}")[:120]
    interests = [s.name for s in sections_of(subscriber.filter)] if filter_fault(subscriber.filter) is None else []
    about = ", ".join(interests) if interests else shown_filter(subscriber.filter)
    return one_line(f"{list_name}: your papers on {about}" if about != "*" else f"{list_name}: every new paper")[:120]


def entry_time(item: DigestItem, sent_at: datetime) -> datetime:
    """An entry's time: the day its paper or repository was published, when it says one
    and that is not after it was sent; else when its digest went out."""
    published = item.content.published
    if published is None:
        return sent_at
    return min(datetime.combine(published, time(), tzinfo=UTC), sent_at)


def feed_home(public: str, token: str, digests: list[FeedDigest]) -> str:
    """What a feed app opens as the feed's own page (newsboat's OPML export): the newest
    digest's web version, else the manage page."""
    newest = max(digests, key=lambda d: d.sent_at, default=None)
    if newest is None:
        return MANAGE.url(public, token=token)
    return WEB_VERSION.url(public, token=token, day=newest.content.local_date.isoformat())
