"""Returned mail, the mailbox: list the messages not yet processed, and mark one
processed or leave it for a person.  A Maildir (``maildir:///path``, as Postfix
delivers) or an IMAP folder over TLS (``imaps://user@host/FOLDER``).

Processed means Seen: in a Maildir the file moves to ``cur/`` with the ``S`` flag,
over IMAP the message gets ``\\Seen``.  Messages are fetched with ``BODY.PEEK`` so
that reading alone marks nothing.  A message left for a person stays unread where
it is, or is moved unread to ``inbox.other_folder``.  Never deletes a message,
never classifies one and never touches the store.
"""

from __future__ import annotations

import errno
import imaplib
import logging
import os
import re
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlsplit

from bot.config import InboxConfig

log = logging.getLogger(__name__)
SEEN = "S"
_SIZE = re.compile(rb"RFC822\.SIZE (\d+)")


class MailboxError(Exception):
    """The mailbox cannot be reached or read: one line, naming it, never a password."""


class Mailbox(Protocol):
    def messages(self) -> Iterator[tuple[str, bytes | None]]:
        """(reference, bytes) of each unprocessed message; bytes None when it is
        bigger than ``inbox.max_message_bytes``."""
        ...

    def done(self, ref: str) -> None: ...

    def leave(self, ref: str) -> None: ...

    def close(self) -> None: ...


def open_mailbox(inbox: InboxConfig) -> Mailbox:
    """The mailbox ``inbox.url`` names, open; ``MailboxError`` when it is not there."""
    parts = urlsplit(inbox.url)
    if parts.scheme == "maildir":
        return MaildirBox(Path(unquote(parts.path)), inbox.other_folder, inbox.max_message_bytes)
    return ImapBox(inbox)


