"""The subscriber stage: every subscriber field validated at input and saved
(``subscriptions``), CSV import and export (``csv_io``), double opt-in sign-up
(``optin``).  SQL lives in ``bot.store``; the shells (``bot.cli``, ``bot.web``) call
these.  Never renders a page or plans a digest."""
