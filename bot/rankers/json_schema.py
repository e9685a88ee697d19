"""Prints the ranker protocol's JSON Schema (``docs/ranker-protocol.schema.json``):
``python -m bot.rankers.json_schema > docs/ranker-protocol.schema.json``."""

from __future__ import annotations

import json

from bot.rankers.protocol import json_schema

if __name__ == "__main__":
    print(json.dumps(json_schema(), indent=2, sort_keys=True))
