"""The one audit sink of operator actions, whichever door they come through (the admin, the HTTP
API, an ``iq_*`` command). In the action's own transaction it writes:

- a log line (logger ``django_iq.operations``, INFO);
- the action's ``OperatorAction`` record: who, through which door, what, to what, the counts
  and the message (``record``, called by every function of ``django_iq.operations``);
- when Django's admin is installed and a signed-in user acted, one admin log entry
  (``LogEntry``) per object changed, so that an object's history in the admin shows what was
  done to it through any door (``admin_log``, and ``admin_log_described`` for an action named
  by filters rather than by objects).
"""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from django.apps import apps
from django.db.models import Model
from django.http import HttpRequest

from django_iq.logs import get_logger
from django_iq.models import OperatorAction

if TYPE_CHECKING:
    from django_iq.operations import ActionResult

logger = get_logger("django_iq.operations")

# What an action did to an object, as Django's admin log says it.
Effect = Literal["addition", "change", "deletion"]


@dataclass(frozen=True)
class Actor:
    """Who acts, and through which door (``OperatorAction.Door``)."""

    door: str
    name: str
    user_pk: Any = None

    @classmethod
    def of_request(cls, request: HttpRequest, door: str) -> Actor:
        user = request.user
        return cls(door=door, name=user.get_username(), user_pk=user.pk)

    @classmethod
    def of_command(cls, command: str) -> Actor:
        """The operating-system user running ``manage.py command`` on this host."""
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # no name for the uid (a container)
            user = f"uid {os.getuid()}"
        return cls(
            door=OperatorAction.Door.COMMAND, name=f"{user}@{socket.gethostname()} ({command})"
        )


def record(outcome: ActionResult, actor: Actor, target: str) -> ActionResult:
    """Log ``outcome`` and write its ``OperatorAction`` record; return it."""
    logger.info(
        "operator action=%s door=%s actor=%s target=%s: %s",
        outcome.action,
        actor.door,
        actor.name,
        target,
        outcome.message,
    )
    OperatorAction.objects.record(
        door=actor.door,
        actor=actor.name,
        user_pk=actor.user_pk,
        action=outcome.action,
        target=target,
        # A cancel requested from the worker running the entry counts as done: it was asked
        # for, and the message says which.
        done=outcome.done_count + len(outcome.requested),
        skipped=len(outcome.skipped),
        not_found=len(outcome.not_found),
        message=outcome.message,
    )
    return outcome


def _admin_logs(actor: Actor) -> bool:
    """Whether Django's admin log takes this actor's actions: the admin is installed and a
    signed-in user acted (a command has no user)."""
    return actor.user_pk is not None and apps.is_installed("django.contrib.admin")


def admin_log(actor: Actor, objects: Sequence[Model], effect: Effect, message: str) -> None:
    """One admin log entry per object of ``objects`` (in one insert): ``actor`` did ``effect``
    to it, said by ``message``."""
    if not objects or not _admin_logs(actor):
        return
    from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry

    flag = {"addition": ADDITION, "change": CHANGE, "deletion": DELETION}[effect]
    LogEntry.objects.log_actions(
        user_id=actor.user_pk, queryset=list(objects), action_flag=flag, change_message=message
    )


def log_cancels(actor: Actor, entries: Sequence[Model], outcome: Any, how: str) -> None:
    """Django's admin log of a cancel (``operations.cancel``'s ``outcome``) of ``entries``:
    a deletion for each entry cancelled, a change for each whose cancel was requested from
    the worker running it; ``how`` says through which door."""
    done, requested = set(outcome.done), set(outcome.requested)
    admin_log(actor, [e for e in entries if e.pk in done], "deletion", f"Cancelled {how}.")
    admin_log(
        actor,
        [e for e in entries if e.pk in requested],
        "change",
        f"Cancel requested {how}: the worker running it stops it.",
    )


def admin_log_described(actor: Actor, model: type[Model], description: str, message: str) -> None:
    """One admin log entry for a change to the rows of ``model`` named by ``description``
    (a requeue by filters names the filters, not each record)."""
    if not _admin_logs(actor):
        return
    from django.contrib.admin.models import CHANGE, LogEntry
    from django.contrib.contenttypes.models import ContentType

    LogEntry.objects.create(
        user_id=actor.user_pk,
        content_type=ContentType.objects.get_for_model(model),
        object_id=None,
        object_repr=description[:200],
        action_flag=CHANGE,
        change_message=message,
    )
