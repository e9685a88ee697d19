"""Zotero stage: a reader's Zotero library connected, synced by version into their
library papers, and saved to from their digest (docs/zotero.md).  ``api_shapes`` reads and
writes the Web API's shapes (pure), ``api`` asks it, ``connection``, ``library_sync``,
``saves`` and ``zotero_pass`` are the services.  Never renders or sends mail."""
