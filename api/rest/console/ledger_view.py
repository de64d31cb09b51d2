"""What the budget and round pages show, read through the ledger's own query layers.

Budgets come from :class:`privacy_ledger.budget.queries.BudgetQueries`
(``budget_assets``, ``budget_status``, ``events``): the console shows the
limit, spent, reserved and remaining epsilon and the per-round history
exactly as the ledger computes them (whole-history accounting), never
recomputed here. Beside them, each budget's newest empirical privacy audit comes
from :func:`privacy_ledger.budget.empirical.audited_budgets` (its ``budget.audited``
log entry, compared with the ledger's epsilon over the audited rounds). Rounds
come from :class:`privacy_ledger.RoundStore` (stage, the decisions the round
applied, uploads, decryption requests).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select

from api.rest.console.charts import Chart, epsilon_chart
from api.rest.context import AppContext
from privacy_ledger.budget.empirical import AuditedBudget, audited_budgets
from privacy_ledger.budget.types import BudgetStatus, Reservation
from privacy_ledger.models import Participant, RoundRow
from privacy_ledger.rounds import DecryptionRecord, RoundRecord, UploadRecord

__all__ = [
    "MAX_ROUNDS",
    "all_decryptions",
    "ParticipantBudgets",
    "RoundDetail",
    "RoundItem",
    "budget_audit",
    "budget_detail",
    "participant_budgets",
    "round_count",
    "round_detail",
    "round_timeline",
    "stored_rounds",
]

#: Rounds listed on the timeline (newest first).
MAX_ROUNDS = 200


@dataclass(frozen=True)
class ParticipantBudgets:
    """One participant: registration, its budgets (ledger status) and their chart."""

    participant_id: str
    institution: str
    kind: str
    status: str
    budgets: list[BudgetStatus]
    chart: Chart
    #: Newest empirical audit per asset id (from the log); an asset absent here is not audited.
    audits: dict[str, AuditedBudget] = field(default_factory=dict)


@dataclass(frozen=True)
class RoundItem:
    """One round on the timeline."""

    round_id: str
    stage: str
    created_at: float
    updated_at: float
    uploads: int
    decryptions: int


@dataclass(frozen=True)
class RoundDetail:
    """One round: the stored record, decisions applied, uploads and decryption requests."""

    record: RoundRecord
    decisions: list[dict[str, Any]]
    excluded: list[str]
    uploads: list[UploadRecord]
    decryptions: list[DecryptionRecord]
    stages: list[tuple[str, float]]
    aliases: list[str]


def participant_budgets(ctx: AppContext) -> list[ParticipantBudgets]:
    """Return every registered participant with the status of each of its budgets."""
    with ctx.sessions() as session:
        rows = list(session.execute(select(Participant).order_by(Participant.id)).scalars())
        people = [(p.id, p.institution, p.kind, p.status) for p in rows]
    audited: dict[str, dict[str, AuditedBudget]] = {}
    for found in audited_budgets(ctx.ledger):
        if found.recorded is not None:
            audited.setdefault(found.participant, {})[found.asset] = found
    result = []
    for pid, institution, kind, status in people:
        budgets = [ctx.ledger.budget_status(pid, asset) for asset in ctx.ledger.budget_assets(pid)]
        result.append(
            ParticipantBudgets(
                participant_id=pid,
                institution=institution,
                kind=kind,
                status=status,
                budgets=budgets,
                chart=epsilon_chart(budgets),
                audits=audited.get(pid, {}),
            )
        )
    return result


def budget_audit(ctx: AppContext, participant_id: str, asset_id: str) -> AuditedBudget | None:
    """Return the budget's newest empirical audit beside the ledger's epsilon, or ``None``."""
    for found in audited_budgets(ctx.ledger, participant=participant_id):
        if found.asset == asset_id and found.recorded is not None:
            return found
    return None


def budget_detail(
    ctx: AppContext, participant_id: str, asset_id: str
) -> tuple[BudgetStatus, list[Reservation], Chart]:
    """Return one budget's status, its privacy events (oldest first) and its chart.

    Raises
    ------
    BudgetNotSet
        When the participant has no budget for ``asset_id``.
    """
    status = ctx.ledger.budget_status(participant_id, asset_id)
    events = ctx.ledger.events(participant_id, asset_id)
    return status, events, epsilon_chart([status])


def round_timeline(ctx: AppContext, *, limit: int = MAX_ROUNDS) -> list[RoundItem]:
    """Return the stored rounds, newest first, with their upload and decryption counts."""
    stmt = (
        select(RoundRow.id, RoundRow.stage, RoundRow.created_at, RoundRow.updated_at)
        .order_by(RoundRow.created_at.desc(), RoundRow.id)
        .limit(limit)
    )
    with ctx.sessions() as session:
        rows = list(session.execute(stmt).all())
    return [
        RoundItem(
            round_id=rid,
            stage=stage,
            created_at=created,
            updated_at=updated,
            uploads=len(ctx.rounds.uploads(rid)),
            decryptions=len(ctx.rounds.decryptions(rid)),
        )
        for rid, stage, created, updated in rows
    ]


def round_count(ctx: AppContext) -> int:
    """Return how many rounds are stored."""
    with ctx.sessions() as session:
        return int(session.scalar(select(func.count()).select_from(RoundRow)) or 0)


def _names(value: object) -> list[str]:
    if isinstance(value, dict):
        return sorted(str(k) for k in value)
    if isinstance(value, list | tuple | set):
        return sorted(str(v) for v in value)
    return []


def _decisions(state: dict[str, Any]) -> list[dict[str, Any]]:
    decisions, weights = state.get("decisions"), state.get("weights")
    rows = []
    for pid in _names(decisions):
        value = decisions[pid] if isinstance(decisions, dict) else None
        fields = dict(value) if isinstance(value, dict) else {}
        weight = weights.get(pid) if isinstance(weights, dict) else None
        rows.append(
            {
                "participant": pid,
                "score": fields.get("score"),
                "action": fields.get("action"),
                "factor": fields.get("factor"),
                "weight": weight,
            }
        )
    return rows


def _stages(state: dict[str, Any]) -> list[tuple[str, float]]:
    log = state.get("log")
    if not isinstance(log, list):
        return []
    return [
        (str(item[0]), float(item[1]))
        for item in log
        if isinstance(item, list | tuple) and len(item) == 2 and isinstance(item[1], int | float)
    ]


def _aliases(record: RoundRecord) -> list[str]:
    """Ids the audit entries of this round may carry: the store's id and the protocol's number."""
    config = record.state.get("config")
    number = config.get("round_id") if isinstance(config, dict) else None
    extra = [str(number)] if isinstance(number, int | str) and str(number) != record.id else []
    return [record.id, *extra]


def round_detail(ctx: AppContext, round_id: str) -> RoundDetail:
    """Return one round as stored.

    Raises
    ------
    RoundUnknown
        When no round has this id.
    """
    record = ctx.rounds.load(round_id)
    return RoundDetail(
        record=record,
        decisions=_decisions(record.state),
        excluded=_names(record.state.get("excluded")),
        uploads=ctx.rounds.uploads(round_id),
        decryptions=ctx.rounds.decryptions(round_id),
        stages=_stages(record.state),
        aliases=_aliases(record),
    )


def stored_rounds(ctx: AppContext, round_ids: Collection[str | None]) -> set[str]:
    """Return which of ``round_ids`` the round store holds (to link only to existing pages)."""
    wanted = sorted({r for r in round_ids if r is not None})
    if not wanted:
        return set()
    with ctx.sessions() as session:
        return set(session.execute(select(RoundRow.id).where(RoundRow.id.in_(wanted))).scalars())


def all_decryptions(ctx: AppContext, rounds: list[RoundItem]) -> list[DecryptionRecord]:
    """Return the decryption requests of ``rounds``, newest round first, in arrival order."""
    return [d for item in rounds for d in ctx.rounds.decryptions(item.round_id)]
