"""What a job's entries are enqueued with: ``JobOptions`` (queue, priority, attempts, group
key or group_by and merge, backoff, run time, unique key and window) and their validation, and ``JobCatalog``, what the managers need to know
of registered jobs, handed to them by the caller so that they never import the registry."""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from django.utils import timezone

from django_iq.bounds import (
    MAX_ATTEMPTS_LIMIT,
    MAX_BACKOFF_SECONDS,
    MAX_INT,
    MAX_UNIQUE_FOR_SECONDS,
    capped_backoff,
    run_at_problem,
    text_problem,
)
from django_iq.conf import iq_settings
from django_iq.exceptions import Fail, InvalidJobOptions, RetryAfter
from django_iq.states import MAX_PRIORITY, MIN_PRIORITY
from django_iq.wording import close_names

# An entry's lock key is "g:" + its group key, stored in a 200-character column.
MAX_GROUP_KEY_LENGTH = 198
# Options accepted by ``@job(...)`` and ``Job.using(...)``; ``run_at`` only by ``using``.
JOB_OPTIONS = (
    "queue",
    "priority",
    "max_attempts",
    "group_key",
    "group_by",
    "merge",
    "backoff_base_seconds",
    "backoff_max_seconds",
    "retry_on",
    "dont_retry_on",
    "max_snoozes",
    "unique",
    "unique_for",
    "timeout",
    "max_concurrency",
    "max_concurrency_per_node",
    "rate_limit",
    "concurrency_key",
    "rate_limit_key",
    "keep_outcomes",
    "expires",
)
# Backoff, the retry policy and the limits belong to the job (workers read them from the
# registry), so using() cannot change them.
USING_OPTIONS = (
    "queue",
    "priority",
    "max_attempts",
    "group_key",
    "run_at",
    "unique_key",
    "unique_for",
    "timeout",
    "after",
    "on_parent_failure",
    "expires",
)
# What a child does when a parent (using(after=...)) fails for good: end too, or run anyway.
PARENT_FAILURE_POLICIES = ("fail", "run")
# Caps on running entries, and the most starts a rate limit allows per period.
MAX_LIMIT = 100_000
# Rate limit periods: "100/m", "5/10s", "1000/h", "10000/d"; at most a day.
RATE_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hour": 3600.0}
RATE_UNITS["d"] = RATE_UNITS["day"] = 86_400.0
RATE_LIMIT_PATTERN = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]+)\s*$")
MAX_RATE_PERIOD_SECONDS = 86_400.0
# Unique keys are stored in a 200-character column; a key made by ``unique=True`` takes 66.
MAX_UNIQUE_KEY_LENGTH = 200


def unknown_option(name: str, allowed: Sequence[str], where: str) -> InvalidJobOptions:
    close = close_names(name, allowed)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return InvalidJobOptions(
        f"Unknown option {name!r} for {where}.{hint} Valid options: {', '.join(allowed)}."
    )


