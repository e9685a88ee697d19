"""Subscriber service: the time zones a reader picks from, and the names they may give.

The zones offered are the IANA database's zones of places (``zone.tab``: one or more per
country, by region), and UTC; a legacy or alias name (``US/Pacific``, ``Asia/Calcutta``,
``Europe/Kiev``) is still taken, and stored as the zone it names (``tzdata.zi``'s links).
Reads the tzdata package's files once; never writes anything.
"""

from __future__ import annotations

import zoneinfo
from functools import cache
from importlib import resources

UTC = "UTC"


def _lines(name: str) -> list[str]:
    try:
        return resources.files("tzdata.zoneinfo").joinpath(name).read_text(encoding="utf-8").splitlines()
    except (ModuleNotFoundError, OSError):  # no tzdata package: the system's zones alone
        return []


@cache
def places() -> dict[str, tuple[str, ...]]:
    """Region ("America", "Europe") -> the zones of places in it, by name."""
    found: dict[str, list[str]] = {}
    for line in _lines("zone.tab"):
        fields = line.split("\t")
        if line.startswith("#") or len(fields) < 3:
            continue
        found.setdefault(fields[2].split("/", 1)[0], []).append(fields[2])
    if not found:  # the system's zones, Area/Location ones
        for name in zoneinfo.available_timezones():
            if "/" in name and not name.startswith(("Etc/", "SystemV/", "posix/", "right/")):
                found.setdefault(name.split("/", 1)[0], []).append(name)
    return {region: tuple(sorted(set(names))) for region, names in sorted(found.items())}


@cache
def _links() -> dict[str, str]:
    """Alias -> the zone it names (``L target alias`` lines), followed to the end."""
    links = {fields[2]: fields[1] for fields in (line.split() for line in _lines("tzdata.zi")) if fields[:1] == ["L"]}
    for alias, target in list(links.items()):
        seen = {alias}
        while target in links and target not in seen:
            seen.add(target)
            target = links[target]
        links[alias] = target
    return links


@cache
def offered() -> frozenset[str]:
    return frozenset({UTC, *(zone for zones in places().values() for zone in zones)})


def canonical(name: str) -> str:
    """The zone *name* is stored as: itself when it is offered, else the zone an alias
    names (``US/Pacific`` -> ``America/Los_Angeles``), else itself."""
    if name in offered():
        return name
    return _links().get(name, name)
