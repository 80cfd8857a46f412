"""Minimal Django settings for django_iq in the peer benchmark: its defaults, nothing tuned.

The database comes from ``IQ_PEER_DB_URL`` (set by ``iq_bench.py``). Jobs and tasks are in
``iq_jobs``, listed in ``JOB_MODULES`` so workers import them.
"""

import os

from harness import django_database

SECRET_KEY = "iq-peer-benchmark-not-secret"  # noqa: S105 (a throwaway benchmark)
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django_iq"]
DATABASES = {"default": django_database(os.environ["IQ_PEER_DB_URL"])}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
TASKS = {"default": {"BACKEND": "django_iq.backends.IQBackend"}}
DJANGO_IQ = {"JOB_MODULES": ["iq_jobs"]}
