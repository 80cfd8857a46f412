"""Pieces shared by the ModelAdmins: a paginator that never counts a large table, read-only
admin bases, the admin-log and message helpers every action reports through, and the compact
cells (texts cut short with their whole value in a title, short times) and stylesheet that make
every list fit a 1280 px window with the navigation sidebar open."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_iq import audit, operations
from django_iq.audit import Actor
from django_iq.bounds import text_problem
from django_iq.models import OperatorAction
from django_iq.operations import ActionResult
from django_iq.queries import estimated_row_count

# Count at most this many rows for a changelist: beyond it the page says "more than 10,000".
COUNT_CAP = 10_000


class EstimatedCountPaginator(Paginator):
    """A paginator that never counts a whole large table.

    Unfiltered, on PostgreSQL, the count is the planner's estimate (``pg_class.reltuples``),
    used when it is above ``count_cap``. Otherwise (filtered lists, other databases, small
    tables) it counts at most ``count_cap + 1`` rows in a ``LIMIT``-ed subquery, so the cost is
    bounded whatever the table holds. ``is_estimate`` and ``is_capped`` say which happened; the
    ``admin/django_iq/pagination.html`` template words the count accordingly.
    """

    count_cap = COUNT_CAP
    is_estimate = False
    is_capped = False

    @cached_property
    def count(self) -> int:
        rows = self.object_list
        if not isinstance(rows, QuerySet):
            return len(rows)
        query = rows.query
        if not query.where and not query.distinct and not query.combinator:
            estimate = estimated_row_count(rows.db, str(rows.model._meta.db_table))
            if estimate is not None and estimate > self.count_cap:
                self.is_estimate = True
                return estimate
        # Only the keys in the subquery: annotations of the listed rows would cost per row.
        counted = rows.order_by().values("pk")[: self.count_cap + 1].count()
        self.is_capped = counted > self.count_cap
        return counted


class DeferringChangeList(ChangeList):
    """A changelist that does not load ``model_admin.list_deferred`` (large JSON or text
    columns no list shows) for each listed row, and that refuses filters no database column
    could hold (a NUL character) as the admin refuses any bad filter."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        for name, values in request.GET.lists():
            if any(text_problem(text) for text in (name, *values)):
                raise IncorrectLookupParameters(f"The filter {name!r:.40} has a NUL character.")
        rows: QuerySet[Any] = super().get_queryset(request, exclude_parameters)
        deferred: tuple[str, ...] = getattr(self.model_admin, "list_deferred", ())
        return rows.defer(*deferred) if deferred else rows


# The stylesheet of django_iq's lists (django_iq/static/django_iq/admin/lists.css).
LIST_CSS = {"all": ("django_iq/admin/lists.css",)}


def cut(text: object, width: str = "") -> SafeString | str:
    """``text`` on one line, cut with an ellipsis where it is too long for its column; the whole
    of it in the title. ``width``: ``""`` (14em), ``"narrow"`` (9em), ``"wide"`` (22em) or
    ``"fill"`` (the width the other columns leave)."""
    if text is None or text == "":
        return "-"
    shown = clip(str(text))
    kind = f"iq-cut iq-{width}" if width else "iq-cut"
    return format_html('<span class="{}" title="{}">{}</span>', kind, shown, shown)


# What a list cell and its hover title carry of a long text at most (the row's page has it all):
# a page of 100 rows stays small whatever the texts.
CELL_MAX_CHARS = 500


def clip(text: str, limit: int = CELL_MAX_CHARS) -> str:
    """``text``, or its first ``limit`` characters and an ellipsis."""
    return text if len(text) <= limit else f"{text[:limit]}…"


def short_time(value: datetime | None, title: str = "") -> SafeString | str:
    """A time in the current time zone, short and unbroken: ``04:05:09`` today, ``Nov 27 04:05``
    on another day of this year, ``2027-11-27`` in another year; the full time, to the second
    and with its zone, in the title (or ``title``)."""
    if value is None:
        return "-"
    local = timezone.localtime(value)
    today = timezone.localdate()
    if local.date() == today:
        shown = f"{local:%H:%M:%S}"
    elif local.year == today.year:
        shown = f"{local:%b %d %H:%M}"
    else:
        shown = f"{local:%Y-%m-%d}"
    return format_html(
        '<time class="iq-time" datetime="{}" title="{}">{}</time>',
        local.isoformat(),
        title or f"{local:%Y-%m-%d %H:%M:%S %Z}",
        shown,
    )


