"""Message stage: the short mails besides digests, as plain text.

``confirmation`` carries the link that confirms a sign-up (double opt-in);
``already_subscribed`` answers a sign-up for an address that is subscribed
already, with its manage link, so the page can answer every sign-up alike.
Both go to an address a stranger typed, from the list's own domain: they carry
nothing else a stranger typed (no display name, no filter text, which could read
like our words or turn into a link), only what was picked from the form's menus;
the page behind the link shows the filter before anything is confirmed.
``test_message`` is what ``digestbot smtp test --to`` sends.
Builds bytes only: never reads the store, never sends.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid

from bot.config import SenderConfig
from bot.domain.text import domain_of, header_text
from bot.mail.message import POLICY, display_name, envelope_address
from bot.plan.cadence import describe


@dataclass(frozen=True, slots=True)
class SignupChoices:
    """What the person picked from the form's menus, repeated in the confirmation mail."""

    cadence: str
    send_hour: int
    timezone: str


def _message(sender: SenderConfig, to_name: str, to_address: str, subject: str, body: str, now: datetime) -> bytes:
    msg = EmailMessage(policy=POLICY)
    msg["Subject"] = header_text(subject)
    msg["From"] = Address(display_name=display_name(sender.from_name), addr_spec=sender.from_address)
    msg["To"] = Address(display_name=display_name(to_name), addr_spec=envelope_address(to_address))
    msg["Date"] = format_datetime(now.astimezone(UTC))
    msg["Message-ID"] = make_msgid("signup", domain=domain_of(sender.from_address))
    msg["Auto-Submitted"] = "auto-generated"
    msg.set_content(body, charset="utf-8", cte="quoted-printable")
    return msg.as_bytes()


def confirmation(
    sender: SenderConfig,
    *,
    to_address: str,
    url: str,
    expires: datetime,
    choices: SignupChoices,
    now: datetime,
) -> bytes:
    list_name = header_text(sender.from_name)
    body = (
        f"Someone, hopefully you, asked for {list_name} digests at {to_address}, "
        f"{describe(choices.cadence)} at {choices.send_hour:02d}:00 ({choices.timezone}).\n\n"
        "To confirm, open this link: the page shows what the digests will hold, with a "
        f'"Confirm" button (the link works until {expires.astimezone(UTC):%Y-%m-%d %H:%M} UTC):\n\n'
        f"  {url}\n\n"
        "If you did not ask for this, ignore this message: nothing more will be sent to you.\n"
    )
    return _message(sender, "", to_address, f"Confirm your subscription to {list_name}", body, now)


def already_subscribed(sender: SenderConfig, *, to_address: str, manage_url: str, now: datetime) -> bytes:
    list_name = header_text(sender.from_name)
    body = (
        f"Someone, hopefully you, asked to subscribe {to_address} to {list_name}.\n"
        "This address is subscribed already, so nothing has changed.\n\n"
        "To change what your digest holds or when it comes, or to unsubscribe:\n\n"
        f"  {manage_url}\n\n"
        "If you did not ask for this, ignore this message.\n"
    )
    return _message(sender, "", to_address, f"Your subscription to {list_name}", body, now)


def test_message(sender: SenderConfig, *, to_address: str, now: datetime) -> bytes:
    list_name = header_text(sender.from_name)
    body = (
        f"This is a test message from {list_name} (digestbot smtp test).\n"
        "It went out on the SMTP connection the digests use; nothing else is sent.\n"
    )
    return _message(sender, "", to_address, f"{list_name}: SMTP test", body, now)
