"""Subscriber endpoint: reading and guarding the forms (unsubscribe, manage, sign-up,
a library upload).

Functions of a request's headers and body; never touch the store.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import secrets
from urllib.parse import parse_qs, urlsplit

from starlette.requests import ClientDisconnect, Request

MAX_FORM_BYTES = 4096
# The sign-up and manage forms: every tag of the menu may be ticked.
MAX_CHOICES_FORM_BYTES = 32768
MAX_CHOICES_FIELDS = 300
# A reader's library uploaded on the manage page (a large Zotero export of a few thousand
# papers with abstracts; the CLI takes bigger files).
MAX_UPLOAD_BYTES = 5_000_000
CSRF_MAX_AGE_SECONDS = 4 * 3600

# Pages carry the token in their URL: never leak it in a Referer to another site, never
# cache it, never frame it, run no script at all.  The Referer policy is same-origin, not
# no-referrer: under no-referrer a browser sends "Origin: null" with every form POST,
# even to the page's own site, and the origin check could not tell our forms from others.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}
# A body that stalls this long between two chunks is given up (answered 408).
BODY_IDLE_SECONDS = 15.0


class BodyStalled(Exception):
    """The client stopped sending its request body."""


def form_token(key: bytes, token: str) -> str:
    """What the manage page's forms carry: a page from elsewhere cannot know it."""
    return hmac.new(key, b"manage-form\0" + token.encode("utf-8", "replace"), hashlib.sha256).hexdigest()[:32]


def form_token_ok(key: bytes, token: str, given: str) -> bool:
    """Whether *given* (any text a client sent) is the form token of *token*."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), form_token(key, token).encode("ascii"))


def csrf_pair(key: bytes, now: float) -> tuple[str, str]:
    """(form field, cookie) for the sign-up form: the field is ``issued.nonce.signature``,
    the cookie the nonce, so a page from elsewhere can make neither (double submit)."""
    nonce = secrets.token_urlsafe(16)
    issued = str(int(now))
    return f"{issued}.{nonce}.{_csrf_signature(key, issued, nonce)}", nonce


def csrf_ok(key: bytes, field: str, cookie: str, now: float) -> bool:
    """Whether a sign-up POST carries a field this site made in the last few hours,
    and the cookie that went with it."""
    issued, _, rest = field.partition(".")
    nonce, _, signature = rest.partition(".")
    if not (issued.isascii() and issued.isdigit() and len(issued) < 12 and nonce and cookie):
        return False
    if not 0 <= now - int(issued) <= CSRF_MAX_AGE_SECONDS:
        return False
    signed = hmac.compare_digest(signature.encode("utf-8", "replace"), _csrf_signature(key, issued, nonce).encode())
    return signed and hmac.compare_digest(nonce.encode("utf-8", "replace"), cookie.encode("utf-8", "replace"))


def _csrf_signature(key: bytes, issued: str, nonce: str) -> str:
    return hmac.new(key, f"signup-form\0{issued}\0{nonce}".encode("utf-8", "replace"), hashlib.sha256).hexdigest()[:32]


def origin_of(url: str) -> str:
    """The origin a browser sends for pages under *url* ("https://digest.example.org"):
    scheme and host in lower case, the port only when it is not the scheme's default."""
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    default = {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{host}" + (f":{port}" if port is not None and port != default else "")


def same_origin(request: Request, public_url: str) -> bool:
    """Whether a browser says this POST comes from one of our own pages.

    Our origin is *public_url*'s when it is set, never one built from the request's
    ``Host`` (anyone can send ``Host: evil.example`` with ``Origin: http://evil.example``);
    without it (one machine, no proxy), the address the request was made to.  A request
    with neither ``Sec-Fetch-Site`` nor ``Origin`` (curl, a mail provider) passes here;
    the form token still guards it.  ``Origin: null`` passes only where the browser
    itself vouches for the page (``Sec-Fetch-Site: same-origin``)."""
    return from_our_page(
        request.headers.get("sec-fetch-site"),
        request.headers.get("origin"),
        origin_of(public_url) if public_url else f"{request.url.scheme}://{request.url.netloc}".lower(),
    )


def from_our_page(site: str | None, origin: str | None, ours: str) -> bool:
    """The origin rule on the two headers a browser sets (pages cannot forge them)."""
    if site is not None and site not in ("same-origin", "none"):
        return False
    if origin is None:
        return True
    if origin == "null":
        return site in ("same-origin", "none")
    return origin_of(origin) == ours


async def read_body(request: Request, limit: int) -> bytes | None:
    """The request's body, or None once it is longer than *limit* bytes (read no further).
    Raises ``ClientDisconnect`` when the client leaves and ``BodyStalled`` when it stops
    sending for ``BODY_IDLE_SECONDS``: the app answers both without a traceback."""
    parts: list[bytes] = []
    size = 0
    chunks = aiter(request.stream())
    while True:
        try:
            async with asyncio.timeout(BODY_IDLE_SECONDS):
                chunk = await anext(chunks)
        except StopAsyncIteration:
            return b"".join(parts)
        except TimeoutError:
            raise BodyStalled from None
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)


