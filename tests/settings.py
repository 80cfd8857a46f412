"""Settings for django_iq's test suite: the database comes from DATABASE_URL (SQLite by default)."""

import json
import os
from datetime import datetime, timedelta
from pathlib import Path

import django
import environ

BASE_DIR = Path(__file__).resolve().parent
env = environ.Env()

SECRET_KEY = "django-iq-tests-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_iq",
    "tests.testapp",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
STATIC_URL = "/static/"  # the admin's styles, served by live_server to the browser tests
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

_sqlite_path = os.environ.get("DJANGO_IQ_TEST_SQLITE", str(BASE_DIR.parent / ".test-db.sqlite3"))
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{_sqlite_path}")}
_db = DATABASES["default"]
if _db["ENGINE"].endswith("sqlite3"):
    _db.setdefault("OPTIONS", {}).update(
        {"transaction_mode": "IMMEDIATE", "timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"}
    )
    # A file, not memory: worker processes started by the tests open the same database.
    _db["TEST"] = {"NAME": str(_db["NAME"]) + ".test"}
elif _db["ENGINE"].endswith("mysql"):
    _db.setdefault("OPTIONS", {}).update({"charset": "utf8mb4"})
    _db["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

TASKS = {"default": {"BACKEND": "django_iq.backends.IQBackend"}}

DJANGO_IQ = {
    "QUEUES": {"default": {}, "emails": {"weight": 2}, "reports": {}},
    "BACKOFF_BASE_SECONDS": 0.05,
    "BACKOFF_MAX_SECONDS": 0.2,
    "POLL_INTERVAL_SECONDS": 0.05,
    "HEARTBEAT_INTERVAL_SECONDS": 0.5,
    "PROMOTE_INTERVAL_SECONDS": 0.05,
    "LEADER_LEASE_SECONDS": 2,
    "LEADER_POLL_SECONDS": 0.1,
    "WORKER_SILENT_AFTER_SECONDS": 3,
    "RECOVERY_INTERVAL_SECONDS": 0.2,
    "CRON_INTERVAL_SECONDS": 0.1,
    # Tests must not be throttled by whatever else the CI machine runs.
    "MEMORY_THROTTLE_PERCENT": 100,
    "MEMORY_RESUME_PERCENT": 99,
}

if os.environ.get("DJANGO_IQ_TEST_CRON"):
    # A cron job for process tests: a cron expression, or an interval in seconds (the fault
    # suite's fires every second).
    _every = os.environ.get("DJANGO_IQ_TEST_CRON_EVERY")
    DJANGO_IQ["CRON"] = {
        "tick": {
            "job": os.environ.get("DJANGO_IQ_TEST_CRON_JOB", "tests.testapp.jobs.noop"),
            **(
                {"every": timedelta(seconds=float(_every))}
                if _every
                else {"schedule": os.environ.get("DJANGO_IQ_TEST_CRON_SCHEDULE", "* * * * *")}
            ),
            "args": json.loads(os.environ.get("DJANGO_IQ_TEST_CRON_ARGS", "[]")),
            "kwargs": json.loads(os.environ.get("DJANGO_IQ_TEST_CRON_KWARGS", "{}")),
        }
    }

if os.environ.get("DJANGO_IQ_TEST_SCHEDULES"):
    # Process tests of intervals and one-offs: each run of either leaves a RecordedRun.
    DJANGO_IQ["CRON"] = {
        "often": {
            "job": "tests.testapp.jobs.recorded",
            "args": ["often"],
            "every": timedelta(seconds=float(os.environ["DJANGO_IQ_TEST_SCHEDULES"])),
        },
        "once": {
            "job": "tests.testapp.jobs.recorded",
            "args": ["once"],
            "at": datetime.fromisoformat(os.environ["DJANGO_IQ_TEST_SCHEDULES_AT"]),
        },
    }

if os.environ.get("DJANGO_IQ_TEST_POOLED"):
    # The database is reached through PgBouncer in transaction mode (tests/pgbouncer): Django's
    # server-side cursors need their session, so they are off (docs/howto/deploy.md).
    _db["DISABLE_SERVER_SIDE_CURSORS"] = True
if os.environ.get("DJANGO_IQ_TEST_LISTEN_URL"):
    # Workers LISTEN on a connection of their own straight to PostgreSQL.
    DATABASES["listen"] = env.db_url_config(os.environ["DJANGO_IQ_TEST_LISTEN_URL"])
    DJANGO_IQ["LISTEN_DATABASE"] = "listen"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "django_iq": {
            "handlers": ["console"],
            "level": os.environ.get("DJANGO_IQ_LOG_LEVEL", "WARNING"),
        }
    },
}

# Django 6.1 warns (an error under the suite's filterwarnings) when mail is sent with no MAILERS;
# the test runner then swaps every mailer for the in-memory one, as it does EMAIL_BACKEND.
if django.VERSION >= (6, 1):
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}
