"""Running the bot: ``scheduler`` (the daemon's jobs on APScheduler) and ``roles``
(who may plan and who may deliver when several processes share a store).
Thin shells over the service functions; no business logic of their own.
"""
