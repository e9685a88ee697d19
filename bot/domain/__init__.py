"""Domain types shared by every stage: small frozen dataclasses, no behaviour
beyond what their fields imply (mail that came back in ``returned``, a reader's
library, ratings and stored models in ``taste``; every stage imports them from
here).  Must never import the store or do I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import date, datetime, timedelta
from enum import StrEnum
from pathlib import Path

from bot.domain.llm import Tldr
from bot.domain.returned import Returned as Returned  # bot.domain is where every stage imports them from
from bot.domain.returned import ReturnEvent as ReturnEvent
from bot.domain.returned import ReturnKind as ReturnKind
from bot.domain.taste import LibraryPaper as LibraryPaper
from bot.domain.taste import RatedEntry as RatedEntry
from bot.domain.taste import StoredModel as StoredModel
from bot.domain.taste import StoredVocabulary as StoredVocabulary

# The window of the web's request limits (``web.signups_per_hour``,
# ``subscribers.library_uploads_per_hour``): sign-ups and uploads share the store's request table.
REQUEST_WINDOW = timedelta(hours=1)


class EntryKind(StrEnum):
    PAPER = "paper"
    REPO = "repo"


class DigestState(StrEnum):
    QUEUED = "queued"
    SENDING = "sending"
    SENT = "sent"
    RETRY_WAIT = "retry_wait"
    FAILED = "failed"
    EMPTY = "empty"  # nothing matched that day (and empty digests are not sent)
    CANCELLED = "cancelled"  # the subscriber left before it went out; entries released
    # It went on the wire and no answer was seen (a connection lost or a wait run out after
    # the final dot, a worker stopped or killed meanwhile): the reader may have it.  Never
    # sent again by itself; an operator's resend does (docs/digests.md, "unknown").
    UNKNOWN = "unknown"


class DigestKind(StrEnum):
    SCHEDULED = "scheduled"
    MANUAL = "manual"
    RESEND = "resend"


class TagOrigin(StrEnum):
    HEADER = "header"  # a dump's "Filtered by:" line
    CATEGORY = "category"  # a feed entry's category
    RULE = "rule"  # config/tags.toml


class SourceStatus(StrEnum):
    INGESTED = "ingested"
    DUPLICATE = "duplicate"  # same bytes as an already ingested source
    FAILED = "failed"
    NOT_MODIFIED = "not_modified"  # a feed URL answered 304


class Announce(StrEnum):
    """arXiv's announce_type; anything else is treated as NEW."""

    NEW = "new"
    CROSS = "cross"
    REPLACE = "replace"
    REPLACE_CROSS = "replace-cross"


def match_text(summary: str, extra: Mapping[str, str] | Iterable[tuple[str, str]]) -> str:
    """The text that filters' phrases and tag rules look at besides the title:
    the summary, preceded by a repository's one-line description."""
    pairs = extra.items() if isinstance(extra, Mapping) else extra
    description = next((value for name, value in pairs if name == "description"), None)
    return f"{description}\n{summary}" if description else summary


@dataclass(frozen=True, slots=True)
class EntryContent:
    """What a paper or repository says of itself, from the parser that read it to the
    template that shows it: every entry type below carries one, by composition.  A field
    here is a column of ``entries`` by the same name (``bot.store.entry_content`` maps
    both ways from these fields); ``bot.ingest.resolve`` says what a later listing does
    to each (a field it does not name: the later listing's value, when it has one)."""

    kind: EntryKind
    title: str
    authors: tuple[str, ...]
    published: date | None
    summary: str
    summary_type: str = "text/plain"  # or "text/html" for feed content
    links: tuple[str, ...] = ()
    arxiv_id: str | None = None  # without version suffix
    doi: str | None = None  # lower-cased
    extra: tuple[tuple[str, str], ...] = ()  # e.g. stars, forks, language; stored sorted by name

    def extra_value(self, name: str) -> str | None:
        return next((value for key, value in self.extra if key == name), None)

    def fields_besides(self, named: frozenset[str]) -> tuple[str, ...]:
        """This content's field names that *named* does not hold: what a stage's rule
        for each field leaves to its rule for any other (a field added later, or one a
        subclass in a test adds).  Worked out once per type and set of names."""
        known = _FIELDS_BESIDES.get((type(self), named))
        if known is None:
            known = _FIELDS_BESIDES[type(self), named] = tuple(f.name for f in fields(self) if f.name not in named)
        return known