def validate_priority(priority: Any) -> int:
    """Return ``priority`` if it is an int in -100..100, else raise ``InvalidJobOptions``."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidJobOptions(
            f"priority must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}, got {priority!r}."
        )
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidJobOptions(
            f"priority must be from {MIN_PRIORITY} to {MAX_PRIORITY}, got {priority}."
        )
    return priority


def validate_run_at(run_at: Any) -> datetime | timedelta | None:
    """Return ``run_at`` if it is an aware datetime, a timedelta (counted from each enqueue,
    not from this call) or None; raise ``InvalidJobOptions`` otherwise."""
    if run_at is None:
        return None
    if isinstance(run_at, timedelta):
        return run_at
    if not isinstance(run_at, datetime):
        raise InvalidJobOptions(
            f"run_at must be a datetime or a timedelta, got {type(run_at).__name__} {run_at!r}."
        )
    if timezone.is_naive(run_at):
        raise InvalidJobOptions(
            f"run_at {run_at.isoformat()} has no timezone; pass an aware datetime "
            "(django.utils.timezone.now() + timedelta(...))."
        )
    problem = run_at_problem(run_at)
    if problem is not None:
        raise InvalidJobOptions(f"{problem}.")
    return run_at


def validate_timeout(timeout: Any) -> float:
    """Return ``timeout`` (seconds, or a timedelta) as seconds if it is more than 0 and at most
    a year; raise ``InvalidJobOptions`` otherwise."""
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not 0 < seconds <= MAX_BACKOFF_SECONDS
    ):
        raise InvalidJobOptions(
            "timeout must be a number of seconds (or a timedelta) more than 0 and at most "
            f"{MAX_BACKOFF_SECONDS:,.0f} (a year), got {timeout!r:.80}."
        )
    return float(seconds)


def parent_ids(after: Any) -> tuple[int, ...]:
    """``after`` (entries, or their ids) as a tuple of ids; raise ``InvalidJobOptions`` for
    anything else, or an entry not saved."""
    if isinstance(after, (str, bytes)) or not hasattr(after, "__iter__"):
        raise InvalidJobOptions(
            f"after takes a list of entries or entry ids, got {type(after).__name__} {after!r:.80}."
        )
    ids = []
    for item in after:
        pk = getattr(item, "pk", item)
        if isinstance(pk, bool) or not isinstance(pk, int) or pk <= 0:
            raise InvalidJobOptions(
                f"after takes saved entries or entry ids (positive integers), got {item!r:.80}."
            )
        if pk > MAX_INT:  # no entry has one: ids are 64-bit, and SQLite cannot even look
            raise InvalidJobOptions(
                f"after takes entry ids, which are 64-bit integers (at most 2**63 - 1), got "
                f"an integer of {pk.bit_length()} bits."
            )
        ids.append(pk)
    return tuple(ids)


def parse_rate_limit(rate_limit: Any) -> tuple[int, float]:
    """``"100/m"`` as ``(100, 60.0)``: starts allowed, and the period in seconds. Units: s, m,
    h, d (or sec, min, hour, day), optionally after a number ("5/10s"). Raise
    ``InvalidJobOptions`` for anything else."""
    match = RATE_LIMIT_PATTERN.match(rate_limit) if isinstance(rate_limit, str) else None
    unit = RATE_UNITS.get(match.group(3).rstrip("s") or "s") if match else None
    if match is None or unit is None:
        raise InvalidJobOptions(
            'rate_limit must look like "100/m" (starts per s, m, h or d; or "5/10s"), '
            f"got {rate_limit!r:.80}."
        )
    count = int(match.group(1))
    period = float(match.group(2) or 1) * unit
    if not 1 <= count <= MAX_LIMIT or not 0 < period <= MAX_RATE_PERIOD_SECONDS:
        raise InvalidJobOptions(
            f"rate_limit allows 1 to {MAX_LIMIT:,} starts per period of at most a day, "
            f"got {rate_limit!r:.80}."
        )
    return count, period


def _exception_classes(name: str, value: Any) -> tuple[type[BaseException], ...]:
    """``value`` as a tuple of exception classes (one class is accepted alone), or raise."""
    classes = value if isinstance(value, (tuple, list)) else (value,)
    for item in classes:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise InvalidJobOptions(
                f"{name} takes exception classes, e.g. {name}=(ConnectionError, TimeoutError), "
                f"got {item!r:.80}."
            )
    return tuple(classes)


def validate_unique_for(unique_for: Any) -> timedelta:
    """``unique_for`` as a timedelta: a positive, finite timedelta or number of seconds of at
    most a year; raise ``InvalidJobOptions`` otherwise."""
    return _window(
        unique_for,
        "unique_for must be a timedelta or a number of seconds, more than 0 and at most "
        f"{MAX_UNIQUE_FOR_SECONDS:,.0f} (a year)",
    )


def _window(value: Any, expected: str) -> timedelta:
    """``value`` (a timedelta or a number of seconds, more than 0 and at most a year) as a
    timedelta; raise ``InvalidJobOptions`` saying ``expected`` otherwise."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        # Compared before any conversion: an int too large for a float must not overflow.
        seconds = value if 0 < value <= MAX_UNIQUE_FOR_SECONDS else math.nan
    else:
        raise InvalidJobOptions(f"{expected}, got {type(value).__name__} {value!r:.80}.")
    if not math.isfinite(seconds) or not 0 < seconds <= MAX_UNIQUE_FOR_SECONDS:
        raise InvalidJobOptions(f"{expected}, got {value!r:.80}.")
    window = value if isinstance(value, timedelta) else timedelta(seconds=seconds)
    if not window:
        raise InvalidJobOptions(f"{expected} (a microsecond or more), got {value!r:.80}.")
    return window


