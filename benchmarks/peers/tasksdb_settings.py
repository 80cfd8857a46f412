"""Minimal Django settings for django-tasks-db in the peer benchmark: its defaults.

The database comes from ``IQ_PEER_DB_URL`` (set by ``tasksdb_bench.py``).
"""

import os

from harness import django_database

SECRET_KEY = "iq-peer-benchmark-not-secret"  # noqa: S105 (a throwaway benchmark)
DEBUG = False  # db_worker reloads on code changes when DEBUG is on
USE_TZ = True
INSTALLED_APPS = ["django_tasks", "django_tasks_db"]
DATABASES = {"default": django_database(os.environ["IQ_PEER_DB_URL"])}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
