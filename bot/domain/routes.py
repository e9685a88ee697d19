"""Domain: the route table.  Every URL the product serves, or writes into a mail, a
feed or a page, is one of these named routes, and is built from it: the endpoint's
pages match on ``Route.pattern``, everything that links to them fills it
(``url``, ``path``, ``below``).  No other module spells a path.  Pure; never I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote, urlsplit

_FIELD = re.compile(r"\{(\w+)\}")
_UNRESERVED = re.compile(r"[A-Za-z0-9._~-]*")  # a segment as it stands: a token, a day, a number


@lru_cache(maxsize=64)
def _fields(pattern: str) -> frozenset[str]:
    """The names of a pattern's fields."""
    return frozenset(_FIELD.findall(pattern))


def _segment(value: object) -> str:
    """*value* as one path segment: as it stands when it needs no quoting (a token, a day)."""
    text = str(value)
    return text if _UNRESERVED.fullmatch(text) else quote(text, safe="")


@dataclass(frozen=True, slots=True)
class Route:
    """A named path, in Starlette's syntax: ``/u/{token}``."""

    name: str
    pattern: str

    @property
    def prefix(self) -> str:
        """What every path of the route starts with: ``/u/``."""
        return self.pattern.partition("{")[0]

    def path(self, **values: object) -> str:
        """The route's path with *values* in its fields (each quoted as one segment)."""
        if values.keys() != _fields(self.pattern):
            raise TypeError(f"route {self.name!r} takes {sorted(_fields(self.pattern))}, not {sorted(values)}")
        return self.pattern.format_map({name: _segment(value) for name, value in values.items()})

    def url(self, public_url: str, **values: object) -> str:
        """The absolute URL under the endpoint's public address (a mail's or a feed's link)."""
        return public_url.rstrip("/") + self.path(**values)

    def below(self, route: Route, **values: object) -> str:
        """This route's path after *route*'s (which it extends), with *values* for the fields
        that come after: what a digest appends to its reader's web-version address."""
        if not self.pattern.startswith(route.pattern + "/"):
            raise ValueError(f"route {self.name!r} does not extend {route.name!r}")
        return Route(self.name, self.pattern[len(route.pattern) :]).path(**values)


UNSUBSCRIBE = Route("unsubscribe", "/u/{token}")
MANAGE = Route("manage", "/m/{token}")
FEED = Route("feed", "/f/{token}.atom")
# Never served: the seed of a feed's stable Atom id, which a reader's token must not change.
FEED_IDENTITY = Route("feed_identity", "/f/{subscriber_id}")
WEB_VERSIONS = Route("web_versions", "/d/{token}")  # what a digest's own links extend
WEB_VERSION = Route("web_version", "/d/{token}/{day}")  # also {day}.bib: every entry's BibTeX
WEB_VERSION_PART = Route("web_version_part", "/d/{token}/{day}/{ref}")  # {ref}.bib: one entry's BibTeX
RATING = Route("rating", "/d/{token}/{day}/{ref}/{verdict}")
# Served before RATING, whose pattern its paths also fit (no verdict is named "zotero").
ZOTERO_SAVE = Route("zotero_save", "/d/{token}/{day}/{ref}/zotero")
SIGNUP = Route("signup", "/subscribe")
CONFIRMATION = Route("confirmation", "/c/{token}")
HEALTH = Route("health", "/healthz")
METRICS = Route("metrics", "/metrics")

ROUTES = (
    UNSUBSCRIBE,
    MANAGE,
    FEED,
    FEED_IDENTITY,
    WEB_VERSIONS,
    WEB_VERSION,
    WEB_VERSION_PART,
    RATING,
    ZOTERO_SAVE,
    SIGNUP,
    CONFIRMATION,
    HEALTH,
    METRICS,
)
BY_NAME = {route.name: route for route in ROUTES}
# The routes whose first field is a reader's signed token (a returned mail may quote one).


def base_path(public_url: str) -> str:
    """The path the endpoint is served under (behind a proxy, maybe not the root), which a
    page's own links start with: they then work whatever host the page was reached by."""
    return urlsplit(public_url).path.rstrip("/")
