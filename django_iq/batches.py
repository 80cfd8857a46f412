"""``django_iq.batch()``: entries enqueued in a ``with`` block form a batch, and a job given as
``on_complete`` runs once after every one of them has ended (see ``managers/batches.py`` for
how, and docs/howto/workflows.md for the guarantees)."""

from __future__ import annotations

import inspect
from contextvars import Token
from types import TracebackType
from typing import Any

from django.db import DatabaseError

from django_iq.appmodels import iq
from django_iq.exceptions import InvalidJobArguments, InvalidJobOptions, NestedBatch
from django_iq.logs import get_logger
from django_iq.managers.batches import COUNT_ARGUMENTS, OpenBatch, open_batch
from django_iq.registry import BoundJob, Job, catalog, get_job
from django_iq.serialization import validate_arguments

logger = get_logger(__name__)


class Batch:
    """The block of a batch: ``with django_iq.batch(on_complete=job) as b:``; ``b.id`` is the
    batch's id once the block is entered."""

    def __init__(self, on_complete: Job[Any, Any] | BoundJob | str, kwargs: dict[str, Any]) -> None:
        self.job = get_job(on_complete)
        self.options = (
            on_complete.options if isinstance(on_complete, BoundJob) else self.job.options
        )
        self.kwargs = _checked_kwargs(self.job, kwargs)
        if self.options.after is not None:
            raise InvalidJobOptions(
                f"on_complete {self.job.name} cannot wait for other entries (after=...): it "
                "already waits for every member of its batch."
            )
        if self.options.unique_key_for(self.job.name, (), self.kwargs) is not None:
            raise InvalidJobOptions(
                f"on_complete {self.job.name} has a unique key; a batch's callback is enqueued "
                "once per batch already. Pass a job without unique=True or unique_key."
            )
        self._open: OpenBatch | None = None
        self._token: Token[OpenBatch | None] | None = None

    @property
    def id(self) -> int:
        if self._open is None:
            raise AttributeError("A batch has an id once its block is entered.")
        return self._open.pk

    def __enter__(self) -> Batch:
        current = open_batch() or self._open
        if current is not None:
            raise NestedBatch(
                f"A batch's block is already open here (batch {current.pk}); "
                "batches do not nest. Enqueue the entries in the open block, or leave it first."
            )
        self._open = iq.Batch.objects.open(self.job.name, self.kwargs, self.options, catalog)
        self._token = iq.Batch.objects.enter(self._open)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._open is None or self._token is None:
            return
        iq.Batch.objects.leave(self._token)
        if exc_type is None:
            iq.Batch.objects.close(self._open)
            return
        # The block raised: members already written stay and the callback still runs once
        # they end; a batch without members goes, with its callback.
        try:
            iq.Batch.objects.close(self._open, discard_if_empty=True)
        except DatabaseError:
            # The block's error broke the caller's transaction: its rollback removes the batch
            # with everything else. The block's own error is the one to see.
            logger.warning("batch=%s not closed: its transaction is broken", self._open.pk)


def batch(on_complete: Job[Any, Any] | BoundJob | str, **kwargs: Any) -> Batch:
    """Return the block of a new batch: entries enqueued inside ``with batch(...) as b:`` (in
    this thread or task) are its members, and ``on_complete`` is enqueued once after every
    member has ended (succeeded, failed for good or was cancelled), called with ``kwargs``
    and ``batch_id``, ``succeeded`` and ``failed`` (counts of members).

    ``on_complete`` is a registered job, ``job.using(queue=..., priority=...)`` or a job's
    name. Raises ``JobNotRegistered``, ``InvalidJobArguments`` (kwargs not JSON, naming one of
    the counts, or not accepted by the job) or ``InvalidJobOptions`` here, and ``NestedBatch``
    when the block is entered inside another batch's; nothing is written then.
    """
    return Batch(on_complete, kwargs)


def _checked_kwargs(job: Job[Any, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` as stored, once they are JSON, leave the counts' names free and can be
    passed, with the counts, to the job's function."""
    taken = sorted(set(kwargs) & set(COUNT_ARGUMENTS))
    if taken:
        raise InvalidJobArguments(
            f"batch() adds {', '.join(COUNT_ARGUMENTS)} to on_complete's arguments; "
            f"{', '.join(taken)} cannot be given too. Rename the argument."
        )
    _, checked = validate_arguments((), kwargs)
    try:
        inspect.signature(job.func).bind(**checked, **dict.fromkeys(COUNT_ARGUMENTS, 0))
    except TypeError as exc:
        raise InvalidJobArguments(
            f"on_complete {job.name} cannot be called with {sorted(checked)} and "
            f"{', '.join(COUNT_ARGUMENTS)}: {exc}. Give it those keyword parameters."
        ) from None
    except ValueError:
        pass  # a callable without a signature Python can read: called as it is
    return checked
