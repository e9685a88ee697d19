"""Operations on the whole store: backup, restore and copy, each a service the ``db``
commands are a thin shell over (``bot.cli.db_commands``)."""
