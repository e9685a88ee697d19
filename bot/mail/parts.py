"""Mail stage, the parts a process builds once from its settings: the tag rules (and
the keywords digests mark), the key links are signed with and the DKIM signers; handed
to the mailer, the pages, the planner's ranker and the commands.

One policy for a part that cannot be built: a ``ConfigError`` whose one line names the
file or setting.  A part is built when first asked for and kept for the process's life;
a long-running process (the daemon, ``serve``) asks for every part before it starts
(``check``), so a broken file stops its start, never a delivery or a page later.  Never
reads or writes the store itself (``bot.tokens.store_signing_key`` checks the key
against it, when given one).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

from sqlalchemy.orm import Session, sessionmaker

from bot.choose.tagging import TagRules, TagRulesError, load_rules
from bot.config import ConfigError, Settings
from bot.mail.dkim import Signers, signer_of
from bot.mail.framing import Keywords
from bot.tokens import signing_key, store_signing_key


class Parts:
    """What one process loads of its settings' files, each once."""

    def __init__(
        self,
        settings: Settings,
        *,
        rules: TagRules | None = None,
        store: Callable[[], sessionmaker[Session]] | None = None,
    ) -> None:
        """*rules* given are used as they are (a test's, the demo's) instead of the file's;
        with a *store*, the key is the one it remembers or a refusal
        (``bot.tokens.store_signing_key``: a key file is not made anew while the store
        remembers another)."""
        self.settings = settings
        self._store = store
        if rules is not None:
            self.__dict__["rules"] = rules

    def __repr__(self) -> str:  # the key never in a log line or a traceback's locals
        return f"Parts({self.settings.paths.tags_file!s}, key {'loaded' if 'key' in self.__dict__ else 'not loaded'})"

    @cached_property
    def rules(self) -> TagRules:
        try:
            return load_rules(self.settings.paths.tags_file)
        except TagRulesError as exc:
            raise ConfigError(str(exc)) from None

    @cached_property
    def keywords(self) -> Keywords:
        """Each rule tag's keywords, marked in digests."""
        return tuple((rule.name, rule.keywords) for rule in self.rules.rules)

    @cached_property
    def key(self) -> bytes:
        if self._store is not None:
            return store_signing_key(self.settings, self._store())
        return signing_key(self.settings)

    @cached_property
    def signer(self) -> Signers | None:
        return signer_of(self.settings.dkim)

    def check(self) -> Parts:
        """Every part built now: a ConfigError for the first that cannot be."""
        _ = self.rules, self.keywords, self.key, self.signer
        return self
