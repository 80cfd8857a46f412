"""The ``demo`` command's summary: states per queue, the batch's results, and what went wrong."""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import Sum

from django_iq.managers import QueueStats
from django_iq.models import EntryError
from shop.demo import Outcome
from shop.enqueueing import Plan
from shop.jobs import charge_card
from shop.models import LoyaltyAccount, Payment, Report, SentEmail

STATE_COLUMNS = (
    ("initial", "initial"),
    ("pending", "pending"),
    ("computing", "computing"),
    ("awaiting_compute", "awaiting"),
    ("disabled", "disabled"),
    ("failed", "failed"),
)
SHOWN_ERRORS = 3


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Return the lines of a plain-text table: numbers right-aligned, everything else left."""
    cells: list[list[object]] = [list(header), *(list(row) for row in rows)]
    widths = [max(len(str(row[i])) for row in cells) for i in range(len(header))]

    def line(row: list[object]) -> str:
        return "  ".join(
            str(cell).rjust(width) if isinstance(cell, int) else str(cell).ljust(width)
            for cell, width in zip(row, widths, strict=True)
        ).rstrip()

    return [line(cells[0]), "  ".join("-" * width for width in widths), *map(line, cells[1:])]


def queue_table(stats: Sequence[QueueStats]) -> list[str]:
    """The states of every queue, as ``Queue.objects.stats()`` counts them."""
    rows = [
        [s.queue, "yes" if s.is_paused else "no", *(getattr(s, f) for f, _ in STATE_COLUMNS)]
        for s in stats
    ]
    return table(["queue", "paused", *(title for _, title in STATE_COLUMNS)], rows)


def results(plan: Plan) -> tuple[list[str], list[str]]:
    """Return the lines of the batch's results table and the problems found in them."""
    batch = plan.batch
    problems: list[str] = []
    reports = Report.objects.filter(batch=batch)
    emails = SentEmail.objects.filter(batch=batch)
    payments = Payment.objects.filter(batch=batch)
    paid = payments.filter(status=Payment.Status.PAID)
    retried = EntryError.objects.filter(
        kwargs__batch=batch, job_name=charge_card.name, is_final=False
    )
    accounts = {a.customer: a for a in LoyaltyAccount.objects.filter(batch=batch)}
    updates = sum(a.updates for a in accounts.values())
    # Balances can only be judged once every update has run.
    wrong = sorted(
        customer
        for customer, expected in plan.expected_points.items()
        if updates == plan.jobs["loyalty"]
        and (customer not in accounts or accounts[customer].points != expected)
    )
    customers = len(plan.expected_points)
    rounds = reports.aggregate(n=Sum("iterations"))["n"] or 0
    rows = [
        ["CPU-bound reports", plan.jobs["report"], reports.count(), f"{rounds:,} SHA-256 rounds"],
        [
            "slow I/O receipts",
            plan.jobs["email"],
            emails.count(),
            "a 50-300 ms pretend SMTP call each",
        ],
        [
            "retried payments",
            plan.jobs["payment"],
            paid.count(),
            f"{retried.count()} declined attempts retried with backoff",
        ],
        [
            "grouped loyalty points",
            plan.jobs["loyalty"],
            updates,
            f"{customers} customer{'s' if customers != 1 else ''}, "
            + (
                f"{len(wrong)} balances wrong"
                if wrong
                else "every balance correct"
                if updates == plan.jobs["loyalty"]
                else "not all updates ran"
            ),
        ],
    ]
    for label, enqueued, done, _ in rows:
        if done != enqueued:
            problems.append(f"{label}: {done} results for {enqueued} jobs.")
    if wrong:
        problems.append(
            "Loyalty balances differ from the points enqueued for "
            f"{', '.join(wrong)}: two updates of one customer ran at once."
        )
    return table(["jobs", "enqueued", "done", "notes"], rows), problems


def outcome_problems(plan: Plan, outcome: Outcome) -> list[str]:
    """Return what kept the batch from finishing: timeout, interruption, failures, a worker error."""
    problems: list[str] = []
    progress = outcome.progress
    if outcome.interrupted:
        problems.append(
            f"Interrupted with {progress.remaining} of {progress.total} jobs still queued; "
            "they run on the next `manage.py runworker`."
        )
    elif outcome.timed_out:
        problems.append(
            f"Timed out after {outcome.seconds:.0f} s with {progress.remaining} of "
            f"{progress.total} jobs still queued. Run again with -v 2 to see the worker's log, "
            "or give it longer with --timeout-seconds."
        )
    elif progress.remaining:
        problems.append(
            f"The worker stopped with {progress.remaining} of {progress.total} jobs still queued "
            "(see `pending` and `initial` above)."
        )
    if progress.failed:
        errors = EntryError.objects.failed().filter(kwargs__batch=plan.batch)[:SHOWN_ERRORS]
        shown = "".join(f"\n    {e.job_name}: {e.exception_class}: {e.message}" for e in errors)
        problems.append(f"{progress.failed} jobs used up their attempts and failed, e.g.:{shown}")
    worker = outcome.worker
    if worker.error is not None:
        problems.append(f"The worker raised {type(worker.error).__name__}: {worker.error}")
    elif worker.code:
        problems.append(f"The worker exited with code {worker.code} (jobs were abandoned).")
    return problems
