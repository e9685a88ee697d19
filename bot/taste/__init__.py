"""Taste: ranking by the reader's own papers and feedback.  ``library`` reads what
reference managers export into ``LibraryPaper`` values (pure); ``features`` and
``model`` make the TF-IDF vectors and a reader's model (pure); ``ranking`` uses them
in a planning pass, ``explain`` for ``preview`` and ``tags test``; ``service`` keeps
libraries, feedback and models.  The SQL is in ``bot/store/library.py``,
``bot/store/feedback.py`` and ``bot/store/taste.py``.  Importing this package loads
nothing numerical.
"""

# How a why line names the library paper an entry is closest to ("close to: '<title>'
# from your library"): after the filter's reasons, never one of them.
CLOSE_TO = "close to"
