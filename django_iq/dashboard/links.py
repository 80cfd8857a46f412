"""Where each number of the dashboard comes from: the admin changelist, filtered with the
admin's own list filters, that lists the rows a number counts. Following a link shows as many
rows as the number said (when nothing changed in between)."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlencode

from django.urls import NoReverseMatch, reverse

from django_iq.states import FAILED
from django_iq.states import OutcomeStatus as Status

# Outcome statuses that count as failures in the per-minute tallies (timeouts included).
FAILED_STATUSES = f"{Status.FAILED.value},{Status.TIMED_OUT.value}"


class Links:
    """Changelist URLs of one admin site; every method returns None when that site does not
    register the model (or there is no admin), and the dashboard then shows the bare number."""

    def __init__(self, site_name: str | None) -> None:
        self.site_name = site_name

    def _url(self, model: str, **query: str | None) -> str | None:
        if self.site_name is None:
            return None
        try:
            url = reverse(f"{self.site_name}:django_iq_{model}_changelist")
        except NoReverseMatch:
            return None
        params = {key: value for key, value in query.items() if value is not None}
        return f"{url}?{urlencode(params)}" if params else url

    def entries(self, queue: str | None = None, state: str | None = None) -> str | None:
        """Entries of ``queue`` (all queues: None) in ``state``, one of ``COUNTED_STATES``;
        ``failed`` leads to the final error records, the entries being gone."""
        if state == FAILED:
            return self.failed(queue)
        return self._url("entry", queue__name__exact=queue, state=state)

    def failed(self, queue: str | None = None) -> str | None:
        """Final error records not requeued: the entries shown as failed."""
        return self._url("entryerror", queue__name__exact=queue, is_final__exact="1", requeued="no")

    def workers(self, status: str | None = "live", throttled: bool = False) -> str | None:
        """Worker processes by status (``live``, ``stopped``, ``dead``; None: all)."""
        return self._url("worker", status=status, is_throttled__exact="1" if throttled else None)

    def outcomes(
        self, since: datetime, job: str | None = None, failed: bool | None = None
    ) -> str | None:
        """Runs that ended since ``since``: all, failed (timeouts included) or succeeded."""
        status = None
        if failed is True:
            status = FAILED_STATUSES
        elif failed is False:
            status = Status.SUCCEEDED.value
        return self._url(
            "runoutcome",
            job=job,
            status__in=status,
            finished_at__gte=since.isoformat(),
        )

    def running(self) -> str | None:
        """Every entry a live worker is running."""
        return self._url("entry", state="running")

    def entry(self, entry_id: int) -> str | None:
        if self.site_name is None:
            return None
        try:
            return reverse(f"{self.site_name}:django_iq_entry_change", args=[entry_id])
        except NoReverseMatch:
            return None

    def locks(self) -> str | None:
        return self._url("grouplock")
