"""Settings for the example project, read from the environment with django-environ.

The defaults are for trying the project on a laptop (SQLite, DEBUG on, a public secret key). In
production set ``DATABASE_URL``, ``SECRET_KEY``, ``DEBUG=false`` and ``ALLOWED_HOSTS``.
"""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

SECRET_KEY = env.str("SECRET_KEY", default="django-iq-example-not-secret")
DEBUG = env.bool("DEBUG", default=True)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_iq",
    "shop",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # IMMEDIATE transactions take the write lock up front, so the worker's threads queue for it
    # (up to ``timeout`` seconds) instead of failing with "database is locked" on upgrade; WAL
    # lets the web page and the demo's progress bar read while a job writes.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"transaction_mode": "IMMEDIATE", "timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"}
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"

DJANGO_IQ = {
    "QUEUES": {
        "default": {},
        # Emails get twice the share of a weight-1 queue when every queue has work.
        "emails": {"weight": 2},
        "reports": {},
    },
    # Short polls so the demo's retries (backoff of a fraction of a second) run without delay.
    "POLL_INTERVAL_SECONDS": 0.25,
    "PROMOTE_INTERVAL_SECONDS": 0.25,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django_iq": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
        "shop": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    },
}
