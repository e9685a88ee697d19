"""The one exception type parsers raise for bad input."""

from __future__ import annotations

MAX_MESSAGE = 400


def quoted(text: str, limit: int = 80) -> str:
    """*text* as a repr for an error message, shortened: input can be one 10 MB line."""
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


class SourceFormatError(ValueError):
    """Bad input, located: ``str()`` gives ``file:line: what was expected``."""

    def __init__(self, name: str, line: int, message: str) -> None:
        self.name = name
        self.line = line
        # A safety net for messages that quote input without quoted(): one line, bounded.
        self.message = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…"
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.name}:{self.line}" if self.line else self.name
        return f"{where}: {self.message}"
