"""``QueueRouter``: django_iq's tables, statements and migrations on the database alias
``DJANGO_IQ["DATABASE"]``, the application's on theirs (docs/howto/queue-database.md).

    DATABASES["queue"] = env.db("QUEUE_DATABASE_URL")
    DATABASE_ROUTERS = ["django_iq.routers.QueueRouter"]
    DJANGO_IQ = {"DATABASE": "queue"}

Without ``DATABASE`` the router has no opinion: every model goes where the other routers (or
``default``) send it.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Model

from django_iq.conf import iq_settings

APP_LABEL = "django_iq"


def queue_database() -> str | None:
    """The alias django_iq's tables live on, or None when they share the application's."""
    alias: str | None = iq_settings.DATABASE
    return alias


class QueueRouter:
    """Route django_iq's models to ``DJANGO_IQ["DATABASE"]`` and keep every other app's tables
    off that database."""

    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        return queue_database() if model._meta.app_label == APP_LABEL else None

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        return queue_database() if model._meta.app_label == APP_LABEL else None

    def allow_relation(self, obj1: Model, obj2: Model, **hints: Any) -> bool | None:
        alias = queue_database()
        if alias is None:
            return None
        inside = [obj._meta.app_label == APP_LABEL for obj in (obj1, obj2)]
        # django_iq's models relate to each other only: none refers to another app's row.
        return True if all(inside) else (False if any(inside) else None)

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        alias = queue_database()
        if alias is None:
            return None
        if app_label == APP_LABEL:
            return db == alias
        # Another app's tables stay off the queue's database (unless it is also theirs).
        return False if db == alias else None
