"""The django_iq AppConfig: ready() wires checks and receivers, nothing more."""

from django.apps import AppConfig


class DjangoIQConfig(AppConfig):
    name = "django_iq"
    verbose_name = "Job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_iq import checks, receivers  # noqa: F401  (registers checks and receivers)
