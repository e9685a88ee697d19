"""Helpers several test modules (and the benchmarks) share: generated dumps, queued
digests, throw-away PostgreSQL schemas, the installed console script.  Test modules
never import each other or bench/; bench/ imports from here."""

from __future__ import annotations

import io
import itertools
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import uvicorn
from sqlalchemy import Subquery, select, text
from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import TagRules, load_rules
from bot.config import Settings
from bot.domain import DigestItem, EntryContent, EntryView, ParsedEntry
from bot.ingest.storing import ingest_bytes
from bot.store.bulk import allocate_ids, bulk_insert, insert_ignoring_conflicts
from bot.store.engine import transaction
from bot.store.schema import BodyItem, Digest, SubscriberRow
from bot.tools.sink import free_port

_ENTRY = (
    "A study of kernel fusion number {i} for serving large language models on GPUs\n\n"
    "Ada Lovelace, Grace Hopper, Edsger Dijkstra 2026-06-14\n\n"
    "Problem: serving is memory bound. Method: fuse attention and MLP kernels, schedule {i} batches "
    "with a KV cache that pages to host memory; $1.45\\times$ faster than the baseline on A100 and "
    "H100 parts, with https://example.org/{i} as the artifact. Results hold across models from 7B to "
    "70B parameters and across batch sizes; the code is open source.\n\n"
    "PDF\n\n"
)


# An SMTP port nothing listens on: the discard port, which no test binds (a free port
# picked for "nobody" may be bound a moment later by another worker's sink).
NOBODY_LISTENS = 9


def dump_of_size(size: int) -> bytes:
    """A well-formed text dump of distinct papers, at least *size* bytes long."""
    parts: list[str] = []
    total = i = 0
    while total < size:
        part = _ENTRY.format(i=i)
        parts.append(part)
        total += len(part)
        i += 1
    return "".join(parts).encode()


# The installed console script next to this interpreter: the command a user runs.
ROOT = Path(__file__).resolve().parent.parent
DIGESTBOT = shutil.which("digestbot", path=str(Path(sys.executable).parent)) or "digestbot"
Sized = TypeVar("Sized")
# `make soak` sets it: the heavy tests run at the sizes they were written for.
SOAK = os.environ.get("DIGESTBOT_SOAK", "") == "1"


def sized(suite: Sized, soak: Sized) -> Sized:
    """The size a heavy test runs at: *suite*, the smallest that still reaches every branch
    the test is there for (docs/testing.md, The heavy tests), or *soak* under `make soak`,
    which prints the same test's figures at full size."""
    return soak if SOAK else suite


# --- generated dumps ------------------------------------------------------------------

# Technical terms (many of them tag-rule keywords) are about one word in twelve,
# as in real abstracts: the seeds average 3-4 rule tags per entry.
TERMS = (
    "sparse attention kernel GPU LLM serving cache scheduling compiler FPGA spiking neural network "
    "accelerator quantization mixture experts routing parallelism distributed training inference "
    "secure coherence simulation reinforcement learning agent verification hardware"
).split()
FILLER = (
    "we the a of and to in for with on this that by is are our from as which results show method "
    "approach problem system design performance evaluation propose present existing novel improves "
    "across while reduces achieves compared baseline workloads study analysis framework data models "
    "model time cost large scale efficient memory bandwidth latency throughput energy pipeline cluster "
    "benchmark practical significant overhead enables provides demonstrates evaluate implement"
).split()
WORDS = FILLER * 3 + TERMS
TAGS = ["GPU", "LLM", "AI", "MoE", "FPGA", "SNN", "Compilers", "Security", "Serving", "RL"]


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


EXAMPLE_RANKER = Path(__file__).resolve().parent.parent / "examples" / "rankers" / "bm25" / "ranker.py"


