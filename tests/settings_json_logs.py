"""The test settings with the JSON logging of docs/howto/logging.md: one JSON object per line on
stderr, for django_iq's records and the jobs' own. tests/ops/test_structured_logs.py starts
workers with these settings."""

from tests.settings import *  # noqa: F403

# As docs/howto/logging.md writes it.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"job_context": {"()": "django_iq.logs.JobContextFilter"}},
    "formatters": {"json": {"()": "django_iq.logs.JsonFormatter"}},
    "handlers": {
        "json": {
            "class": "logging.StreamHandler",
            "formatter": "json",
            "filters": ["job_context"],
        },
    },
    "root": {"handlers": ["json"], "level": "INFO"},
}
