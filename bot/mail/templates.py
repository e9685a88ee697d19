"""Message stage: how the digest templates are read, and each compiled once per process.

Never renders, never reads the store: ``bot.mail.render`` renders with what this makes.
"""

from __future__ import annotations

import threading

from jinja2 import BaseLoader, BytecodeCache, Environment, StrictUndefined, select_autoescape
from jinja2.bccache import Bucket


class _CompiledTemplates(BytecodeCache):
    """Each digest template compiled once per process, for every renderer made from it (one
    per mailer, site and command: compiling cost more than rendering a digest).  Jinja checks
    a template's source against the code kept, so an edited template is compiled anew."""

    KEPT = 256  # templates; a deployment has a few

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}
        self._lock = threading.Lock()  # the site renders in its thread pool

    def load_bytecode(self, bucket: Bucket) -> None:
        with self._lock:
            code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: Bucket) -> None:
        code = bucket.bytecode_to_string()
        with self._lock:
            if len(self._code) >= self.KEPT:
                del self._code[next(iter(self._code))]
            self._code[bucket.key] = code


_COMPILED = _CompiledTemplates()


def digest_environment(loader: BaseLoader | None = None) -> Environment:
    """How the digest templates are read: the renderer reads them so, and bot.mail.personal_slots
    parses them so to check what they do with a reader's own values."""
    return Environment(
        loader=loader,
        autoescape=select_autoescape(enabled_extensions=("html.j2",), default_for_string=False),
        undefined=StrictUndefined,
        bytecode_cache=_COMPILED,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
