"""The retry and bounce policy, alone: what one attempt's outcome does to a digest;
and the planner's rule for what a due subscriber's digest is."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.config import SmtpConfig
from bot.delivery.policy import backoff_seconds, next_state
from bot.delivery.smtp import Outcome, SendResult
from bot.domain import DigestKind, DigestState
from bot.plan import digest_state

NOW = datetime(2026, 6, 14, 8, tzinfo=UTC)
SMTP = SmtpConfig(max_attempts=4, retry_base_seconds=60, retry_max_seconds=600, bounce_codes=[550, 551, 553])


def test_a_250_is_sent_with_no_error() -> None:
    decision = next_state(SendResult(Outcome.SENT, 250, "250 ok"), 1, SMTP, NOW)
    assert (decision.state, decision.retry_at, decision.error, decision.bounce) == (DigestState.SENT, None, None, False)


def test_temporary_failures_wait_and_retry_until_the_last_attempt() -> None:
    result = SendResult(Outcome.TEMPORARY, 451, "451 try later")
    waits = []
    for attempt in (1, 2, 3):
        decision = next_state(result, attempt, SMTP, NOW, random.Random(attempt))
        assert decision.state is DigestState.RETRY_WAIT and decision.error == f"attempt {attempt}: 451 try later"
        assert decision.retry_at is not None and not decision.bounce
        waits.append((decision.retry_at - NOW).total_seconds())
    assert 30 <= waits[0] < 60 and 60 <= waits[1] < 120 and 120 <= waits[2] < 240
    last = next_state(result, 4, SMTP, NOW)
    assert (last.state, last.retry_at, last.bounce) == (DigestState.FAILED, None, False)


def test_only_a_permanent_bounce_code_counts_as_a_bounce() -> None:
    for code, bounce in ((550, True), (551, True), (553, True), (554, False), (552, False)):
        decision = next_state(SendResult(Outcome.PERMANENT, code, f"{code} no"), 1, SMTP, NOW)
        assert decision.state is DigestState.FAILED and decision.retry_at is None and decision.bounce is bounce
    login = next_state(SendResult(Outcome.TEMPORARY, 550, "login refused"), 4, SMTP, NOW)
    assert not login.bounce  # a temporary outcome never bounces the address, whatever its code


@given(attempt=st.integers(1, 60), seed=st.integers(0, 2**32))
def test_backoff_doubles_within_its_jitter_and_stops_at_the_cap(attempt: int, seed: int) -> None:
    ceiling = min(600, 60 * 2.0 ** (attempt - 1))
    wait = backoff_seconds(attempt, SMTP, random.Random(seed))
    assert ceiling / 2 <= wait < ceiling
    decision = next_state(SendResult(Outcome.TEMPORARY, 421, "421"), attempt, SMTP, NOW, random.Random(seed))
    if attempt < SMTP.max_attempts:
        assert decision.retry_at == NOW + timedelta(seconds=wait)
    else:
        assert decision.state is DigestState.FAILED


@pytest.mark.parametrize(
    ("entries", "send_empty", "kind", "mailed", "expected"),
    [
        (3, False, DigestKind.SCHEDULED, True, DigestState.QUEUED),
        (3, False, DigestKind.MANUAL, True, DigestState.QUEUED),
        (0, True, DigestKind.SCHEDULED, True, DigestState.QUEUED),
        (0, True, DigestKind.MANUAL, True, DigestState.QUEUED),
        # A scheduled day with nothing is recorded, so the planner does not look again.
        (0, False, DigestKind.SCHEDULED, True, DigestState.EMPTY),
        # A manual digest with nothing is not made at all.
        (0, False, DigestKind.MANUAL, True, None),
        # Cadence "feed": in the reader's feed once planned, nothing to mail; an empty
        # one is never "sent" (there is no mail to say the day had nothing).
        (3, False, DigestKind.SCHEDULED, False, DigestState.SENT),
        (0, True, DigestKind.SCHEDULED, False, DigestState.EMPTY),
        (0, True, DigestKind.MANUAL, False, None),
    ],
)
def test_what_a_due_subscriber_gets(
    entries: int, send_empty: bool, kind: DigestKind, mailed: bool, expected: DigestState | None
) -> None:
    assert digest_state(entries, send_empty=send_empty, kind=kind, mailed=mailed) is expected
