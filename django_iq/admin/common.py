"""Pieces shared by the ModelAdmins: a paginator that never counts a large table, read-only
admin bases, and the admin-log and message helpers every action reports through."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import LogEntry
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property

from django_iq import operations
from django_iq.limits import text_problem
from django_iq.models import OperatorAction
from django_iq.operations import Outcome
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


class IQModelAdmin(admin.ModelAdmin):
    """Base of the admins of rows the processes write; ``list_deferred`` names columns the
    changelist leaves unloaded."""

    list_deferred: tuple[str, ...] = ()

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


def log_objects(
    request: HttpRequest, objects: Iterable[Model], message: str, flag: int
) -> list[LogEntry]:
    """Write one admin log entry (``LogEntry``) per object, in one insert.

    ``flag`` is ``ADDITION``, ``CHANGE`` or ``DELETION`` from ``django.contrib.admin.models``.
    """
    rows = list(objects)
    if not rows or request.user.pk is None:
        return []
    return LogEntry.objects.log_actions(
        user_id=request.user.pk, queryset=rows, action_flag=flag, change_message=message
    )


def admin_actor(request: HttpRequest) -> operations.Actor:
    """The signed-in user acting through the admin."""
    return operations.Actor.of_request(request, OperatorAction.Door.ADMIN)


def report_outcome(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest, outcome: Outcome
) -> None:
    """Tell the operator what an operation did, in its one wording: a success, or a warning when
    something was skipped or not found."""
    level = messages.WARNING if outcome.skipped or outcome.not_found else messages.SUCCESS
    model_admin.message_user(request, outcome.message, level)