_FIELDS_BESIDES: dict[tuple[type, frozenset[str]], tuple[str, ...]] = {}


@dataclass(frozen=True, slots=True)
class ParsedEntry:
    """One paper or repository as a source presented it, before identity is resolved:
    its content, and where and how the source listed it."""

    content: EntryContent
    line: int = 0  # 1-based line of the entry's first block in its source
    tags: tuple[str, ...] = ()  # categories the source gave this entry
    repo: str | None = None  # "owner/name" as written
    announce: Announce = Announce.NEW


@dataclass(frozen=True, slots=True)
class ParsedSource:
    """What a parser made of one dump or feed document."""

    format: str  # "dump" | "rss" | "atom" | "jsonfeed"
    entries: tuple[ParsedEntry, ...]
    header_tags: tuple[str, ...] = ()  # tags every entry of the source carries
    title: str = ""
    skipped: tuple[str, ...] = ()  # one line per item left out (a feed item with no title and no text)


@dataclass(frozen=True, slots=True)
class IngestResult:
    """The outcome of ingesting one file or fetched document."""

    path: str
    status: SourceStatus
    source_id: int | None = None
    entries: int = 0  # distinct entries in the source
    new: int = 0  # entries the store had never seen
    updated: int = 0  # known entries whose stored fields changed
    error: str | None = None
    duplicate_of: int | None = None


@dataclass(frozen=True, slots=True)
class FileStamp:
    """Enough of a file's stat to tell whether the watcher has seen this version."""

    path: Path
    size: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class EntryView:
    """An entry as the store returns it to the CLI and later stages."""

    id: int
    key: str
    content: EntryContent
    tags: tuple[str, ...]
    first_seen_source_id: int | None
    first_seen_at: datetime
    tag_origins: dict[str, frozenset[str]] = field(default_factory=dict)  # case-folded name -> origins
    summary_source_id: int | None = None  # whose appearance carries the current summary


class SubscriberStatus(StrEnum):
    PENDING = "pending"  # signed up, not yet confirmed: receives nothing but the confirmation
    ACTIVE = "active"
    PAUSED = "paused"
    UNSUBSCRIBED = "unsubscribed"
    BOUNCED = "bounced"

    @property
    def subscribed(self) -> bool:
        """On the list: receiving digests, or paused and free to resume (not pending,
        unsubscribed or bounced)."""
        return self in (SubscriberStatus.ACTIVE, SubscriberStatus.PAUSED)


# The yes/no settings a subscriber has (bot.subscribers.settings describes each): a field
# of Subscriber and of SubscriberFields and a column of the subscribers table, each by
# the same name.
SUBSCRIBER_SETTINGS: tuple[str, ...] = ("send_updates",)


@dataclass(frozen=True, slots=True)
class Subscriber:
    """A subscriber as every stage sees it; all fields valid (a stored value that is not
    reads as a safe one, and *fault* says so)."""

    id: int
    email: str
    name: str
    filter: str
    timezone: str
    send_hour: int
    status: SubscriberStatus
    backfill: str
    created_at: datetime
    updated_at: datetime
    unsubscribe_secret: str = field(repr=False, default="")
    send_updates: bool = True  # "Updated since we sent it" in their digests
    cadence: str = "daily"  # bot.plan.cadence: daily | weekdays | weekly:<day>
    taste_threshold: float = 0.1  # model score above which an entry is ``liked`` (bot.taste.model)
    language: str | None = None  # the TL;DRs' language they chose (BCP 47); None: [llm]'s first
    # A stored setting digestbot never writes (bot.domain.stored), read as a safe one: the
    # reader is never planned while it is there.
    fault: str | None = None


