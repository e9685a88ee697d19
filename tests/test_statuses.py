"""The status rules alone (``bot.subscribers.statuses``): which changes a reader and an
operator may make, and that no chain of them subscribes anyone again unrecorded."""

from __future__ import annotations

from bot.domain import SubscriberStatus as S
from bot.subscribers.statuses import OPERATOR_ACTIONS, READER_ACTIONS, consent_change, reader_action


def test_a_reader_changes_only_from_the_status_each_button_is_shown_for() -> None:
    allowed = {(action, status) for action in READER_ACTIONS for status in S if reader_action(action, status)}
    assert allowed == {("pause", S.ACTIVE), ("resume", S.PAUSED), ("resubscribe", S.UNSUBSCRIBED)}
    assert reader_action("unsubscribe", S.ACTIVE) is None  # the one-click page does that, not this table
    assert reader_action("", S.ACTIVE) is None


def test_an_operator_pauses_only_someone_who_receives_digests() -> None:
    assert OPERATOR_ACTIONS["pause"].before == {S.ACTIVE, S.PAUSED}
    assert OPERATOR_ACTIONS["resume"].before == set(S) - {S.PENDING}  # they confirm, or `add` vouches


def test_no_chain_of_changes_subscribes_an_unsubscribed_reader_again_unrecorded() -> None:
    """From unsubscribed (or pending), every way back to active through the changes a
    reader or an operator may make passes a change the consent record holds."""
    changes = [(before, a.after) for a in (*READER_ACTIONS.values(), *OPERATOR_ACTIONS.values()) for before in a.before]
    for start in (S.UNSUBSCRIBED, S.PENDING):
        reached, todo = {start}, [start]
        while todo:
            status = todo.pop()
            for before, after in changes:
                if before is status and after not in reached and consent_change(before, after) is None:
                    reached.add(after)
                    todo.append(after)
        assert S.ACTIVE not in reached, (start, reached)
