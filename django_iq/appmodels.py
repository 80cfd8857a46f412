"""The app's models, reached by name through Django's app registry.

``models.py`` imports the managers to attach them, and ``django_iq/__init__.py`` imports the
registry before any model can be loaded, so neither the managers nor the registry may import
``models.py``. They reach the models as ``iq.Entry``, ``iq.GroupLock``... instead: looked up on
first use, once Django's apps are ready, and kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.apps import apps

if TYPE_CHECKING:
    from django_iq import models


class AppModels:
    """``iq.Entry`` is ``django_iq.models.Entry``, looked up when first used."""

    if TYPE_CHECKING:
        Queue: type[models.Queue]
        Entry: type[models.Entry]
        GroupLock: type[models.GroupLock]
        EntryError: type[models.EntryError]
        Worker: type[models.Worker]
        CronJob: type[models.CronJob]
        LeaderLease: type[models.LeaderLease]
        DisabledJob: type[models.DisabledJob]
        JobLimit: type[models.JobLimit]
        EntryDependency: type[models.EntryDependency]
        JobStart: type[models.JobStart]
        RunOutcome: type[models.RunOutcome]
        QueueMinute: type[models.QueueMinute]
        QueueTotal: type[models.QueueTotal]
        JobMinute: type[models.JobMinute]
        QueueLatencyMinute: type[models.QueueLatencyMinute]
        QueueDepthMinute: type[models.QueueDepthMinute]
        OperatorAction: type[models.OperatorAction]
        UniqueKey: type[models.UniqueKey]
        Batch: type[models.Batch]
        ApiToken: type[models.ApiToken]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        model = apps.get_model("django_iq", name)
        setattr(self, name, model)
        return model


iq = AppModels()
