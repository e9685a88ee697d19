"""Taste: ranking by the reader's own papers.  ``library`` reads what reference
managers export into ``LibraryPaper`` values (pure); the SQL is in
``bot/store/library.py``.
"""
