"""Returned mail: bounces, complaints and unsubscribe mails read from ``inbox.url``.

``classify`` (pure) says what one message is, ``mailboxes`` reads and marks messages
in a Maildir or over IMAP, and ``inbox_reading`` records each outcome in the store before it
marks the message as processed.
"""