@contextmanager
def example_ranker() -> Iterator[str]:
    """The example BM25 ranker (examples/rankers/bm25/) as a process of its own; its URL."""
    process = subprocess.Popen([sys.executable, str(EXAMPLE_RANKER), "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield process.stdout.readline().split()[-1]
    finally:
        process.terminate()
        process.wait(10)


def daemon_until(folder: Path, env: dict[str, str], done: Callable[[], bool], seconds: float = 90) -> str:
    """``digestbot run`` in *folder* until *done* (asked every 0.2 s) or *seconds* pass,
    then SIGTERM: it must stop cleanly (exit 0).  What it logged."""
    daemon = subprocess.Popen([DIGESTBOT, "run"], cwd=folder, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and daemon.poll() is None and not done():
            time.sleep(0.2)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=60) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
    return daemon.stderr.read() if daemon.stderr else ""


def expected_digests(
    factory: sessionmaker[Session], cfg: Settings, now: datetime, rules: TagRules
) -> dict[int, list[int]]:
    """Per active subscriber, the entry ids the definition of a digest gives at *now*: the
    best ``digest.max_entries`` of what their filter matches that they were not sent."""
    from bot.choose.select import select_for
    from bot.domain import SubscriberStatus
    from bot.store.claims import claimed_entry_ids
    from bot.store.subscribers import list_subscribers

    with factory() as session:
        out = {}
        for subscriber in list_subscribers(session, status=SubscriberStatus.ACTIVE):
            found = select_for(session, subscriber, rules, as_of=now, exclude=claimed_entry_ids(session, subscriber.id))
            out[subscriber.id] = [c.entry.id for c in found[: cfg.digest.max_entries]]
        return out


def daemon_env(folder: Path, store: str, dumps: Path, smtp_port: int, **more: str) -> dict[str, str]:
    """The environment of a ``digestbot`` process a test starts: none of the caller's
    DIGESTBOT_ variables; a SQLite store named *store* and ``var/`` in *folder*; dumps
    read from *dumps* as soon as they land; the repository's tag rules and templates;
    SMTP to 127.0.0.1:*smtp_port*.  *more* adds variables, named without the prefix
    (``watch__interval_seconds="1"``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
    env |= {
        "DIGESTBOT_DATABASE__URL": f"sqlite:///{folder / store}",
        "DIGESTBOT_PATHS__DUMP_DIR": str(dumps),
        "DIGESTBOT_PATHS__TAGS_FILE": str(ROOT / "config" / "tags.toml"),
        "DIGESTBOT_PATHS__TEMPLATES_DIR": str(ROOT / "templates"),
        "DIGESTBOT_PATHS__VAR_DIR": str(folder / "var"),
        "DIGESTBOT_SMTP__PORT": str(smtp_port),
        "DIGESTBOT_WATCH__QUIET_SECONDS": "0",
    }
    return env | {f"DIGESTBOT_{name.upper()}": value for name, value in more.items()}


def digest_item(**values: Any) -> DigestItem:
    """A ``DigestItem`` from flat values, its content's fields split off by name (as a
    test writes an entry: key, title, summary, why, ... in one place)."""
    content, rest = _content_of(values)
    return DigestItem(content=content, **rest)


def entry_view(**values: Any) -> EntryView:
    """An ``EntryView`` from flat values, as ``digest_item``."""
    content, rest = _content_of(values)
    return EntryView(content=content, **rest)


def parsed_entry(**values: Any) -> ParsedEntry:
    """A ``ParsedEntry`` from flat values, as ``digest_item``."""
    content, rest = _content_of(values)
    return ParsedEntry(content=content, **rest)


def _content_of(values: dict[str, Any]) -> tuple[EntryContent, dict[str, Any]]:
    names = {f.name for f in fields(EntryContent)}
    content = EntryContent(**{k: v for k, v in values.items() if k in names})
    return content, {k: v for k, v in values.items() if k not in names}


def settings_for(
    folder: Path, *, smtp_port: int | None = None, site: bool = False, **sections: dict[str, Any]
) -> Settings:
    """The one way a test makes its settings: the var folder (store, key, lock) in
    *folder* and the repository's templates, the rest as shipped; with *site* a public
    URL, a signing key and a sender, as the pages need; with *smtp_port* an SMTP server on
    127.0.0.1.  Each of *sections* is merged into its section, key by key."""
    values: dict[str, dict[str, Any]] = {
        "paths": {"var_dir": str(folder / "var"), "templates_dir": str(ROOT / "templates")}
    }
    if site:
        values["web"] = {"public_url": "http://digest.example.org", "signing_key": "s" * 32}
        values["sender"] = {"from_address": "digest@bot.example", "from_name": "Research Digest"}
    if smtp_port is not None:
        values["smtp"] = {"host": "127.0.0.1", "port": smtp_port}
    for name, changes in sections.items():
        values[name] = values.get(name, {}) | changes
    return Settings.model_validate(values)


def dump_text(n_entries: int, *, seed: int, start: int = 0, repos_every: int = 10) -> str:
    """A dump of *n_entries* distinct entries (numbered from *start*), about 700 bytes each."""
    rng = random.Random(seed)
    blocks = ["Filtered by: " + " × ".join(rng.sample(TAGS, 3)) + " × Clear all"]
    day = date(2026, 6, 14)
    for i in range(start, start + n_entries):
        published = (day - timedelta(days=i % 30)).isoformat()
        summary = " ".join(_sentence(rng, rng.randint(12, 25)) for _ in range(4))
        if repos_every and i % repos_every == 0:
            name = f"org{i % 977}/project-{i}"
            stars = f"{rng.randint(10, 90000):,}"
            blocks += [
                name,
                f"org{i % 977} {published} {stars} Python\n{name} Python\nA tool for {rng.choice(WORDS)}\n"
                f"{stars} {rng.randint(1, 9000):,}",
                summary,
                "Code",
            ]
        else:
            title = f"{_sentence(rng, rng.randint(5, 10))[:-1]} (study {i})"
            authors = ", ".join(
                f"Author{rng.randint(1, 5000)} Name{rng.randint(1, 5000)}" for _ in range(rng.randint(1, 6))
            )
            blocks += [title, f"{authors} {published}", summary, "PDF"]
    return "\n\n".join(blocks)


def render_dump(papers: list[tuple[str, list[str], date, str]], header: list[str] | None = None) -> str:
    blocks = []
    if header:
        blocks.append("Filtered by: " + " × ".join([*header, "Clear all"]))
    for title, authors, day, summary in papers:
        blocks += [title, f"{', '.join(authors)} {day.isoformat()}", summary, "PDF"]
    return "\n\n".join(blocks)


# Filters drawn for benchmarks and scale tests, over the shipped tag rules.
RULES = load_rules(Path(__file__).resolve().parent.parent / "config" / "tags.toml")


def filter_expressions(count: int = 200) -> list[str]:
    """*count* distinct filters, most popular first: single tags, pairs, exclusions, phrases."""
    names = sorted({t.lower() for t in TAGS} | {rule.name for rule in RULES.rules})
    out = ["*", *names]
    for a, b in itertools.combinations(names, 2):
        out += [f"{a} and {b}", f"{a} or {b}", f"{a} and not {b}"]
    out += ['"sparse attention"', '"spiking neural" or snn', '"mixture of experts" and not fpga']
    rng = random.Random(7)
    head, tail = out[: 1 + len(names)], out[1 + len(names) :]
    rng.shuffle(tail)
    return (head + tail)[:count]


# --- PostgreSQL and queued digests ---------------------------------------------------------


@contextmanager
def postgres_schema(url: str) -> Iterator[str]:
    """A fresh schema in the test database, dropped afterwards: a URL whose
    connections see only it (search_path), so tests never share tables."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE SCHEMA "{name}"'))
    try:
        yield (
            make_url(url).update_query_dict({"options": f"-csearch_path={name}"}).render_as_string(hide_password=False)
        )
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA "{name}" CASCADE'))
        admin.dispose()


@contextmanager
def postgres_template(url: str) -> Iterator[str]:
    """A database of its own the migrations brought to head, dropped afterwards: the
    template each test's store is copied from (``postgres_copy``), migrated once per test
    process instead of once per test."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from bot.store.engine import make_engine, upgrade

    name = f"tpl_{uuid.uuid4().hex[:12]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        template = make_url(url).set(database=name).render_as_string(hide_password=False)
        migrated = make_engine(template)
        upgrade(migrated)
        migrated.dispose()  # a template must have no connection when it is copied
        yield name
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def postgres_copy(url: str, template: str) -> Iterator[str]:
    """A fresh database copied from *template* (``postgres_template``), dropped afterwards."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
        conn.execute(text(f'ALTER DATABASE "{name}" SET synchronous_commit = off'))
    try:
        yield make_url(url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


DUMP = "A Paper Everyone Gets\n\nA. Author 2026-06-14\n\nSparse attention on a GPU.\n\nPDF"


def bulk_subscribers(
    session: Session, count: int, *, now: datetime, first: int = 0, filters: tuple[str, ...] = ("*",)
) -> list[int]:
    """*count* active subscribers readerN@example.org, due from midnight UTC with every
    entry they match (their filters taken in turn from *filters*), inserted in bulk."""
    ids = list(allocate_ids(session, SubscriberRow.__table__, count))
    bulk_insert(
        session,
        SubscriberRow.__table__,
        [
            {
                "id": sid,
                "email": f"reader{first + n}@example.org",
                "email_key": f"reader{first + n}@example.org",
                "name": f"Reader {first + n}",
                "filter": filters[n % len(filters)],
                "timezone": "UTC",
                "send_hour": 0,
                "status": "active",
                "backfill": "all",
                "unsubscribe_secret": f"s{sid:032d}"[:32],
                "bounces": 0,
                "created_at": now,
                "updated_at": now,
            }
            for n, sid in enumerate(ids)
        ],
    )
    return ids


def digest_row(digest_id: int, subscriber_id: int, now: datetime, **changes: Any) -> dict[str, Any]:
    """A row of the digests table for ``bulk_insert``: a scheduled digest sent at *now*
    with nothing in it, but for *changes*."""
    row: dict[str, Any] = {
        "id": digest_id,
        "subscriber_id": subscriber_id,
        "local_date": now.date(),
        "kind": "scheduled",
        "resend_of_id": None,
        "state": "sent",
        "attempts": 1,
        "next_attempt_at": now,
        "lease_owner": None,
        "lease_expires_at": None,
        "message_id": f"<digest.{digest_id}@lab.example.org>",
        "entry_count": 0,
        "pending_count": 0,
        "smtp_code": 250,
        "last_error": None,
        "planned_at": now,
        "sent_at": now,
        "body_key": None,
    }
    return row | changes


def queue_digests(factory: sessionmaker[Session], count: int, *, first: int = 0) -> None:
    """*count* subscribers, each with one queued digest carrying one entry (set up in bulk)."""
    now = datetime.now(UTC)
    ingest_bytes(factory, DUMP.encode(), name=f"scale-{first}", now=now)
    with transaction(factory) as session:
        entry_id = session.execute(text("SELECT min(id) FROM entries")).scalar_one()
        sub_ids = bulk_subscribers(session, count, now=now, first=first)
        digest_ids = list(allocate_ids(session, Digest.__table__, count))
        queued = {"kind": "manual", "state": "queued", "attempts": 0, "smtp_code": None, "sent_at": None}
        queued |= {"next_attempt_at": now - timedelta(minutes=1), "entry_count": 1, "body_key": f"scale-{entry_id}"}
        rows = [
            digest_row(did, sid, now, message_id=f"<digest.{did}.scale@example.org>", **queued)
            for did, sid in zip(digest_ids, sub_ids, strict=True)
        ]
        bulk_insert(session, Digest.__table__, rows)
        item = {"body_key": f"scale-{entry_id}", "position": 0, "entry_id": entry_id, "summary_source_id": None}
        item |= {"why": "matches everything", "tags": [], "url": "https://example.org/paper", "taste": None}
        insert_ignoring_conflicts(session, BodyItem.__table__, [item])


def digest_entry_ids(session: Session, digest_id: int) -> list[int]:
    """The entries a digest carries, in its order (its body's items)."""
    return list(
        session.scalars(
            select(BodyItem.entry_id)
            .join(Digest, Digest.body_key == BodyItem.body_key)
            .where(Digest.id == digest_id)
            .order_by(BodyItem.position)
        )
    )


def claims() -> Subquery:
    """(subscriber_id, entry_id, digest_id) of every claim: which digest carried which
    entry to whom, as the planner reads it (``bot.store.ledger``)."""
    return (
        select(
            Digest.subscriber_id.label("subscriber_id"),
            BodyItem.entry_id.label("entry_id"),
            Digest.id.label("digest_id"),
        )
        .join(BodyItem, BodyItem.body_key == Digest.body_key)
        .subquery("claims")
    )


# Run with `python -c` and (dump path, SQLite path): ingests the file into a fresh store and
# prints how far the process's peak RSS grew, as JSON (tests and bench/memory.py).
INGEST_MEMORY_PROBE = """
import json, resource, sys
from pathlib import Path
from bot.ingest.storing import ingest_file
from bot.store.engine import make_engine, sessions, upgrade
engine = make_engine("sqlite:///" + sys.argv[2]); upgrade(engine)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = ingest_file(sessions(engine), Path(sys.argv[1]), max_bytes=40_000_000)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"growth": (after - before) * 1024, "entries": result.entries, "status": str(result.status)}))
"""


class Clock:
    """A clock a test moves by hand (``clock.now = ...``), for apps that take ``clock=``."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class Server:
    """uvicorn serving the app in a thread, stopped by its should_exit flag."""

    def __init__(self, app: object, port: int | None = None) -> None:
        self.port = port or free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> httpx.Client:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=10)
        return self.client

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(10)


def wait_until_serving(proc: subprocess.Popen[str], port: int, seconds: float = 30) -> httpx.Response:
    """``digestbot serve``'s answer to /healthz once it answers (the process must stay up)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
        except httpx.TransportError:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"digestbot serve did not answer within {seconds:g} s"
            time.sleep(0.1)


def reader(subscriber_id: int, *, email: str = "reader@example.org", name: str = "Reader", filter: str = "*"):  # noqa: A002
    """An active subscriber as the render stage sees it, for tests that build digests
    without a store."""
    from bot.domain import Subscriber as SubscriberView
    from bot.domain import SubscriberStatus

    joined = datetime(2026, 6, 1, tzinfo=UTC)
    return SubscriberView(
        id=subscriber_id,
        email=email,
        name=name,
        filter=filter,
        timezone="UTC",
        send_hour=7,
        status=SubscriberStatus.ACTIVE,
        backfill="7d",
        created_at=joined,
        updated_at=joined,
        unsubscribe_secret="0123456789abcdef",
    )


def rich_digest(*, sections: bool = False) -> tuple[str, str]:
    """The mail and the web version of a digest with everything a digest can show: Top
    picks, grouped contents, papers and repositories, LaTeX and HTML summaries cut and
    whole, tags, "why" lines, revised entries, news of the reader's library, entries
    left for later, and a verdict; with *sections*, its reader's two interests."""
    from dataclasses import replace

    from bot.domain import DigestContent, EntryKind, UpdateLine
    from bot.domain.llm import Tldr
    from bot.mail.render import Renderer, web_links

    root = Path(__file__).resolve().parent.parent

    def item(n: int, **fields: object) -> DigestItem:
        values: dict[str, object] = {
            "key": f"k{n}",
            "kind": EntryKind.PAPER,
            "title": f"Entry {n}: spiking networks in $O(n \\log n)$ on an FPGA",
            "authors": ("Ada Lovelace", "Grace Hopper", "Edsger Dijkstra"),
            "published": date(2026, 6, 14),
            "summary": "Problem: memory bound. " * 30,
            "summary_type": "text/plain",
            "tags": ("snn", "fpga", "hardware"),
            # Close to a library paper: a Top pick when the model likes it too.
            "why": "snn: tag; close to: 'Spiking Neural Networks on Neuromorphic Hardware: A Survey' from your library",
            "arxiv_id": f"2606.{n:05d}",
            "doi": None,
            "links": (),
            "taste": n / 10,
        }
        values.update(fields)
        return digest_item(**values)

    items = (
        item(
            1,
            summary="<p>HTML with <code>code</code> and <a href='https://example.org'>a link</a></p>",
            summary_type="text/html",
        ),
        item(2, kind=EntryKind.REPO, arxiv_id=None, extra=(("owner", "lmcache"), ("description", "A KV cache"))),
        item(
            3,
            tldr=Tldr(
                "一个在 FPGA 上运行的脉冲网络 & 更快的内核。", "zh", "qwen2.5:7b", datetime(2026, 6, 14, tzinfo=UTC)
            ),
        ),
        *(item(n) for n in range(4, 9)),
    )
    content = DigestContent(
        digest_id=1,
        kind="scheduled",
        local_date=date(2026, 6, 15),
        subscriber=reader(7, filter="(snn and fpga) or gpu"),
        items=items,
        pending=4,
        updates=(
            UpdateLine("A revised paper", 'title was "An old title"', "https://arxiv.org/abs/2606.00001"),
            UpdateLine("A <kept> paper & its code", "code released", "https://github.com/o/r?a=1&b=2", library=True),
        ),
    )
    if sections:
        named = [replace(i, section="Spiking <FPGA>" if n < 4 else "GPUs & more") for n, i in enumerate(items)]
        content = replace(content, items=tuple(named), subscriber=reader(7, filter="A: snn and fpga; B: gpu"))
    links = web_links("https://digest.example.org", "7.AAAAAAAAAAAAAAAAAAAAAAAA")
    mailed = Renderer(root / "templates", search_url="https://arxiv.org/a/{title}", top_picks=3)
    web = Renderer(
        root / "templates", search_url="https://arxiv.org/a/{title}", fit=False, summary_chars=0, top_picks=3
    )
    context = web.context(replace(content), links)
    context.update(form_token="0" * 32, verdicts={3: "more"})
    return mailed.render(content, links).html, web.render_context(context).html


@dataclass(frozen=True)
class CliResult:
    """What one command printed and its exit code (the fields of ``CompletedProcess``)."""

    returncode: int
    stdout: str
    stderr: str


class Cli:
    """digestbot's command line for a test, run in *folder*, with a store, a dump folder
    and the shipped tag rules there (``placed``; else as the embedded defaults place them).

    A call runs ``bot.cli.main`` in this process: argv, the environment, the working
    folder, the standard streams and the root logger are set for the call and restored
    after.  ``own_process=True`` (here or per call) starts the installed ``digestbot``
    instead, for what needs a process of its own: a signal, a server, a real terminal,
    or the proof that the console script itself runs.  Every call asserts the exit code
    (*code*; None: any) and that no traceback was printed."""

    def __init__(
        self,
        folder: Path,
        env: dict[str, str] | None = None,
        *,
        own_process: bool = False,
        columns: int = 200,
        placed: bool = True,
    ) -> None:
        self.folder = folder
        self.own_process = own_process
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("DIGESTBOT_")}
        self.env["COLUMNS"] = str(columns)
        if placed:  # else the embedded defaults (var/ under the folder) or what *env* says
            self.env |= {
                "DIGESTBOT_DATABASE__URL": f"sqlite:///{folder / 'cli.sqlite3'}",
                "DIGESTBOT_PATHS__DUMP_DIR": str(folder / "dumps"),
                "DIGESTBOT_PATHS__TAGS_FILE": str(ROOT / "config" / "tags.toml"),
            }
        self.env |= env or {}

    def __call__(
        self,
        *args: str | bytes,
        code: int | None = 0,
        env: dict[str, str] | None = None,
        input: str | bytes | None = None,  # noqa: A002 - as subprocess.run names it
        own_process: bool | None = None,
    ) -> CliResult:
        environment = {**self.env, **(env or {})}
        data = input.encode() if isinstance(input, str) else input
        if self.own_process if own_process is None else own_process:
            done = subprocess.run(
                [os.fsencode(a) if isinstance(a, str) else a for a in (DIGESTBOT, *args)],
                cwd=self.folder,
                env=environment,
                input=data,
                capture_output=True,
                timeout=120,
            )
            result = CliResult(done.returncode, _text(done.stdout), _text(done.stderr))
        else:
            result = self._in_process([os.fsdecode(a) for a in args], environment, data or b"")
        assert "Traceback" not in result.stderr, result.stderr
        assert code is None or result.returncode == code, (result.returncode, result.stdout, result.stderr)
        return result

    def _in_process(self, argv: list[str], environment: dict[str, str], data: bytes) -> CliResult:
        from bot.cli import main
        from bot.cli.output import err as console_err
        from bot.cli.output import out as console_out

        saved = (dict(os.environ), os.getcwd(), sys.argv, sys.stdin)
        # A console takes COLUMNS when it is made (this process's, once): the call's here.
        widths = (console_out._width, console_err._width)
        console_out.width = console_err.width = int(environment.get("COLUMNS", "80"))
        root = logging.getLogger()
        logged = (list(root.handlers), root.level, {n: logging.getLogger(n).level for n in ("apscheduler", "uvicorn")})
        out, err = io.StringIO(), io.StringIO()
        stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="surrogateescape")
        try:
            os.environ.clear()
            os.environ.update(environment)
            os.chdir(self.folder)
            sys.argv, sys.stdin = ["digestbot", *argv], stdin
            with redirect_stdout(out), redirect_stderr(err):
                try:
                    main()
                    returncode = 0
                except SystemExit as exc:
                    returncode = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        finally:
            from bot.store.store_holders import release_all

            release_all()  # as the command's process ending would: a test process runs many
            os.environ.clear()
            os.environ.update(saved[0])
            os.chdir(saved[1])
            sys.argv, sys.stdin = saved[2], saved[3]
            console_out._width, console_err._width = widths
            for handler in list(root.handlers):
                root.removeHandler(handler)
            for handler in logged[0]:
                root.addHandler(handler)
            root.setLevel(logged[1])
            for name, level in logged[2].items():
                logging.getLogger(name).setLevel(level)
        return CliResult(returncode, out.getvalue(), err.getvalue())


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")
