"""The only reader of ``settings.DJANGO_IQ``: defaults, types, environment overrides, cache reset."""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from django_iq.exceptions import ImproperlyConfiguredIQ
from django_iq.states import MAX_PRIORITY, MIN_PRIORITY

ENV_PREFIX = "DJANGO_IQ_"


@dataclass(frozen=True)
class Setting:
    """One key of the ``DJANGO_IQ`` dict: its default, accepted types and lower bound."""

    default: Any
    types: tuple[type, ...]
    minimum: float | None = None
    maximum: float | None = None
    env: bool = False  # may an environment variable DJANGO_IQ_<KEY> override it?


# Each key with its type, default and unit (the unit is in the name). See docs/reference/settings.md.
SETTINGS: dict[str, Setting] = {
    # Queues created on first use, as
    # {"name": {"weight": 1, "max_concurrency": None, "alert_waiting_seconds": None}}.
    "QUEUES": Setting({}, (dict,)),
    "DEFAULT_QUEUE": Setting("default", (str,)),
    "DEFAULT_PRIORITY": Setting(0, (int,), MIN_PRIORITY, MAX_PRIORITY),
    "DEFAULT_MAX_ATTEMPTS": Setting(3, (int,), 1, 100_000),
    "BACKOFF_BASE_SECONDS": Setting(2.0, (int, float), 0, 365 * 86_400),
    "BACKOFF_MAX_SECONDS": Setting(3600.0, (int, float), 0, 365 * 86_400),
    "BACKOFF_JITTER": Setting(0.25, (int, float), 0, 1),
    # How often an entry may ``raise Snooze(...)`` before it fails for good (per job:
    # ``@job(max_snoozes=...)``).
    "MAX_SNOOZES": Setting(100, (int,), 0, 100_000),
    # Extra modules imported to register jobs, besides each installed app's ``jobs`` module.
    "JOB_MODULES": Setting([], (list, tuple)),
    "PROCESSING_THREADS": Setting(4, (int,), 1, 512, env=True),
    "SCHEDULING_THREADS": Setting(1, (int,), 1, 16, env=True),
    "CLAIM_BATCH_SIZE": Setting(100, (int,), 1, 10_000),
    # Claims a worker may hold waiting per processing thread, while its jobs are short.
    # Celery's default prefetch multiplier is 4 too; here it applies to short jobs only.
    "PREFETCH_PER_THREAD": Setting(4, (int,), 0, 64, env=True),
    # ... and up to this many per process however few its threads, while the jobs are so short
    # that the threads finish them within PREFETCH_BELOW_SECONDS: a claim statement costs a
    # process of one thread what it costs a process of eight. 64: at 24 processes of one thread
    # the drain of no-op jobs went from 0.70x of 2 processes of 4 threads (with 32) to 0.98x.
    "PREFETCH_PER_PROCESS": Setting(64, (int,), 0, 1024, env=True),
    "PREFETCH_BELOW_SECONDS": Setting(0.1, (int, float), 0, 3600),
    "POLL_INTERVAL_SECONDS": Setting(1.0, (int, float), 0.01, 3600, env=True),
    # PostgreSQL: enqueues send NOTIFY and idle workers LISTEN, so a new entry starts within
    # milliseconds; polling every POLL_INTERVAL_SECONDS stays as the fallback.
    "LISTEN_NOTIFY": Setting(True, (bool,)),
    # The DATABASES alias workers LISTEN on; None: the entries' write database. Behind a pooler
    # in transaction mode (PgBouncer), an alias connecting to PostgreSQL directly.
    # The DATABASES alias every django_iq table, statement, LISTEN and migration uses, with
    # DATABASE_ROUTERS = ["django_iq.routers.QueueRouter"]; None: the application's database.
    "DATABASE": Setting(None, (str, type(None))),
    "LISTEN_DATABASE": Setting(None, (str, type(None))),
    "PROMOTE_INTERVAL_SECONDS": Setting(1.0, (int, float), 0.01, 3600),
    "HEARTBEAT_INTERVAL_SECONDS": Setting(5.0, (int, float), 0.1, 3600, env=True),
    "SHUTDOWN_GRACE_SECONDS": Setting(30.0, (int, float), 0, 86_400, env=True),
    # A running job's progress (django_iq.set_progress) is written at most once per this many
    # seconds per entry; reports in between are held and the last one written later.
    "PROGRESS_INTERVAL_SECONDS": Setting(1.0, (int, float), 0.05, 3600, env=True),
    # A job's timeout when neither @job(timeout=...) nor using(timeout=...) gives one; None: none.
    "DEFAULT_TIMEOUT_SECONDS": Setting(
        None, (int, float, type(None)), 0.001, 365 * 86_400, env=True
    ),
    # How long a job may go on after JobTimeout was raised in it (blocked in C code) before its
    # worker gives the entry up and exits to be replaced (docs/howto/timeouts.md).
    "TIMEOUT_GRACE_SECONDS": Setting(30.0, (int, float), 0, 86_400, env=True),
    # None (the default): CPU use never throttles; memory use does (above 90 %, until 80 %).
    "CPU_THROTTLE_PERCENT": Setting(None, (int, float, type(None)), 1, 100, env=True),
    "CPU_RESUME_PERCENT": Setting(85.0, (int, float), 0, 100, env=True),
    "MEMORY_THROTTLE_PERCENT": Setting(90.0, (int, float), 1, 100, env=True),
    "MEMORY_RESUME_PERCENT": Setting(80.0, (int, float), 0, 100, env=True),
    # CPU and memory are read at most this often; each CPU reading covers this window.
    "GOVERNOR_SAMPLE_SECONDS": Setting(1.0, (int, float), 0.05, 60),
    "TRACEBACK_MAX_CHARS": Setting(20_000, (int,), 1_000, 10_000_000),
    # An exception's message is stored (and logged) cut to this many characters.
    "ERROR_MESSAGE_MAX_CHARS": Setting(2_000, (int,), 100, 1_000_000),
    # The JSON of one entry's arguments (args and kwargs) may take at most this many bytes.
    "MAX_ARGUMENTS_BYTES": Setting(1_048_576, (int,), 1_024, 256 * 1_048_576),
    # Development only: run ready entries in the enqueuing process once its transaction
    # commits (docs/howto/testing.md); check django_iq.W003 warns when DEBUG is False.
    "RUN_ON_COMMIT": Setting(False, (bool,)),
    # -- the leader --------------------------------------------------------------------------
    # Cron jobs: {"name": {"job": "app.jobs.f", "schedule": "*/5 * * * *", "args": [], ...}}.
    "CRON": Setting({}, (dict,)),
    "LEADER_LEASE_SECONDS": Setting(15.0, (int, float), 1, 3600, env=True),
    "LEADER_POLL_SECONDS": Setting(1.0, (int, float), 0.01, 600, env=True),
    "WORKER_SILENT_AFTER_SECONDS": Setting(30.0, (int, float), 0.1, 86_400, env=True),
    "RECOVERY_INTERVAL_SECONDS": Setting(5.0, (int, float), 0.01, 3600),
    "PRIORITY_DECAY_STEP": Setting(10, (int,), 0, 200),
    "CRON_INTERVAL_SECONDS": Setting(1.0, (int, float), 0.01, 3600),
    "PRUNE_INTERVAL_SECONDS": Setting(60.0, (int, float), 0.01, 86_400),
    "PRUNE_BATCH_SIZE": Setting(1000, (int,), 1, 100_000),
    # PostgreSQL: the leader vacuums a hot table (entries, locks, workers, results) with more
    # than this many dead rows, and more dead rows than live ones; it looks this often.
    "VACUUM_INTERVAL_SECONDS": Setting(30.0, (int, float), 0.01, 86_400),
    "VACUUM_DEAD_ROWS": Setting(10_000, (int,), 1, 1_000_000_000),
    # How often the leader merges the waiting entries of groups of jobs with @job(merge=...).
    "COMPACT_INTERVAL_SECONDS": Setting(10.0, (int, float), 0.01, 86_400),
    "ERROR_RETENTION_SECONDS": Setting(7 * 86_400.0, (int, float), 1),
    "WORKER_RETENTION_SECONDS": Setting(86_400.0, (int, float), 1),
    # Outcome records (one row per run that ended, Django Tasks results among them) are kept
    # this long after the run finished.
    "OUTCOME_RETENTION_SECONDS": Setting(86_400.0, (int, float), 1),
    # PostgreSQL: outcome records live in partitions this wide (by when the run finished); the
    # leader creates them ahead and drops a whole one once all of it is past the retention.
    "OUTCOME_PARTITION_SECONDS": Setting(3600, (int,), 60, 7 * 86_400),
    # A return value whose JSON takes more bytes is stored as a marker saying so.
    "OUTCOME_MAX_RETURN_BYTES": Setting(65_536, (int,), 0, 64 * 1_048_576),
    # Per-minute throughput rows (the dashboard's charts) are kept this long.
    "METRICS_RETENTION_SECONDS": Setting(86_400.0, (int, float), 3600),
    "AUDIT_RETENTION_SECONDS": Setting(90 * 86_400.0, (int, float), 86_400),
    # -- operations --------------------------------------------------------------------------
    # A queue raises an alarm when entries have awaited compute this long and no live worker
    # serves it, or nothing started in it for as long (per queue: alert_waiting_seconds).
    "ALERT_WAITING_SECONDS": Setting(300, (int,), 1, 365 * 86_400, env=True),
    # The autoscaling signal: the processing threads the waiting work needs to be done within
    # this many seconds (django_iq/autoscale.py).
    "AUTOSCALE_TARGET_SECONDS": Setting(60.0, (int, float), 1, 86_400, env=True),
    # Bearer token letting Prometheus scrape the metrics without a user; None: staff with
    # view_queue only (signed in, or with an API token).
    "METRICS_TOKEN": Setting(None, (str, type(None))),
}


