"""The status rules alone (``bot.domain.statuses``): which changes a reader and an
operator may make, that no chain of them subscribes anyone again unrecorded, what a
bounce, a return, a confirmation and an unsubscribe do; and that no module of the
product spells a status change of its own."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from bot.domain import ReturnKind
from bot.domain import SubscriberStatus as S
from bot.domain import statuses as statuses_module
from bot.domain.statuses import (
    OPERATOR_ACTIONS,
    READER_ACTIONS,
    BounceLimits,
    after_added_again,
    after_bounces,
    after_confirm,
    after_return,
    after_unsubscribe,
    consent_change,
    reader_action,
)
from tests.conftest import ROOT


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


def test_what_one_more_returned_mail_does() -> None:
    limits = BounceLimits(hard_bounces=2, soft_bounces=3)
    assert after_return(ReturnKind.HARD, S.ACTIVE, 1, limits) is None
    assert after_return(ReturnKind.HARD, S.ACTIVE, 2, limits) is S.BOUNCED
    assert after_return(ReturnKind.HARD, S.PAUSED, 2, limits) is S.BOUNCED
    assert after_return(ReturnKind.HARD, S.UNSUBSCRIBED, 9, limits) is None
    assert after_return(ReturnKind.SOFT, S.ACTIVE, 2, limits) is None
    assert after_return(ReturnKind.SOFT, S.ACTIVE, 3, limits) is S.BOUNCED
    assert after_return(ReturnKind.DELAYED, S.ACTIVE, 99, limits) is None
    for kind in (ReturnKind.COMPLAINT, ReturnKind.UNSUBSCRIBE):
        assert after_return(kind, S.BOUNCED, 1, limits) is S.UNSUBSCRIBED
        assert after_return(kind, S.UNSUBSCRIBED, 1, limits) is None


def test_bounces_make_an_active_or_paused_reader_bounced_and_nobody_else() -> None:
    """One rule for the relay's refusals and the inbox's bounces: a pause does not shield
    a dead address (it would bounce again on resume)."""
    became = {status for status in S if after_bounces(status, 3, 3) is S.BOUNCED}
    assert became == {S.ACTIVE, S.PAUSED}
    assert all(after_bounces(status, 2, 3) is None for status in S)


def test_a_confirmation_an_unsubscribe_and_an_add_again() -> None:
    assert {status for status in S if after_confirm(status) is S.ACTIVE} == {S.PENDING, S.UNSUBSCRIBED, S.BOUNCED}
    assert {status for status in S if after_unsubscribe(status) is S.UNSUBSCRIBED} == set(S) - {S.UNSUBSCRIBED}
    assert {status for status in S if after_added_again(status) is S.ACTIVE} == {S.UNSUBSCRIBED, S.PENDING}


_RULES = Path(statuses_module.__file__).resolve()
_STATUS_WORDS = frozenset(status.value for status in S)


def _spelled_status(node: ast.AST) -> str | None:
    """A status written out: ``SubscriberStatus.X`` (``.value`` too) or its string."""
    if isinstance(node, ast.Attribute) and node.attr == "value":
        node = node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "SubscriberStatus":
        return node.attr
    if isinstance(node, ast.Constant) and node.value in _STATUS_WORDS:
        return repr(node.value)
    return None


def _status_changes(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Where *tree* gives a subscriber a status of its own choosing: set_status(…, X, …),
    replace(…, status=X), .values(status=X), x.status = X; and raw status strings
    compared with a status."""
    for node in ast.walk(tree):
        written: list[ast.AST] = []
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("replace", "values", "set_status"):
                written += [k.value for k in node.keywords if k.arg == "status"]
            if name == "set_status" and len(node.args) >= 3:
                written.append(node.args[2])
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Attribute) and t.attr == "status" for t in targets):
                written.append(node.value)
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "status" for s in sides):
                written += [s for s in sides if isinstance(s, ast.Constant)]
        for value in written:
            spelled = _spelled_status(value)
            if spelled is not None:
                yield node.lineno, spelled


def test_no_module_spells_a_status_change_of_its_own() -> None:
    """Every status a subscriber is given comes from ``bot.domain.statuses``: a module that
    writes ``SubscriberStatus.X`` (or its string) into a subscriber decides a change a
    second time, where the next bug comes from."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {spelled}"
        for path in sorted((ROOT / "bot").rglob("*.py"))
        if path.resolve() != _RULES and "migrations" not in path.parts
        for line, spelled in _status_changes(ast.parse(path.read_text(), str(path)))
    ]
    assert found == []


def test_the_status_scan_finds_each_way_of_spelling_a_change() -> None:
    """The scan above can fail: each way it looks for is found in a made-up module."""
    spelled = """
set_status(session, 1, SubscriberStatus.BOUNCED, now)
replace(subscriber, status=SubscriberStatus.ACTIVE)
update(Row).values(status="unsubscribed")
row.status = "bounced"
if row.status == "active": pass
"""
    assert sorted(line for line, _ in _status_changes(ast.parse(spelled))) == [2, 3, 4, 5, 6]
    assert list(_status_changes(ast.parse("if s.status is SubscriberStatus.ACTIVE: pass"))) == []
