"""SQL helpers the other query modules share: column names, vendor dispatch, the database's
clock, the notification channel, and rows read back into model instances."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from django.db import connections
from django.db.models import DateTimeField, ExpressionWrapper
from django.db.models.functions import Now

T = TypeVar("T")


def db_now_plus(seconds: float) -> Any:
    """Database time plus ``seconds``, so leases never depend on the hosts' clocks."""
    return ExpressionWrapper(Now() + timedelta(seconds=seconds), output_field=DateTimeField())


def columns(connection: Any, model: Any) -> dict[str, str]:
    """Field name to quoted column name, for each concrete field of ``model``."""
    quote = connection.ops.quote_name
    return {f.name: str(quote(str(f.column))) for f in model._meta.concrete_fields}


def _template(templates: Mapping[str, T], vendor: str, what: str) -> T:
    try:
        return templates[vendor]
    except KeyError:
        raise NotImplementedError(
            f"django_iq cannot {what} on the {vendor!r} database; supported: "
            "PostgreSQL, MariaDB/MySQL and SQLite."
        ) from None


# The database's clock as the row is written (PostgreSQL's CURRENT_TIMESTAMP and NOW() are the
# start of the transaction; CLOCK_TIMESTAMP() is not). A lock's locked_at is stamped this way,
# after its transaction holds every row lock it waited for.
_DB_CLOCK_BY_VENDOR = {
    "postgresql": "CLOCK_TIMESTAMP()",
    "mysql": "CURRENT_TIMESTAMP(6)",
    "sqlite": "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW')",
}


# The channel PostgreSQL NOTIFY wakes idle workers on; the payload is the queue's name. A
# notification is sent only when its transaction commits, and PostgreSQL folds the same
# channel and payload sent many times in one transaction into one.
NOTIFY_CHANNEL = "django_iq"
# The channel that tells waiting callers (``django_iq.wait``) that an entry ended; the payload
# is the entry's id. Sent for a success only when a caller flagged the entry (``awaited``), for
# a final failure or a cancel always (they are few).
ENDED_CHANNEL = "django_iq_ended"
# On NOTIFY_CHANNEL, the payload of a cancel requested for a running or claimed entry is this
# followed by the entry's id. (Work in a queue whose name started with it would not wake
# listening workers: it would wait for their poll.)
CANCEL_PREFIX = "cancel:"


def _stored_fields(model: Any) -> list[Any]:
    """The fields an insert writes: the concrete ones, an auto primary key left out."""
    return [f for f in model._meta.concrete_fields if f is not model._meta.auto_field]


_LOADERS: dict[Any, tuple[list[str], list[Any]]] = {}


def _instance(using: str, model: Any, row: Sequence[Any]) -> Any:
    """A model instance from a row of its concrete fields, as the ORM would load it (on
    PostgreSQL, whose driver returns dates and numbers typed)."""
    loader = _LOADERS.get(model)
    if loader is None:
        fields = model._meta.concrete_fields
        loader = _LOADERS[model] = (
            [f.attname for f in fields],
            [getattr(f, "from_db_value", None) for f in fields],
        )
    attnames, converters = loader
    connection = connections[using]
    values = [
        value if convert is None else convert(value, None, connection)
        for convert, value in zip(converters, row, strict=True)
    ]
    return model.from_db(using, attnames, values)