def validate_expires(expires: Any) -> timedelta | datetime:
    """``expires`` as a timedelta (from a positive, finite number of seconds or timedelta of at
    most a year) or an aware datetime within the bounds of ``run_at``; raise
    ``InvalidJobOptions`` otherwise."""
    if isinstance(expires, datetime):
        if timezone.is_naive(expires):
            raise InvalidJobOptions(
                f"expires {expires.isoformat()} has no timezone; pass an aware datetime."
            )
        problem = run_at_problem(expires)
        if problem is not None:
            raise InvalidJobOptions(f"expires: {problem}.")
        return expires
    return _window(
        expires,
        "expires must be a timedelta or a number of seconds, more than 0 and at most "
        f"{MAX_UNIQUE_FOR_SECONDS:,.0f} (a year), or an aware datetime",
    )


def expires_at(expires: timedelta | datetime | None, due: datetime) -> datetime | None:
    """When an entry due at ``due`` expires: ``expires`` itself, or ``due`` plus it."""
    if expires is None:
        return None
    if isinstance(expires, datetime):
        return expires.astimezone(UTC)
    return due + expires


def _text_option(name: str, value: str) -> None:
    problem = text_problem(value)
    if problem is not None:
        raise InvalidJobOptions(f"{name} {value!r:.80} {problem}; the database cannot store it.")


