"""The django_iq exception hierarchy: ``IQError`` at the base, builtin bases where callers expect them."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.db import OperationalError


class IQError(Exception):
    """Base class of every django_iq error."""


class ImproperlyConfiguredIQ(IQError, ImproperlyConfigured):
    """The ``DJANGO_IQ`` settings or a job declaration are wrong."""


class JobNotRegistered(IQError, LookupError):
    """A job name does not name a job registered with ``@job``."""


class InvalidJobArguments(IQError, TypeError):
    """Job arguments cannot be stored as JSON."""


class InvalidJobOptions(IQError, ValueError):
    """An option given to ``@job`` or ``using()`` is unknown or out of range."""


class QueueNotFound(IQError, LookupError):
    """A queue name is neither in the database nor declared in settings or by a job."""


class LeadershipLost(IQError):
    """The leader's lease expired or was taken over; it must stop acting."""


class WorkerLost(IQError):
    """Recorded (never raised) when recovery finds an entry's worker dead or no longer holding it."""


class EntryCancelled(IQError):
    """Recorded (never raised) on the result of a task whose entry was cancelled before it ran."""


class DatabaseUnavailable(IQError, OperationalError):
    """The database could not be reached (down, restarting, or the connection was cut).

    Raised by ``enqueue()`` and ``enqueue_many()`` at once, without waiting or retrying, so a
    request can answer quickly; nothing was enqueued. A subclass of Django's
    ``OperationalError``, so existing handlers of that still catch it.
    """