class MaildirBox:
    def __init__(self, path: Path, other_folder: str, max_bytes: int) -> None:
        if not ((path / "cur").is_dir() and (path / "new").is_dir()):
            raise MailboxError(f"inbox.url: {path} is not a Maildir (it needs cur/ and new/ folders)")
        self.path = path
        self.other_folder = other_folder
        self.max_bytes = max_bytes

    def messages(self) -> Iterator[tuple[str, bytes | None]]:
        for sub in ("new", "cur"):
            try:
                names = sorted(e.name for e in os.scandir(self.path / sub) if e.is_file(follow_symlinks=False))
            except OSError as exc:
                raise MailboxError(f"inbox.url: cannot list {self.path / sub}: {exc.strerror}") from None
            for name in names:
                flags = _flags(name)
                if name.startswith(".") or (sub == "cur" and SEEN in flags) or "T" in flags:
                    continue
                try:
                    with open(self.path / sub / name, "rb") as handle:
                        data = handle.read(self.max_bytes + 1)
                except FileNotFoundError:
                    continue  # a mail client moved it meanwhile
                except OSError as exc:  # one file this process may not read must not block the rest
                    log.warning("inbox.url: %s left unread: %s", self.path / sub / name, exc.strerror)
                    continue
                yield f"{sub}/{name}", (data if len(data) <= self.max_bytes else None)

    def done(self, ref: str) -> None:
        sub, _, name = ref.partition("/")
        flags = "".join(sorted(set(_flags(name) + SEEN)))
        _move(self.path / sub / name, self.path / "cur" / f"{name.partition(':')[0]}:2,{flags}")

    def leave(self, ref: str) -> None:
        if not self.other_folder:
            return
        folder = self.path / f".{self.other_folder}"  # Maildir++, as Dovecot and Courier lay folders out
        for sub in ("cur", "new", "tmp"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        (folder / "maildirfolder").touch()
        sub, _, name = ref.partition("/")
        _move(self.path / sub / name, folder / sub / name)

    def close(self) -> None:
        pass


def _move(source: Path, target: Path) -> None:
    """Move a message file, never over another: ``os.link`` refuses a name that is taken
    (``rename`` would replace that message), and the next free name is used instead.  A
    name taken by this very file (another reader moved it a moment ago) ends the move."""
    base, colon, info = target.name.partition(":")
    for attempt in range(100):
        free = target.parent / f"{base}{'' if attempt == 0 else f'.{attempt}'}{colon}{info}"
        try:
            linked = _link_or_rename(source, free)
        except FileExistsError:
            if _same_file(source, free):
                source.unlink(missing_ok=True)
                return
            continue
        except FileNotFoundError:
            return  # another reader (a second fetcher, a mail client) moved it first
        except OSError as exc:
            raise MailboxError(f"inbox.url: cannot move {source} to {target.parent}: {exc.strerror}") from None
        if linked:
            source.unlink(missing_ok=True)
        return
    raise MailboxError(f"inbox.url: cannot move {source}: 100 names like {target.name} are taken")


def _same_file(one: Path, other: Path) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError:  # one of them is gone: the other reader finished its move
        return not one.exists()


def _link_or_rename(source: Path, target: Path) -> bool:
    """Put the file at *target* as a hard link (True: *source* is still there), or, where
    the file system has no hard links, rename it to a name that was free a moment
    before (False); ``FileExistsError`` when *target* is taken."""
    try:
        os.link(source, target)
        return True
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
    if target.exists():
        raise FileExistsError(errno.EEXIST, "taken", str(target))
    os.rename(source, target)
    return False


def _flags(name: str) -> str:
    """The flags of a Maildir file name ("1764.M1P2.host:2,RS" -> "RS")."""
    _, colon, info = name.partition(":")
    return info[2:] if colon and info.startswith("2,") else ""


def _quoted(folder: str) -> str:
    return '"' + folder + '"'  # the config refuses quotes and backslashes in folder names


class ImapBox:
    def __init__(self, inbox: InboxConfig) -> None:
        parts = urlsplit(inbox.url)
        self.where = f"{parts.hostname}:{parts.port or 993}"
        self.folder = unquote(parts.path.lstrip("/")) or "INBOX"
        self.other_folder = inbox.other_folder
        self.max_bytes = inbox.max_message_bytes
        context = ssl.create_default_context()
        if not inbox.verify_certificates:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        password = inbox.resolved_password().get_secret_value()
        try:
            self.imap = imaplib.IMAP4_SSL(
                parts.hostname or "", parts.port or 993, ssl_context=context, timeout=inbox.timeout_seconds
            )
        except (OSError, imaplib.IMAP4.error) as exc:
            raise MailboxError(f"inbox.url: cannot connect to {self.where}: {_reason(exc)}") from None
        try:
            self.imap.login(unquote(parts.username or ""), password)
            _, offered = self.imap.capability()  # the list changes after login (MOVE, UIDPLUS)
            self.capabilities = set(b" ".join(x for x in offered if isinstance(x, bytes)).decode().upper().split())
            kind, _ = self.imap.select(_quoted(self.folder))
        except (OSError, imaplib.IMAP4.error) as exc:
            self.close()
            raise MailboxError(f"inbox.url: {self.where}: {_reason(exc)}") from None
        if kind != "OK":
            self.close()
            raise MailboxError(f"inbox.url: {self.where} has no folder {self.folder!r}")
        self._created = False

    def messages(self) -> Iterator[tuple[str, bytes | None]]:
        try:
            _, found = self.imap.uid("SEARCH", "UNSEEN UNDELETED")
            for raw_uid in (found[0] or b"").split():
                uid = raw_uid.decode("ascii")
                _, sized = self.imap.uid("FETCH", uid, "(RFC822.SIZE)")
                size = _SIZE.search(b" ".join(x for x in sized if isinstance(x, bytes)))
                if size is None or int(size.group(1)) > self.max_bytes:
                    yield uid, None
                    continue
                _, data = self.imap.uid("FETCH", uid, "(BODY.PEEK[])")
                body = next((part[1] for part in data if isinstance(part, tuple)), None)
                if isinstance(body, bytes):
                    yield uid, body
        except (OSError, imaplib.IMAP4.error) as exc:
            raise MailboxError(f"inbox.url: {self.where}: {_reason(exc)}") from None

    def done(self, ref: str) -> None:
        self._command("STORE", ref, "+FLAGS.SILENT", "(\\Seen)")

    def leave(self, ref: str) -> None:
        if not self.other_folder:
            return
        if not self._created:
            self.imap.create(_quoted(self.other_folder))  # "already exists" is a NO: fine
            self._created = True
        if "MOVE" in self.capabilities:
            self._command("MOVE", ref, _quoted(self.other_folder))
            return
        self._command("COPY", ref, _quoted(self.other_folder))
        self._command("STORE", ref, "+FLAGS.SILENT", "(\\Deleted)")
        if "UIDPLUS" in self.capabilities:
            self._command("EXPUNGE", ref)

    def _command(self, command: str, *args: str) -> None:
        try:
            kind, data = self.imap.uid(command, *args)
        except (OSError, imaplib.IMAP4.error) as exc:
            raise MailboxError(f"inbox.url: {self.where}: {_reason(exc)}") from None
        if kind != "OK":
            raise MailboxError(f"inbox.url: {self.where}: UID {command} {args[0]}: {data[0]!r}")

    def close(self) -> None:
        try:
            self.imap.logout()
        except (OSError, imaplib.IMAP4.error):
            pass


def _reason(exc: BaseException) -> str:
    """The error in one line: imaplib's server replies are bytes, ssl's carry a verify message."""
    first = exc.args[0] if exc.args else None
    if isinstance(first, bytes):
        text = first.decode("utf-8", "replace")
    elif isinstance(exc, ssl.SSLCertVerificationError):
        text = f"certificate verify failed: {exc.verify_message} (inbox.verify_certificates)"
    else:
        text = str(exc)
    return " ".join(text.split())[:200] or type(exc).__name__
