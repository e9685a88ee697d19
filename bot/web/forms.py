"""Subscriber endpoint: reading and guarding the manage and unsubscribe forms.

Pure functions of a request's headers and body; never touch the store.
"""

from __future__ import annotations

import hashlib
import hmac
from email import policy
from email.parser import BytesParser
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request

MAX_FORM_BYTES = 4096


def form_token(key: bytes, token: str) -> str:
    """What the manage page's forms carry: a page from elsewhere cannot know it."""
    return hmac.new(key, b"manage-form\0" + token.encode("utf-8", "replace"), hashlib.sha256).hexdigest()[:32]


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


def parse_form(content_type: str, body: bytes) -> dict[str, str]:
    """Fields of an ``application/x-www-form-urlencoded``, ``multipart/form-data``
    (RFC 8058 allows it for one-click) or ``text/plain`` body: first value each."""
    if content_type.split(";", 1)[0].strip().lower() == "multipart/form-data":
        message = BytesParser(policy=policy.HTTP).parsebytes(
            b"Content-Type: " + content_type.encode("latin-1", "replace") + b"\r\n\r\n" + body
        )
        fields: dict[str, str] = {}
        if message.is_multipart():
            for part in list(message.iter_parts())[:20]:
                name = part.get_param("name", header="content-disposition")
                if isinstance(name, str) and name not in fields:
                    payload = part.get_payload(decode=True)
                    fields[name] = payload.decode("utf-8", "replace").strip() if isinstance(payload, bytes) else ""
        return fields
    try:
        parsed = parse_qs(body.decode("utf-8", "replace").strip(), keep_blank_values=True, max_num_fields=20)
    except ValueError:  # more fields than any of our forms has: treated as an empty form
        return {}
    return {name: values[0] for name, values in parsed.items()}