@dataclass(frozen=True, slots=True)
class SubscriberFields:
    """Validated input for creating or changing a subscriber; None = leave as is."""

    email: str
    name: str | None = None
    filter: str | None = None
    timezone: str | None = None
    send_hour: int | None = None
    status: SubscriberStatus | None = None
    backfill: str | None = None
    cadence: str | None = None
    send_updates: bool | None = None


@dataclass(frozen=True, slots=True)
class ConsentEvent:
    """One step of how a subscriber came to be subscribed, as ``subscribers show`` proves it."""

    event: str  # signup | confirm | operator
    at: datetime
    address: str  # the email address it was for, as given then
    page: str  # the page's URL, or the CLI command
    client: str  # the browser's IP address ("" from the CLI)
    detail: str


@dataclass(frozen=True, slots=True)
class UpsertCounts:
    """What saving a batch of subscriber fields did."""

    created: int
    updated: int
    unchanged: int  # known addresses whose given fields already held those values


@dataclass(frozen=True, slots=True)
class DigestItem:
    """One entry as a digest carries it (summary pinned when the digest was planned)."""

    key: str
    content: EntryContent
    tags: tuple[str, ...]
    why: str
    url: str = ""  # where the title links; empty: work it out from the content
    taste: float | None = None  # the reader's taste score when planned (bot.taste.model); None: no model
    section: str = ""  # the reader's interest it is shown under; "" for a filter of one interest
    tldr: Tldr | None = None  # a model's one line on it, in the digest's language, as it was sent


@dataclass(frozen=True, slots=True)
class UpdateLine:
    """An entry a subscriber already received, revised since (an arXiv ``replace``), or
    a paper in their library with news (a new version, a code or model link)."""

    title: str  # as it is now
    note: str  # what changed: 'title was "…"', "abstract revised", "code released"
    url: str
    library: bool = False  # listed under "Your library"


@dataclass(frozen=True, slots=True)
class EntryNews:
    """What happened to a paper lately that a reader keeping it would want told."""

    entry_id: int
    title: str
    arxiv_id: str | None
    revised_at: datetime | None  # its latest arXiv ``replace`` that changed title or abstract
    revision_note: str | None
    linked_at: datetime | None  # when it was given a code or model link it had not had
    links: tuple[str, ...]  # its links, the newest last


@dataclass(frozen=True, slots=True)
class DigestContent:
    """Everything the render stage needs for one message; no database behind it."""

    digest_id: int
    kind: str  # scheduled | manual | resend
    local_date: date
    subscriber: Subscriber
    items: tuple[DigestItem, ...]
    pending: int = 0  # matching entries left for the next digest
    resend_of: int | None = None
    updates: tuple[UpdateLine, ...] = ()  # entries sent before and revised since
    zotero_save: bool = False  # "Save to Zotero" beside each entry: the reader's key may write
    zotero_broken: bool = False  # the footer says once that their Zotero connection broke


@dataclass(frozen=True, slots=True)
class RenderedDigest:
    subject: str
    text: str
    html: str


@dataclass
class DeliverReport:
    sent: int = 0
    retrying: int = 0
    failed: int = 0
    bounced: int = 0
    cancelled: int = 0
    lost_lease: int = 0
    unknown: int = 0  # went on the wire, no answer seen: never sent again by itself
    given_back: int = 0  # claimed, never on the wire: due again at once (a stop)
    unrecorded: int = 0  # answered, but the store could not be written: held to be written later

    def add(self, other: DeliverReport) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(frozen=True, slots=True)
class ScheduledDay:
    """What the store holds for one subscriber's local day: its scheduled digest."""

    digest_id: int
    state: DigestState
    nothing_at: datetime | None  # when the planner first found nothing new that day
    checked_at: datetime | None  # when it last looked again


# Digests in these states are settled: nothing will send them again (an unknown one's late
# answer may still be recorded by the worker that waited for it).
SETTLED_STATES = frozenset(
    {DigestState.SENT, DigestState.FAILED, DigestState.CANCELLED, DigestState.EMPTY, DigestState.UNKNOWN}
)


@dataclass(frozen=True, slots=True)
class Removed:
    """What ``database.keep_days`` has removed so far: the digests planned before
    ``before``, ``digests`` of them in all."""

    before: datetime
    digests: int
