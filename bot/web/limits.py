"""Subscriber endpoint: a per-client budget for requests that name no subscriber.

A token is checked with its share of one grouped read and one HMAC, so a forged
one costs little; a client that keeps sending them (a scanner, a flood) uses up
its budget and its misses are answered 429 until the budget refills.  Requests with
valid tokens never spend the budget and are never refused for it: a provider's burst
of real one-click unsubscribes is never limited, nor is a reader behind the same
address as an attacker.  Pure bookkeeping; never touches the store.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict

# Clients remembered at once; the least recently seen are forgotten first.
MAX_CLIENTS = 10_000


class TooManyMisses(Exception):
    """The client used up its budget of tokens that name no subscriber."""


def client_key(host: str) -> str:
    """Who a limit counts: the IPv4 address, or the /64 network of an IPv6 one (one
    household or server holds a whole /64); "" for anything that is not an address."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return ""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is None:
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address.ipv4_mapped or address) if isinstance(address, ipaddress.IPv6Address) else str(address)


class MissBudget:
    """Token buckets of misses (404s) per client: *per_second* refill, *burst* capacity."""

    def __init__(self, per_second: float, burst: int) -> None:
        self.per_second, self.burst = per_second, burst
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # client -> (tokens, at)

    def _tokens(self, client: str, now: float) -> float:
        tokens, at = self._buckets.get(client, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - at) * self.per_second)

    def exhausted(self, client: str, now: float) -> bool:
        """Whether *client* has no misses left (then answer 429 and look nothing up)."""
        return self.per_second > 0 and self._tokens(client, now) < 1

    def check(self, client: str, now: float) -> None:
        """Raise ``TooManyMisses`` when *client* has no misses left."""
        if self.exhausted(client, now):
            raise TooManyMisses

    def miss(self, client: str, now: float) -> None:
        """A request of *client* named nobody: ``TooManyMisses`` when it had no misses
        left, else one spent.  Asked after the look-up, never before it: a valid token
        is answered whatever others sent from the same address (one proxy's address
        is every reader's behind it)."""
        self.check(client, now)
        self.spend(client, now)

    def spend(self, client: str, now: float) -> None:
        """Count one miss of *client*."""
        if self.per_second <= 0:
            return
        self._buckets[client] = (self._tokens(client, now) - 1, now)
        self._buckets.move_to_end(client)
        while len(self._buckets) > MAX_CLIENTS:
            self._buckets.popitem(last=False)