@dataclass(frozen=True)
class JobOptions:
    """Where, how urgently and how persistently a job's entries run."""

    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    group_key: str | None = None
    backoff_base_seconds: float | None = None
    backoff_max_seconds: float | None = None
    run_at: datetime | timedelta | None = field(default=None)
    # Exception classes: only these are retried (None: all), and these never are.
    retry_on: tuple[type[BaseException], ...] | None = None
    dont_retry_on: tuple[type[BaseException], ...] = ()
    max_snoozes: int | None = None
    # unique=True: a key made from the job's name and arguments; unique_key: one given.
    unique: bool = False
    unique_key: str | None = None
    # How long the key stays taken after its entry finished (None: it is free at once).
    unique_for: timedelta | None = None
    # Seconds a run may take before JobTimeout is raised in it (None: DEFAULT_TIMEOUT_SECONDS).
    timeout: float | None = None
    # The group key taken from the call: a parameter name or f(args, kwargs) (see group_keys.py),
    # and the fold merging the arguments of a group's waiting entries (compaction.py).
    group_by: Any = None
    merge: Any = None
    # At most this many entries of the job run at once in the cluster / on one node (host).
    max_concurrency: int | None = None
    max_concurrency_per_node: int | None = None
    # "N/period": at most N entries of the job start in any window of the period, cluster-wide.
    rate_limit: str | None = None
    # Per key: max_concurrency and rate_limit count each value of the key on their own (a
    # parameter name or f(args, kwargs), like group_by; see group_keys.key_of).
    concurrency_key: Any = None
    rate_limit_key: Any = None
    # Parent entries (or their ids) the entries wait for, and what a parent's failure does.
    after: tuple[int, ...] | None = None
    on_parent_failure: str = "fail"
    # False: runs of the job leave no outcome record (Django Tasks entries always do).
    keep_outcomes: bool = True
    # An entry not started by then never runs: a timedelta after it is due (when enqueued, or
    # its run_at), or, from using(), a datetime.
    expires: timedelta | datetime | None = None

    def __post_init__(self) -> None:
        for name in ("max_concurrency", "max_concurrency_per_node"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT
            ):
                raise InvalidJobOptions(
                    f"{name} must be an integer from 1 to {MAX_LIMIT:,}, got {value!r:.80}."
                )
        if self.rate_limit is not None:
            parse_rate_limit(self.rate_limit)
        for key, limit in (
            ("concurrency_key", "max_concurrency"),
            ("rate_limit_key", "rate_limit"),
        ):
            source = getattr(self, key)
            if source is None:
                continue
            if not (isinstance(source, str) and source) and not callable(source):
                raise InvalidJobOptions(
                    f"{key} must be a parameter name or a callable (args, kwargs) -> str, got "
                    f"{type(source).__name__} {source!r:.80}."
                )
            if getattr(self, limit) is None:
                raise InvalidJobOptions(
                    f"{key} counts {limit} per value of the key; give {limit} too, e.g. "
                    f"@job({limit}={'2' if limit == 'max_concurrency' else repr('10/m')}, "
                    f"{key}=...)."
                )
        if self.timeout is not None:
            object.__setattr__(self, "timeout", validate_timeout(self.timeout))
        if self.expires is not None:
            object.__setattr__(self, "expires", validate_expires(self.expires))
        if self.after is not None:
            object.__setattr__(self, "after", parent_ids(self.after))
            if self.unique or self.unique_key is not None:
                raise InvalidJobOptions("after cannot be combined with a unique key.")
        if self.on_parent_failure not in PARENT_FAILURE_POLICIES:
            raise InvalidJobOptions(
                f'on_parent_failure must be "fail" or "run", got {self.on_parent_failure!r:.80}.'
            )
        if not isinstance(self.keep_outcomes, bool):
            raise InvalidJobOptions(
                f"keep_outcomes must be True or False, got {self.keep_outcomes!r:.80}."
            )
        if not isinstance(self.unique, bool):
            raise InvalidJobOptions(f"unique must be True or False, got {self.unique!r:.80}.")
        if self.unique_for is not None:
            object.__setattr__(self, "unique_for", validate_unique_for(self.unique_for))
            if not self.unique and self.unique_key is None:
                raise InvalidJobOptions(
                    "unique_for needs a unique key: pass unique=True to @job, or unique_key "
                    "with unique_for to using()."
                )
        if self.unique_key is not None and (
            not isinstance(self.unique_key, str)
            or not 0 < len(self.unique_key) <= MAX_UNIQUE_KEY_LENGTH
        ):
            raise InvalidJobOptions(
                f"unique_key must be a string of 1 to {MAX_UNIQUE_KEY_LENGTH} characters, "
                f"got {self.unique_key!r:.80}."
            )
        if self.unique_key is not None:
            _text_option("unique_key", self.unique_key)
        for name in ("retry_on", "dont_retry_on"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _exception_classes(name, value))
        if self.max_snoozes is not None and (
            isinstance(self.max_snoozes, bool)
            or not isinstance(self.max_snoozes, int)
            or not 0 <= self.max_snoozes <= MAX_ATTEMPTS_LIMIT
        ):
            raise InvalidJobOptions(
                f"max_snoozes must be an integer from 0 to {MAX_ATTEMPTS_LIMIT:,}, "
                f"got {self.max_snoozes!r:.80}."
            )
        self._check_basics()

    def _check_basics(self) -> None:
        if self.queue is not None and (not isinstance(self.queue, str) or not self.queue.strip()):
            raise InvalidJobOptions(f"queue must be a non-empty string, got {self.queue!r}.")
        if self.queue is not None and len(self.queue) > 100:
            raise InvalidJobOptions(
                f"queue names are at most 100 characters, got {len(self.queue)}."
            )
        if self.queue is not None:
            _text_option("queue", self.queue)
        if self.priority is not None:
            validate_priority(self.priority)
        if self.max_attempts is not None and (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or not 1 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT
        ):
            raise InvalidJobOptions(
                f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS_LIMIT:,}, "
                f"got {self.max_attempts!r:.80}."
            )
        if self.group_key is not None and (
            not isinstance(self.group_key, str)
            or not 0 < len(self.group_key) <= MAX_GROUP_KEY_LENGTH
        ):
            raise InvalidJobOptions(
                f"group_key must be a string of 1 to {MAX_GROUP_KEY_LENGTH} characters, "
                f"got {self.group_key!r:.80}."
            )
        if self.group_key is not None:
            _text_option("group_key", self.group_key)
        for name in ("backoff_base_seconds", "backoff_max_seconds"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 <= value <= MAX_BACKOFF_SECONDS
            ):
                raise InvalidJobOptions(
                    f"{name} must be a number of seconds from 0 to {MAX_BACKOFF_SECONDS:,.0f} "
                    f"(a year), got {value!r:.80}."
                )
        if self.run_at is not None:
            validate_run_at(self.run_at)

    def merged(self, **overrides: Any) -> JobOptions:
        """Return a copy with ``overrides`` applied, validating names and values."""
        for name in overrides:
            if name not in USING_OPTIONS:
                raise unknown_option(name, USING_OPTIONS, "using()")
        if "run_at" in overrides:
            overrides["run_at"] = validate_run_at(overrides["run_at"])
        return replace(self, **overrides)

    @property
    def is_limited(self) -> bool:
        """Whether the job has a cap or a rate limit: its entries are claimed under them."""
        return bool(self.max_concurrency or self.max_concurrency_per_node or self.rate_limit)

    def limits(self) -> JobLimits:
        """The job's caps and rate limit, as workers publish them."""
        count, period = parse_rate_limit(self.rate_limit) if self.rate_limit else (None, None)
        return JobLimits(
            self.max_concurrency,
            self.max_concurrency_per_node,
            count,
            period,
            concurrency_keyed=self.concurrency_key is not None,
            rate_keyed=self.rate_limit_key is not None,
        )

    @property
    def queue_name(self) -> str:
        return self.queue or iq_settings.DEFAULT_QUEUE

    @property
    def effective_priority(self) -> int:
        return self.priority if self.priority is not None else iq_settings.DEFAULT_PRIORITY

    @property
    def effective_max_attempts(self) -> int:
        return (
            self.max_attempts if self.max_attempts is not None else iq_settings.DEFAULT_MAX_ATTEMPTS
        )

    def backoff_seconds(self, attempt: int) -> float:
        """The delay before retry number ``attempt`` (1-based), before jitter: the job's (or
        the settings') ``min(max, base * 2 ** (attempt - 1))``."""
        base = self.backoff_base_seconds
        cap = self.backoff_max_seconds
        base = iq_settings.BACKOFF_BASE_SECONDS if base is None else base
        cap = iq_settings.BACKOFF_MAX_SECONDS if cap is None else cap
        return capped_backoff(base, cap, attempt)

    def retries(self, exc: BaseException) -> bool:
        """Whether a failure raising ``exc`` may be retried: ``Fail`` never is; otherwise
        ``exc`` must be one of ``retry_on`` (when given) and none of ``dont_retry_on``."""
        if isinstance(exc, Fail):
            return False
        if isinstance(exc, RetryAfter):
            return True
        if self.dont_retry_on and isinstance(exc, self.dont_retry_on):
            return False
        return self.retry_on is None or isinstance(exc, self.retry_on)

    def unique_key_for(
        self, job_name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> str | None:
        """The entry's unique key: the one given with ``using()``, else, for ``unique=True``,
        one made from the job's name and its arguments as stored (JSON, keys sorted)."""
        if self.unique_key is not None:
            return self.unique_key
        if not self.unique:
            return None
        call = json.dumps([job_name, list(args), kwargs], sort_keys=True, separators=(",", ":"))
        return "u:" + hashlib.sha256(call.encode()).hexdigest()

    @property
    def effective_max_snoozes(self) -> int:
        return self.max_snoozes if self.max_snoozes is not None else iq_settings.MAX_SNOOZES

    def retry_delay_seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        """The wait before retrying after failed attempt ``attempt`` (1-based): the backoff
        times a jitter factor in ``[1 - BACKOFF_JITTER, 1 + BACKOFF_JITTER]``, so that the
        retries of a burst of failures spread out."""
        jitter = iq_settings.BACKOFF_JITTER
        factor = (rng or random).uniform(1 - jitter, 1 + jitter)
        return max(0.0, self.backoff_seconds(attempt) * factor)


@dataclass(frozen=True)
class JobLimits:
    """A job's caps and rate limit (None: none); ``concurrency_keyed`` and ``rate_keyed``: the
    cap and the rate limit count each value of the job's key on its own (``@job(
    concurrency_key=..., rate_limit_key=...)``), not the job as a whole."""

    max_concurrency: int | None = None
    max_concurrency_per_node: int | None = None
    rate_count: int | None = None
    rate_period_seconds: float | None = None
    concurrency_keyed: bool = False
    rate_keyed: bool = False

    @property
    def is_keyed(self) -> bool:
        return self.concurrency_keyed or self.rate_keyed

    @property
    def is_rated(self) -> bool:
        return self.rate_count is not None and self.rate_period_seconds is not None

    def room(self, running: int, running_on_node: int, recent_starts: int) -> int:
        """Claims the job-wide limits leave with ``running`` claims in the cluster,
        ``running_on_node`` on the claimer's node and ``recent_starts`` in the rate window (a
        count a limit does not use is not read; a limit per key is left to ``key_room``); may
        be negative."""
        left = 1 << 30
        if self.max_concurrency is not None and not self.concurrency_keyed:
            left = min(left, self.max_concurrency - running)
        if self.max_concurrency_per_node is not None:
            left = min(left, self.max_concurrency_per_node - running_on_node)
        if self.is_rated and not self.rate_keyed:
            left = min(left, self.rate_count - recent_starts)  # type: ignore[operator]
        return left

    def key_room(self, running_with_key: int, recent_starts_with_key: int) -> int:
        """Claims the limits per key leave to one entry's keys, with ``running_with_key``
        claims of its concurrency key running and ``recent_starts_with_key`` starts of its
        rate limit key in the window; may be negative."""
        left = 1 << 30
        if self.concurrency_keyed and self.max_concurrency is not None:
            left = min(left, self.max_concurrency - running_with_key)
        if self.rate_keyed and self.is_rated:
            left = min(left, self.rate_count - recent_starts_with_key)  # type: ignore[operator]
        return left


class JobCatalog(Protocol):
    """What the managers ask of the registered jobs; ``django_iq.registry.catalog`` is the one
    the runtime passes."""

    def declared_queues(self) -> Mapping[str, Mapping[str, Any]]:
        """Queue name to its options, for every queue declared in settings or by a job."""
        ...

    def queue_of(self, job_name: str) -> str:
        """The queue a job's entries go to by default; raise ``JobNotRegistered`` if unknown."""
        ...

    def max_attempts_of(self, job_name: str) -> int:
        """The attempts a job's entries get (the default for a job not registered here)."""
        ...

    def keeps_outcomes(self, job_name: str) -> bool:
        """Whether the job's runs leave outcome records (True for a job not registered here)."""
        ...

    def limit_keys_of(
        self, job_name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[str, str]:
        """The call's concurrency key and rate limit key ("" for none, or for a job not
        registered here); raise ``InvalidJobArguments`` if a key cannot be taken."""
        ...


def settings_queues() -> dict[str, dict[str, Any]]:
    """The queues declared in settings alone: the default queue and ``DJANGO_IQ["QUEUES"]``."""
    declared: dict[str, dict[str, Any]] = {iq_settings.DEFAULT_QUEUE: {}}
    declared.update({name: dict(options or {}) for name, options in iq_settings.QUEUES.items()})
    return declared