class IQSettings:
    """Typed access to the merged settings: ``iq_settings.HEARTBEAT_INTERVAL_SECONDS``."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] | None = None

    def user_settings(self) -> dict[str, Any]:
        """Return the user's ``DJANGO_IQ`` dict as written (empty when unset)."""
        value = getattr(settings, "DJANGO_IQ", {})
        return value if isinstance(value, dict) else {}

    def _load(self) -> dict[str, Any]:
        merged = {key: spec.default for key, spec in SETTINGS.items()}
        merged.update({k: v for k, v in self.user_settings().items() if k in SETTINGS})
        for key, spec in SETTINGS.items():
            raw = os.environ.get(ENV_PREFIX + key)
            if spec.env and raw not in (None, ""):
                merged[key] = _parse_env(key, raw, spec)
        return merged

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in SETTINGS:
            raise AttributeError(f"django_iq has no setting {name!r}")
        if self._cache is None:
            self._cache = self._load()
        return self._cache[name]

    def reset(self) -> None:
        """Forget the merged values so the next read sees current settings."""
        self._cache = None


def _parse_env(key: str, raw: str, spec: Setting) -> Any:
    if type(None) in spec.types and raw.strip().lower() in ("none", "off"):
        return None
    try:
        value = int(raw) if spec.types == (int,) else float(raw)
    except ValueError:
        raise ImproperlyConfiguredIQ(
            f"Environment variable {ENV_PREFIX}{key}={raw!r} is not a number; "
            f"set it to a {'whole ' if spec.types == (int,) else ''}number or unset it."
        ) from None
    # The system checks only see the settings dict, so the range is enforced here; "nan" and
    # "inf" parse as floats but would silently disable every comparison made with them.
    if (
        not math.isfinite(value)
        or (spec.minimum is not None and value < spec.minimum)
        or (spec.maximum is not None and value > spec.maximum)
    ):
        upper = spec.maximum if spec.maximum is not None else "∞"
        raise ImproperlyConfiguredIQ(
            f"Environment variable {ENV_PREFIX}{key}={raw!r} is out of range "
            f"[{spec.minimum}, {upper}]; set it within the range or unset it."
        )
    return value


iq_settings = IQSettings()

# The environment variable naming the node a process runs on.
HOST_NAME_VARIABLE = "DJANGO_IQ_HOST_NAME"


def host_name() -> str:
    """The node this process runs on, as workers report it and per-node caps count it: the
    ``DJANGO_IQ_HOST_NAME`` environment variable, else the machine's host name."""
    return os.environ.get(HOST_NAME_VARIABLE) or socket.gethostname()


@receiver(setting_changed)
def _reset_on_change(*, setting: str, **kwargs: Any) -> None:
    if setting == "DJANGO_IQ":
        iq_settings.reset()
