"""Store stage: every SQL statement of digestbot lives in this package.

``schema`` declares the tables (Alembic migrations mirror it), ``engine``
opens databases and runs migrations, ``entries`` and ``sources`` hold the
queries.  Nothing here parses input, renders or sends mail.
"""
