"""The one exception type parsers raise for bad input."""

from __future__ import annotations


class SourceFormatError(ValueError):
    """Bad input, located: ``str()`` gives ``file:line: what was expected``."""

    def __init__(self, name: str, line: int, message: str) -> None:
        self.name = name
        self.line = line
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.name}:{self.line}" if self.line else self.name
        return f"{where}: {self.message}"
