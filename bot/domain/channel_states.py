"""Domain: the chat services a channel posts to and the states of one part of a
channel's digest (``bot.channels.part_rules`` decides every change).  Pure; never I/O."""

from __future__ import annotations

from enum import StrEnum


class Service(StrEnum):
    SLACK = "slack"
    DISCORD = "discord"
    MATTERMOST = "mattermost"
    TELEGRAM = "telegram"
    MATRIX = "matrix"


class PartState(StrEnum):
    PENDING = "pending"  # not posted yet: the next attempt posts it
    SENDING = "sending"  # its request is on the wire now
    SENT = "sent"  # the service answered that it took it
    FAILED = "failed"  # refused for good (a 4xx, a redirect): never posted again by itself
    UNKNOWN = "unknown"  # went out, no answer seen: the service may have it; only `resend` posts it again
