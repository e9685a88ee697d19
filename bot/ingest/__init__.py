"""Ingest stage: bytes from the dump folder and feeds into the store, each entry once.

``formats`` (one parser per format behind one detector), ``identity`` (when two
listings are one entry: pure rules), ``storing`` (parse outside, store inside one
transaction) and ``watcher`` (what is new in the folder and the feeds).  Never
renders, plans or sends.
"""
