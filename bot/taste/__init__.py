"""Taste: ranking by the reader's own papers and feedback.  ``library`` reads what
reference managers export into ``LibraryPaper`` values (pure); ``features`` and
``model`` make the TF-IDF vectors and a reader's model (pure); ``ranking`` uses them
in a planning pass, ``explain`` for ``preview`` and ``tags test``; ``libraries`` keeps
libraries and feedback, ``training`` the models.  The SQL is in ``bot/store/library.py``,
``bot/store/feedback.py`` and ``bot/store/taste.py``.  Importing this package loads
nothing numerical.

The numerical part (numpy, SciPy, scikit-learn) is the ``taste`` extra: without it
everything works but ranking by a library or feedback (``liked``, Top picks); readers
keep their libraries and feedback, and ``ranking_installed`` says why nothing is ranked.
"""

from __future__ import annotations

import functools
import importlib.util
import logging

# One sentence wherever ranking is asked for but cannot be done.
EXTRA_MISSING = (
    "ranking by a reader's library and feedback needs the taste extra, which is not installed: "
    "pip install 'digestbot[taste]'"
)

# How a why line names the library paper an entry is closest to ("close to: '<title>'
# from your library"): after the filter's reasons, never one of them.
CLOSE_TO = "close to"


def ranking_installed() -> bool:
    """Whether the taste extra (numpy, SciPy, scikit-learn) can be imported."""
    return all(importlib.util.find_spec(name) is not None for name in ("numpy", "scipy", "sklearn"))


@functools.cache
def say_extra_missing() -> None:
    """Log ``EXTRA_MISSING`` once per process, the first time ranking is asked for."""
    logging.getLogger(__name__).warning("%s; digests go out unranked", EXTRA_MISSING)
