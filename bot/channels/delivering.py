"""Channels stage, the delivery pass: a channel's due digests claimed under a lease, cut
into parts, each part posted once.  Composes the store (``bot.store.channels``,
``bot.store.queue``), the rules (``part_rules``) and the wire (``posting``); renders no
mail and never touches a reader's digest: mail and chat are claimed apart, so a room
that fails never delays a reader's mail.

Never twice: before a part's request the store is told, under the claim still held,
that the digest is on the wire and which part is; after its answer, what the part
became and that nothing is on the wire.  A worker stopped or killed in between leaves a
part ``sending`` and its digest on the wire: the lease running out makes both unknown,
and nothing posts them again by itself.  Between two parts the digest is off the wire:
its lease running out makes it due again, and only the parts not yet posted go.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from bot.channels.chat_digest import parts_of
from bot.channels.chat_requests import Judged, PostVerdict, request_for, transaction_id
from bot.channels.destinations import Destination, DestinationError, parse_destination
from bot.channels.part_rules import DigestAfter, digest_after, part_after
from bot.channels.posting import ChatPoster, chat_digest_of
from bot.config import Settings
from bot.domain import DigestState
from bot.domain.channel_states import PartState, Service
from bot.sealed import Sealer, sealer_of
from bot.store import channels as store
from bot.store.answers import Finished, finish_many
from bot.store.channel_tables import ChannelPartRow
from bot.store.contents import digest_content
from bot.store.engine import transaction
from bot.store.queue import Claim, give_back, put_on_wire, settle_unanswered

log = logging.getLogger(__name__)
CLAIM = 10  # digests claimed at a time: a stop gives back the rest at once


@dataclass
class ChannelReport:
    sent: int = 0
    retrying: int = 0
    failed: int = 0
    unknown: int = 0
    parts: int = 0  # posted
    given_back: int = 0
    lost_lease: int = 0


@dataclass
class _Pass:
    factory: sessionmaker[Session]
    settings: Settings
    key: bytes
    clock: Callable[[], datetime]
    worker: str
    poster: ChatPoster
    report: ChannelReport
    keep_going: Callable[[], bool]
    sealer: Sealer
    rng: random.Random | None = None


def deliver_channels(
    factory: sessionmaker[Session],
    settings: Settings,
    key: bytes,
    clock: Callable[[], datetime],
    *,
    worker: str,
    keep_going: Callable[[], bool] = lambda: True,
    rng: random.Random | None = None,
) -> ChannelReport:
    """Post every due part of every channel's due digests, until none is due or
    *keep_going* says stop (the claims not begun given back)."""
    report = ChannelReport()
    with transaction(factory) as session:
        if not store.any_channel(session):
            return report
        settle_unanswered(session, now=clock())
        store.settle_parts(session, clock())
        store.retry_unknown_matrix(session, clock())
    sealer = sealer_of(settings)  # once a pass; a secrets key that cannot be read claims nothing
    run = _Pass(factory, settings, key, clock, worker, ChatPoster(settings), report, keep_going, sealer, rng)
    try:
        while keep_going():
            with transaction(factory) as session:
                claims = store.claim_channel_digests(
                    session, now=clock(), worker=worker, lease_seconds=settings.channels.lease_seconds, limit=CLAIM
                )
            if not claims:
                break
            for at, claim in enumerate(claims):
                if not keep_going():
                    _give_back(run, claims[at:])
                    break
                _deliver_one_alone(run, claim)
    finally:
        run.poster.close()
    return report


def _deliver_one_alone(run: _Pass, claim: Claim) -> None:
    """One digest, whose failure is its own: a digest that cannot be read or shaped
    fails (unknown when a part of it was on the wire), and the pass goes on with the
    others.  A store that refuses the record stops the pass (the lease settles it)."""
    try:
        _deliver_one(run, claim)
    except SQLAlchemyError:
        raise
    except Exception as exc:  # noqa: BLE001 - this digest's failure, never the other channels'
        # Its name only: an error's words may quote a destination, a secret.
        said = f"could not be posted: {type(exc).__name__} (a bug in digestbot: please report it)"
        log.error("channel digest %d %s", claim.digest_id, said)
        with transaction(run.factory) as session:
            parts = store.parts_of(session, claim.digest_id)
        on_wire = any(part.state == PartState.SENDING.value for part in parts)
        state = DigestState.UNKNOWN if on_wire else DigestState.FAILED
        _finish(run, claim, f"#{claim.digest_id}", DigestAfter(state), Judged(PostVerdict.REFUSED, said))


def _give_back(run: _Pass, claims: list[Claim]) -> None:
    with transaction(run.factory) as session:
        run.report.given_back += len(give_back(session, claims, worker=run.worker))


def _deliver_one(run: _Pass, claim: Claim) -> None:
    """One claimed digest: its parts posted in order from the first not posted yet."""
    with transaction(run.factory) as session:
        content = digest_content(session, claim.digest_id)
        channel = store.channels_by_subscriber(session, [content.subscriber.id]).get(content.subscriber.id)
    if channel is None:
        return
    try:
        destination = parse_destination(run.sealer.open(channel.sealed_destination) or "", Service(channel.service))
    except DestinationError:
        said = "the destination cannot be read (sealed with another secrets key?): 'channels edit' gives it again"
        _finish(run, claim, channel.name, DigestAfter(DigestState.FAILED), Judged(PostVerdict.REFUSED, said))
        return
    chat = chat_digest_of(content, run.settings, run.key)
    blocks = parts_of(chat, destination.service, run.settings.channels.most_parts)
    numbered = [(n, len(blocks), transaction_id(claim.digest_id, n)) for n in range(1, len(blocks) + 1)]
    with transaction(run.factory) as session:
        store.put_parts(session, claim.digest_id, numbered, run.clock())
        parts = store.parts_of(session, claim.digest_id)
    judged = _post_parts(run, claim, parts, destination, blocks, channel.subscriber_id)
    if judged is None:
        run.report.lost_lease += 1
        return
    if not run.keep_going() and any(part.state == PartState.PENDING.value for part in parts):
        _give_back(run, [claim])  # stopped between two parts: nothing on the wire, the rest next time
        return
    states = [PartState(part.state) for part in parts]
    after = digest_after(states, claim.attempt, run.settings.channels, run.clock(), judged.wait, run.rng)
    _finish(run, claim, channel.name, after, judged)


def _post_parts(
    run: _Pass,
    claim: Claim,
    parts: list[ChannelPartRow],
    destination: Destination,
    blocks: list[list[str]],
    channel_id: int,
) -> Judged | None:
    """Each part not posted yet, in order, until one is not posted: the last verdict
    (None: the claim was lost).  *parts* are told their new states."""
    judged = Judged(PostVerdict.POSTED, "")
    for part in parts:
        if part.state != PartState.PENDING.value:
            continue
        if not run.keep_going():
            break
        shown = blocks[part.number - 1] if part.number <= len(blocks) else []
        answered = _post_part(run, claim, part, destination, shown)
        if answered is None:
            return None
        judged = answered
        part.state = part_after(judged.verdict).value
        if judged.wait > 0 and judged.verdict in (PostVerdict.WAIT, PostVerdict.POSTED):
            with transaction(run.factory) as session:
                until = run.clock() + timedelta(seconds=judged.wait)
                store.change_channel(session, channel_id, held_until=until)
        if part.state != PartState.SENT.value or judged.wait > 0:
            break
    return judged


def _post_part(
    run: _Pass, claim: Claim, part: ChannelPartRow, destination: Destination, blocks: list[str]
) -> Judged | None:
    """One part: marked on the wire under the claim, posted, its answer recorded and the
    digest off the wire again.  None when the claim was lost before the request."""
    lease = run.settings.channels.lease_seconds
    with transaction(run.factory) as session:
        marked = put_on_wire(session, [claim], worker=run.worker, now=run.clock(), lease_seconds=lease)
        if claim.digest_id not in marked:
            return None
        store.change_part(
            session, claim.digest_id, part.number, run.clock(), state=PartState.SENDING.value, tries=part.tries + 1
        )
    request = request_for(
        destination.service,
        destination.url,
        destination.chat,
        destination.token,
        blocks,
        part.transaction_id,
    )
    posted = run.poster.post(destination.service, request)
    judged = replace(posted, detail=f"part {part.number}/{part.total}: {posted.detail}")
    with transaction(run.factory) as session:
        store.change_part(
            session,
            claim.digest_id,
            part.number,
            run.clock(),
            state=part_after(judged.verdict).value,
            code=judged.code,
            detail=judged.detail,
        )
        if judged.verdict is not PostVerdict.UNKNOWN:
            store.off_the_wire(session, claim, run.worker)
    if judged.verdict is PostVerdict.POSTED:
        run.report.parts += 1
    return judged


def _finish(run: _Pass, claim: Claim, name: str, after: DigestAfter, judged: Judged) -> None:
    error = None if after.state is DigestState.SENT else f"attempt {claim.attempt}: {judged.detail}"
    outcome = Finished(claim.digest_id, claim.attempt, after.state, judged.code, error, after.retry_at)
    with transaction(run.factory) as session:
        held = finish_many(session, [outcome], worker=run.worker, now=run.clock())
    if claim.digest_id not in held:
        run.report.lost_lease += 1
        return
    counted = {
        DigestState.SENT: "sent",
        DigestState.RETRY_WAIT: "retrying",
        DigestState.FAILED: "failed",
        DigestState.UNKNOWN: "unknown",
    }[after.state]
    setattr(run.report, counted, getattr(run.report, counted) + 1)
    level = logging.INFO if after.state in (DigestState.SENT, DigestState.RETRY_WAIT) else logging.WARNING
    log.log(level, "channel %s: digest %d %s%s", name, claim.digest_id, counted, f" ({error})" if error else "")
