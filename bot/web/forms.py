"""Subscriber endpoint: reading and guarding the forms (unsubscribe, manage, sign-up,
a library upload).

Functions of a request's headers and body; never touch the store.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from email import policy
from email.parser import BytesParser
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request

MAX_FORM_BYTES = 4096
# The sign-up and manage forms: every tag of the menu may be ticked.
MAX_CHOICES_FORM_BYTES = 32768
MAX_CHOICES_FIELDS = 300
# A reader's library uploaded on the manage page (a large Zotero export of a few thousand
# papers with abstracts; the CLI takes bigger files).
MAX_UPLOAD_BYTES = 5_000_000
CSRF_MAX_AGE_SECONDS = 4 * 3600

# Pages carry the token in their URL: never leak it in a Referer, never cache it,
# never frame it, run no script at all.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}


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


def same_origin(request: Request, public_url: str) -> bool:
    """Whether a browser says this POST comes from our own page.  A request with
    neither header (curl, old browsers) passes here; the form token still guards it."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    ours = {f"{request.url.scheme}://{request.url.netloc}"}
    if public_url:
        parts = urlsplit(public_url)
        ours.add(f"{parts.scheme}://{parts.netloc}")
    return origin in ours


async def read_body(request: Request, limit: int) -> bytes | None:
    """The request's body, or None once it is longer than *limit* bytes (read no further)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return body


def form_with_file(content_type: str, body: bytes, file_field: str) -> tuple[dict[str, str], bytes | None]:
    """A ``multipart/form-data`` body's text fields (first value each) and the bytes of
    the file in *file_field*, as sent (None when there is none)."""
    if content_type.split(";", 1)[0].strip().lower() != "multipart/form-data":
        return parse_form(content_type, body), None
    message = BytesParser(policy=policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1", "replace") + b"\r\n\r\n" + body
    )
    fields: dict[str, str] = {}
    data: bytes | None = None
    for part in list(message.iter_parts())[:20] if message.is_multipart() else []:
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if not isinstance(name, str) or not isinstance(payload, bytes):
            continue
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
    if content_type.split(";", 1)[0].strip().lower() == "multipart/form-data":
        message = BytesParser(policy=policy.HTTP).parsebytes(
            b"Content-Type: " + content_type.encode("latin-1", "replace") + b"\r\n\r\n" + body
        )
        fields: dict[str, list[str]] = {}
        if message.is_multipart():
            for part in list(message.iter_parts())[:max_fields]:
                name = part.get_param("name", header="content-disposition")
                if isinstance(name, str):
                    payload = part.get_payload(decode=True)
                    value = payload.decode("utf-8", "replace").strip() if isinstance(payload, bytes) else ""
                    fields.setdefault(name, []).append(value)
        return fields
    try:
        return parse_qs(body.decode("utf-8", "replace").strip(), keep_blank_values=True, max_num_fields=max_fields)
    except ValueError:  # more fields than any of our forms has: treated as an empty form
        return {}


async def form_of(request: Request, limit: int = MAX_FORM_BYTES, max_fields: int = 20) -> dict[str, list[str]] | None:
    """The form's fields (every value of each), or None when the body is too big."""
    body = await read_body(request, limit)
    return (
        None if body is None else parse_form_lists(request.headers.get("content-type", ""), body, max_fields=max_fields)
    )
