"""Subscriber endpoint: the app (``app``), its form rules (``forms``) and the server (``server``)."""

from __future__ import annotations

from bot.web.app import create_app
from bot.web.server import serve

__all__ = ["create_app", "serve"]