def time_column(field: str, description: str, *, sortable: bool = True) -> Any:
    """A list column showing the time in ``field`` with ``short_time``."""

    @admin.display(description=description, ordering=field if sortable else None)
    def column(self: admin.ModelAdmin[Any], row: Model) -> SafeString | str:
        return short_time(getattr(row, field))

    return column


def cut_column(field: str, description: str, width: str = "", *, sortable: bool = True) -> Any:
    """A list column showing the text in ``field`` with ``cut``."""

    @admin.display(description=description, ordering=field if sortable else None)
    def column(self: admin.ModelAdmin[Any], row: Model) -> SafeString | str:
        return cut(getattr(row, field), width)

    return column


def job_column(field: str, description: str = "job", width: str = "narrow") -> Any:
    """A list column showing the job named in ``field`` by its function's name (the end of its
    dotted path, which tells jobs apart best in little room), cut; the whole path in the title."""

    @admin.display(description=description)
    def column(self: admin.ModelAdmin[Any], row: Model) -> SafeString | str:
        name = getattr(row, field) or ""
        if not name:
            return "-"
        kind = f"iq-cut iq-{width}" if width else "iq-cut"
        return format_html('<span class="{}" title="{}">{}</span>', kind, name, job_label(name))

    return column


def job_label(name: str) -> str:
    """The end of a job's dotted path: ``reconcile`` for ``billing.tasks.reconcile``."""
    return name.rsplit(".", 1)[-1]


class IQModelAdmin(admin.ModelAdmin):
    """Base of the admins of rows the processes write; ``list_deferred`` names columns the
    changelist leaves unloaded."""

    list_deferred: tuple[str, ...] = ()

    class Media:
        css = LIST_CSS

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return DeferringChangeList


class ReadOnlyAdmin(IQModelAdmin):
    """Rows written only by workers and the leader: listed and shown, never added, edited or
    deleted by hand."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


class ActionOnlyAdmin(IQModelAdmin):
    """Rows changed only through actions calling the manager API: the change permission allows
    the actions, while each object's page stays read-only (saving a form would write every
    field back, racing the workers that own the state)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        if obj is not None:
            return False
        return super().has_change_permission(request, obj)


def admin_actor(request: HttpRequest) -> Actor:
    """The signed-in user acting through the admin."""
    return Actor.of_request(request, OperatorAction.Door.ADMIN)


def report_outcome(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest, outcome: ActionResult
) -> None:
    """Tell the operator what an operation did, in its one wording: a success, or a warning when
    something was skipped or not found."""
    level = messages.WARNING if outcome.skipped or outcome.not_found else messages.SUCCESS
    model_admin.message_user(request, outcome.message, level)


def cancel_waiting(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[Any],
    *,
    action: str,
    what: str,
    targets: dict[str, dict[str, str]],
) -> TemplateResponse | None:
    """An admin action cancelling every waiting entry of each target (``{name: {"job": ...}}``
    or ``{"queue": ...}``, as ``operations.cancel_matching`` takes): first a page with the count
    of each (the dry run), then, once confirmed, the cancels, each reported and audited."""
    actor = admin_actor(request)
    if request.POST.get("confirm") != "yes":
        counts = [
            (
                name,
                operations.cancel_matching(
                    actor, job=target.get("job"), queue=target.get("queue"), dry_run=True
                ).done_count,
            )
            for name, target in targets.items()
        ]
        context = {
            **model_admin.admin_site.each_context(request),
            "title": "Cancel waiting entries",
            "opts": model_admin.model._meta,
            "what": what,
            "counts": counts,
            "total": sum(count for _, count in counts),
            "queryset": queryset,
            "action": action,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/django_iq/cancel_waiting.html", context)
    for target in targets.values():
        outcome = operations.cancel_matching(
            actor, job=target.get("job"), queue=target.get("queue")
        )
        if outcome.done_count:
            described = " ".join(f"{key}={value}" for key, value in target.items())
            audit.admin_log_described(
                actor, model_admin.model, f"waiting entries matching {described}", outcome.message
            )
        report_outcome(model_admin, request, outcome)
    return None
