"""The manage page's library upload under abuse: files shaped to be slow, too many
uploads, more papers than a library holds.  The file is read in a process of its own
(``bot.web.upload_process``); the page says what happened, in one line."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from bot.config import Settings
from bot.store.library import library_of
from bot.store.subscribers import get_subscriber
from bot.subscribers.fields import clean_fields
from bot.subscribers.subscriptions import save
from bot.tokens import make_token, signing_key
from bot.web import create_app
from tests.conftest import ROOT
from tests.helpers import Server, settings_for

NOW = datetime(2026, 11, 25, 12, tzinfo=UTC)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return settings_for(
        tmp_path,
        web={"public_url": "https://digest.example.org", "signing_key": "u" * 32},
        subscribers={"library_max_papers": 5, "library_uploads_per_hour": 3},
    )


@pytest.fixture
def page(factory: sessionmaker[Session], settings: Settings) -> Iterator[tuple[httpx.Client, str, str, int]]:
    """(client, the manage page's path, its form token, the subscriber's id)."""
    save(factory, settings, [clean_fields("ada@example.org")], NOW)
    with factory() as session:
        ada = get_subscriber(session, "ada@example.org")
    assert ada is not None
    path = f"/m/{make_token(signing_key(settings), ada.id, ada.unsubscribe_secret)}"
    with Server(create_app(settings, factory, clock=lambda: NOW)) as client:
        form = re.search(r'name="form" value="([^"]+)"', client.get(path).text)
        assert form is not None
        yield client, path, form.group(1), ada.id


def _upload(client: httpx.Client, path: str, form: str, data: bytes) -> httpx.Response:
    return client.post(
        f"{path}?form={form}", data={"form": form}, files={"library": ("my.bib", data, "text/plain")}, timeout=120
    )


def test_more_papers_than_a_library_holds_are_named_not_added(
    page: tuple[httpx.Client, str, str, int], factory: sessionmaker[Session]
) -> None:
    client, path, form, ada = page
    answer = _upload(client, path, form, "".join(f"2401.{n:05d}\n" for n in range(8)).encode())
    assert answer.status_code == 200, answer.text
    assert (
        "Added 5 papers" in answer.text and "3 papers were not added: a library holds at most 5 papers" in answer.text
    )
    with factory() as session:
        assert len(library_of(session, ada)) == 5


def test_a_reader_uploads_a_few_files_an_hour(page: tuple[httpx.Client, str, str, int]) -> None:
    client, path, form, _ = page
    codes = [_upload(client, path, form, b"2401.00001\n").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    assert "You uploaded 3 files in the last hour" in _upload(client, path, form, b"2401.00002\n").text


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"@" * 2_000_000, "more than 80,000 @ signs"),
        (b"\xff\xfe\x00", "not UTF-8 text (byte 0)"),
        (b"x" + b"\n" * 4_000_000, "not an arXiv id or a DOI"),  # a quadratic reader would freeze the server
        (b'{"items": 5}', "no CSL-JSON items"),
        (b"[" + b"1" * 5000 + b"]", "a number too long to read"),
    ],
)
def test_a_file_that_cannot_be_read_is_one_line_on_the_page(
    page: tuple[httpx.Client, str, str, int], data: bytes, said: str
) -> None:
    client, path, form, _ = page
    answer = _upload(client, path, form, data)
    assert answer.status_code in (200, 400) and said in answer.text, answer.text[-2000:]
    assert "Traceback" not in answer.text


MB = 1_000_000


def _multipart(payload: bytes, boundary: str = "----x") -> tuple[str, bytes]:
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="form"\r\n\r\nabc\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="library"; filename="x.bib"\r\n\r\n'
    ).encode()
    return f"multipart/form-data; boundary={boundary}", head + payload + f"\r\n--{boundary}--\r\n".encode()


@pytest.mark.slow
def test_the_form_readers_run_in_linear_time() -> None:
    """1 MB of each risky shape through the readers of every form (urlencoded and
    multipart), within ten times a normal 1 MB upload, newlines and boundaries that a
    quadratic multipart reader takes seconds on among them."""
    import time

    from bot.web.forms import form_with_file, parse_form_lists

    def timed(content_type: str, body: bytes) -> float:
        started = time.perf_counter()
        parse_form_lists(content_type, body, max_fields=300)
        form_with_file(content_type, body, "library")
        return time.perf_counter() - started

    normal = _multipart(b"@article{k, title={A paper about things}, year={2024}}\n" * (MB // 56))
    baseline = min(timed(*normal) for _ in range(3))
    urlencoded = "application/x-www-form-urlencoded"
    shapes = {
        "newlines": _multipart(b"\n" * MB),
        "CRLFs": _multipart(b"\r\n" * (MB // 2)),
        "dashes": _multipart(b"-" * MB),
        "almost boundaries": _multipart(b"\r\n------" * (MB // 8)),
        "many parts": (
            "multipart/form-data; boundary=b",
            b"--b\r\nContent-Disposition: form-data; name=a\r\n\r\nx\r\n" * (MB // 50),
        ),
        "headers without end": ("multipart/form-data; boundary=b", b"--b\r\n" + b"X: y\r\n" * (MB // 6)),
        "no boundary": ("multipart/form-data", b"\r\n" * (MB // 2)),
        "ampersands": (urlencoded, b"&" * MB),
        "equals": (urlencoded, b"=" * MB),
        "fields": (urlencoded, b"tag=a&" * (MB // 6)),
        "percents": (urlencoded, b"%" * MB),
        "escapes": (urlencoded, b"%41" * (MB // 3)),
        "plus signs": (urlencoded, b"+" * MB),
    }
    slow = {}
    for shape, (content_type, body) in shapes.items():
        spent = min(timed(content_type, body) for _ in range(2))
        if spent > 10 * baseline + 0.5:
            slow[shape] = round(spent, 3)
    assert not slow, f"a normal 1 MB upload reads in {baseline:.4f} s: {slow}"


def test_the_reading_process_gives_way_before_it_imports_anything_heavy() -> None:
    """The child that reads an upload starts at normal priority: everything it imports
    before it lowers its priority competes with the endpoint's one-click answers.  It
    imports nothing of the endpoint, the store or the mail, and lowers its priority
    before it imports the reader itself."""
    import subprocess

    from bot.web.upload_process import CHILD

    bib = b"@article{k, title = {A paper}, author = {A. Author}, year = {2024}}\n"
    done = subprocess.run(
        [CHILD[0], "-X", "importtime", *CHILD[1:]], input=bib, capture_output=True, timeout=60, check=True
    )
    assert b'"papers"' in done.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.decode().splitlines() if "|" in line]
    heavy = [name for name in imported if name.split(".")[0] in {"sqlalchemy", "starlette", "jinja2", "uvicorn"}]
    assert heavy == [] and not any(name.startswith(("bot.web", "bot.store", "bot.mail")) for name in imported)
    source = (ROOT / "bot" / "taste" / "library_process.py").read_text()
    assert source.index("    give_way()") < source.index("from bot.taste.library import")


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="no SCHED_IDLE scheduling policy on this system")
def test_the_reading_process_runs_only_on_a_core_nothing_else_wants() -> None:
    """While it reads, the child is under the idle scheduling policy at nice 19: a
    one-click answer that wakes on its core takes the core at once (at nice 19 alone it
    waited for the rest of the reader's time slice)."""
    import subprocess

    from bot.web.upload_process import CHILD

    child = subprocess.Popen(CHILD, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while os.sched_getscheduler(child.pid) != os.SCHED_IDLE and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.sched_getscheduler(child.pid) == os.SCHED_IDLE
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == 19
        out, _ = child.communicate(b"@article{k, title = {A paper}, year = {2024}}\n", timeout=60)
    finally:
        child.kill()
        child.wait()
    assert b'"papers"' in out
