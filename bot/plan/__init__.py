"""Plan stage: who is due and what each gets (``planner``), the rules of a
subscriber's local day (``days``), and manual resends (``resend``)."""

from __future__ import annotations

from bot.plan.batch_choice import digest_state, planned_key
from bot.plan.planner import plan
from bot.plan.report import IdRuns, PlanReport
from bot.plan.resend import DigestNotFound, ResendPending, find_scheduled, resend, resend_all

__all__ = [
    "DigestNotFound",
    "IdRuns",
    "PlanReport",
    "ResendPending",
    "digest_state",
    "find_scheduled",
    "plan",
    "planned_key",
    "resend",
    "resend_all",
]