async def discard_body(request: Request, limit: int) -> None:
    """Read the request's body and keep none of it, up to *limit* bytes: a refusal made
    from the headers then reaches a client that sends the whole body before it reads
    the answer (a browser, curl), instead of the reset a closed connection gives it."""
    size = 0
    chunks = aiter(request.stream())
    while size <= limit:
        try:
            async with asyncio.timeout(BODY_IDLE_SECONDS):
                size += len(await anext(chunks))
        except (StopAsyncIteration, TimeoutError, ClientDisconnect):
            return


def is_multipart(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "multipart/form-data"


def form_with_file(content_type: str, body: bytes, file_field: str) -> tuple[dict[str, str], bytes | None]:
    """A ``multipart/form-data`` body's text fields (first value each) and the bytes of
    the file in *file_field*, as sent (None when there is none)."""
    if not is_multipart(content_type):
        return parse_form(content_type, body), None
    fields: dict[str, str] = {}
    data: bytes | None = None
    for name, payload in multipart_parts(content_type, body, max_parts=20):
        if name == file_field and data is None:
            data = payload
        else:
            fields.setdefault(name, payload.decode("utf-8", "replace").strip())
    return fields, data


def parse_form(content_type: str, body: bytes) -> dict[str, str]:
    """Fields of an ``application/x-www-form-urlencoded``, ``multipart/form-data``
    (RFC 8058 allows it for one-click) or ``text/plain`` body: first value each."""
    return {name: values[0] for name, values in parse_form_lists(content_type, body, max_fields=20).items()}


def parse_form_lists(content_type: str, body: bytes, *, max_fields: int) -> dict[str, list[str]]:
    """Every value of every field (a form's checkboxes share a name); a body with more
    than *max_fields* fields is read as an empty form."""
    if is_multipart(content_type):
        fields: dict[str, list[str]] = {}
        for name, payload in multipart_parts(content_type, body, max_parts=max_fields):
            fields.setdefault(name, []).append(payload.decode("utf-8", "replace").strip())
        return fields
    if len(body) > MAX_CHOICES_FORM_BYTES:  # larger than any form of ours: read as an empty one
        return {}
    try:
        return parse_qs(body.decode("utf-8", "replace").strip(), keep_blank_values=True, max_num_fields=max_fields)
    except ValueError:  # more fields than any of our forms has: treated as an empty form
        return {}


def multipart_parts(content_type: str, body: bytes, *, max_parts: int) -> list[tuple[str, bytes]]:
    """(name, bytes) of the first *max_parts* named parts of a ``multipart/form-data``
    body, read by python-multipart, which finds boundaries with ``bytes.find``: linear
    and fast on any bytes (the email package's parser spent seconds on a megabyte of
    newlines).  A body that is not multipart as it says reads as no parts."""
    from python_multipart.exceptions import MultipartParseError
    from python_multipart.multipart import MultipartParser, parse_options_header

    boundary = parse_options_header(content_type)[1].get(b"boundary")
    if not boundary:
        return []
    parts: list[tuple[str, bytes]] = []
    header: list[bytes] = [b"", b""]  # the field and value being read
    disposition = b""
    chunks: list[bytes] = []

    def header_field(data: bytes, start: int, end: int) -> None:
        header[0] += data[start:end]

    def header_value(data: bytes, start: int, end: int) -> None:
        header[1] += data[start:end]

    def header_end() -> None:
        nonlocal disposition
        if header[0].strip().lower() == b"content-disposition":
            disposition = header[1]
        header[0] = header[1] = b""

    def part_data(data: bytes, start: int, end: int) -> None:
        chunks.append(data[start:end])

    def part_end() -> None:
        nonlocal disposition
        name = parse_options_header(disposition)[1].get(b"name") if disposition else None
        if name is not None:
            parts.append((name.decode("utf-8", "replace"), b"".join(chunks)))
        chunks.clear()
        disposition = b""
        if len(parts) >= max_parts:
            raise _Enough  # the rest is not read at all

    callbacks = {
        "on_header_field": header_field,
        "on_header_value": header_value,
        "on_header_end": header_end,
        "on_part_data": part_data,
        "on_part_end": part_end,
    }
    parser = MultipartParser(boundary, callbacks)  # type: ignore[arg-type]
    try:
        parser.write(body)
        parser.finalize()
    except _Enough:
        pass
    except MultipartParseError:
        return []
    return parts


class _Enough(Exception):
    """Raised inside the parser's callback once *max_parts* parts are read."""


async def form_of(request: Request, limit: int = MAX_FORM_BYTES, max_fields: int = 20) -> dict[str, list[str]] | None:
    """The form's fields (every value of each), or None when the body is too big."""
    body = await read_body(request, limit)
    return (
        None if body is None else parse_form_lists(request.headers.get("content-type", ""), body, max_fields=max_fields)
    )


def address_of(request: Request) -> str:
    """The client's IP address as uvicorn saw it (a trusted proxy's X-Forwarded-For
    included); "" when it is not an address, so no header text reaches the consent record."""
    host = request.client.host if request.client else ""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return ""
