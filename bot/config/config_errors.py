"""Configuration errors in our words: one line naming where the bad value came from
(the file or the environment variable), the key, and what it must be; and the reader
of password and key files, whose errors are of that kind.  Never shows a secret's
value and never mentions pydantic."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from pydantic import BaseModel

ENV_PREFIX = "DIGESTBOT_"


class ConfigError(Exception):
    """The configuration file or environment holds a value we cannot use."""


MAX_SECRET_FILE_BYTES = 16384  # any password or key is far shorter; /dev/zero is not a secret


def read_secret_file(path: Path, setting: str) -> str:
    """The stripped text of a password or key file; ``ConfigError`` naming *setting* and
    the file (never its content) when it cannot be read, is too long or is not UTF-8."""
    try:
        # O_NONBLOCK: a FIFO named here must not hang the command; only a regular file is read.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot read {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{setting}: {path} is not a regular file (a FIFO, a device or a folder)")
        try:
            data = handle.read(MAX_SECRET_FILE_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"{setting}: cannot read {path}: {exc.strerror}") from None
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise ConfigError(f"{setting}: {path} is longer than {MAX_SECRET_FILE_BYTES // 1024} KB")
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"{setting}: {path} is not UTF-8 text") from None


def unparsable_variable(message: str) -> str:
    section = message.partition('field "')[2].partition('"')[0]
    prefix = f"{ENV_PREFIX}{section}__".upper()
    names = sorted(name for name in os.environ if name.upper().startswith(prefix))
    if not names:
        return f"environment: {message}"
    key = names[0][len(prefix) :].lower()
    return f'environment variable {names[0]} ({section}.{key}): must be JSON, e.g. ["a", "b"] for a list'


_SECRET_KEYS = {"password", "signing_key"}


def explain(error: Any, path: Path | None, settings: type[BaseModel]) -> str:
    """One line in our words: where the bad value came from (the environment variable
    or the file), the key, and what it must be."""
    loc = tuple(str(part) for part in error["loc"])
    where = ".".join(loc)
    variable = (ENV_PREFIX + "__".join(loc)).upper()
    from_env = next((name for name in os.environ if name.upper() == variable), None)
    if from_env:
        return f"environment variable {from_env} ({where}): {_what_is_wrong(error, loc, settings)}"
    return f"{path or 'defaults'}: {where}: {_what_is_wrong(error, loc, settings)}"


def _what_is_wrong(error: Any, loc: tuple[str, ...], settings: type[BaseModel]) -> str:
    kind, context = error["type"], error.get("ctx") or {}
    shown = "" if loc[-1] in _SECRET_KEYS else f", not {str(error.get('input'))[:60]!r}"
    if kind == "extra_forbidden":
        return f"unknown {'key' if len(loc) > 1 else 'section'}{_closest(loc, settings)}"
    simple = {
        "int_parsing": "must be a whole number",
        "int_from_float": "must be a whole number",
        "float_parsing": "must be a number",
        "bool_parsing": "must be true or false",
        "string_type": "must be text",
        "list_type": "must be a list",
        "dict_type": "must be a table",
        "model_type": "must be a table",
    }
    if kind in simple:
        return simple[kind] + shown
    bounds = {
        "greater_than_equal": "at least {ge}",
        "less_than_equal": "at most {le}",
        "greater_than": "more than {gt}",
        "less_than": "less than {lt}",
    }
    if kind in bounds:
        return "must be " + bounds[kind].format(**context) + shown
    if kind == "literal_error":
        return f"must be one of {context.get('expected', '')}" + shown
    if kind == "string_pattern_mismatch" and loc[-1] == "default_backfill":
        return "must be 'all', 'none' or a number of days such as '7d'" + shown
    message = str(error["msg"])
    return message.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def _closest(loc: tuple[str, ...], settings: type[BaseModel]) -> str:
    import difflib

    model: type[BaseModel] = settings
    for part in loc[:-1]:
        annotation = model.model_fields[part].annotation if part in model.model_fields else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return ""
        model = annotation
    close = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else ""
