"""Mail stage: a digest's content into the bytes of its message.

``render`` (content → subject, text, HTML), ``message`` (the MIME message and its
header values), ``splice`` (the same message for many subscribers of one body) and
``mailer`` (a claimed batch into ready-to-send messages).  Never sends, never records.
"""
