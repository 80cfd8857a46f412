"""Jobs the test suite enqueues; discovered by workers through the app's ``jobs`` module."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import time
from pathlib import Path
from typing import Any

from django_iq import (
    Fail,
    RetryAfter,
    Snooze,
    cancel_requested,
    current,
    job,
    set_progress,
    wait,
)
from django_iq.exceptions import WorkerFenced
from tests.testapp.models import JobRun, RecordedRun


@job
def record(token: str, group_key: str = "", seconds: float = 0.0) -> str:
    """Insert one JobRun with start/end times; the unique token proves exactly-once."""
    started = time.time()
    if seconds:
        time.sleep(seconds)  # the job's own work: a run that takes time, for overlap checks
    JobRun.objects.create(
        token=token,
        group_key=group_key,
        started_at=started,
        finished_at=time.time(),
        pid=os.getpid(),
    )
    return token


@job(queue="emails", max_attempts=3)
def flaky(token: str, fail_times: int) -> str:
    """Fail the first ``fail_times`` attempts (counted in JobRun rows), then succeed."""
    failures = JobRun.objects.filter(token__startswith=f"{token}:fail").count()
    if failures < fail_times:
        JobRun.objects.create(token=f"{token}:fail{failures}")
        raise RuntimeError(f"flaky failure {failures + 1} of {fail_times}")
    JobRun.objects.create(token=token)
    return token


@job(max_attempts=2)
def always_fails(message: str) -> None:
    raise ValueError(message)


@job
def wait_for_file(token: str, path: str, timeout_seconds: float = 30.0) -> str:
    """Record a start, then block until ``path`` exists (tests control when the job ends)."""
    JobRun.objects.create(
        token=f"{token}:started:{os.getpid()}", started_at=time.time(), pid=os.getpid()
    )
    deadline = time.monotonic() + timeout_seconds
    while not Path(path).exists() and time.monotonic() < deadline:
        time.sleep(0.02)  # the job polls the file the test creates to release it
    JobRun.objects.create(token=token, finished_at=time.time(), pid=os.getpid())
    return token


@job
def noop() -> None:
    return None


@job
def takes_anything(*args: Any, **kwargs: Any) -> None:
    """Any call fits: for tests of what arguments are stored, whatever the call."""
    return None


@job(max_attempts=3)
def kill_worker() -> None:
    """Kill the process running it, as a segfault or an OOM kill would."""
    JobRun.objects.create(token=f"kill:{os.getpid()}", pid=os.getpid())
    os.kill(os.getpid(), signal.SIGKILL)


@job(max_attempts=5)
def record_idempotent(token: str, seconds: float = 0.0) -> str:
    """Record a run the way a real idempotent job would: running it again changes nothing.

    For fault tests, where a database cut can leave a write committed but unacknowledged, so a
    retry of the same entry is expected (at least once) and must not fail.
    """
    if seconds:
        time.sleep(seconds)  # the job's own work, so runs are under way when the test cuts in
    JobRun.objects.get_or_create(
        token=token, defaults={"finished_at": time.time(), "pid": os.getpid()}
    )
    return token


@job(max_attempts=20)
def recorded(token: str, group_key: str = "", seconds: float = 0.0) -> str:
    """The fault suite's job: record this run's start (committed before the work) and end."""
    run = RecordedRun.objects.create(
        token=token, group_key=group_key, pid=os.getpid(), started_at=time.time()
    )
    try:
        if seconds:
            time.sleep(seconds)  # the job's own work: a run that takes time, for overlap checks
    except WorkerFenced:
        # Stopped by its worker's fence, which writes nothing for it: the run ended here (when
        # the database can be reached at all; a run cut off from it leaves no end).
        RecordedRun.objects.filter(pk=run.pk).update(finished_at=time.time())
        raise
    RecordedRun.objects.filter(pk=run.pk).update(finished_at=time.time())
    return token


def _run_number(token: str) -> int:
    """Record this run as ``token:<n>`` and return n (0 for the first run)."""
    runs = JobRun.objects.filter(token__startswith=f"{token}:run").count()
    JobRun.objects.create(token=f"{token}:run{runs}", started_at=time.time(), pid=os.getpid())
    return runs


@job(max_attempts=5)
def gives_up(token: str) -> None:
    """Ends its entry at once, with attempts left."""
    _run_number(token)
    raise Fail(f"{token}: nothing to do for a deleted account")


@job(max_attempts=3)
def comes_back(token: str, seconds: float) -> str:
    """Asks to be retried in ``seconds`` on its first run, then succeeds."""
    if _run_number(token) == 0:
        raise RetryAfter(seconds, "the API said: come back later")
    return token


@job(max_attempts=1, max_snoozes=3)
def polls(token: str, ready_after: int) -> str:
    """Snoozes until it has run ``ready_after`` times (an external system finishing)."""
    if _run_number(token) < ready_after:
        raise Snooze(0)
    return token


@job(max_attempts=3, retry_on=(ConnectionError,))
def retries_connections_only(token: str, error: str) -> None:
    _run_number(token)
    raise ConnectionError(token) if error == "connection" else ValueError(token)


@job(max_attempts=3, dont_retry_on=ValueError)
def never_retries_values(token: str, error: str) -> None:
    _run_number(token)
    raise ValueError(token) if error == "value" else RuntimeError(token)


@job(unique=True)
def refresh_account(account_id: int, full: bool = False) -> None:
    """At most one waiting or running entry per set of arguments."""
    JobRun.objects.create(token=f"refresh:{account_id}:{full}:{time.time()}")


@job(timeout=0.3, max_attempts=2, backoff_base_seconds=0)
def overruns(token: str, seconds: float) -> str:
    """Works in Python (short sleeps) for ``seconds``, past its timeout: ``JobTimeout`` reaches
    it at the deadline. Each run records its start, and its end only if it returns."""
    run = RecordedRun.objects.create(token=token, pid=os.getpid(), started_at=time.time())
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)  # the job's own work, in small steps: Python code runs between them
    RecordedRun.objects.filter(pk=run.pk).update(finished_at=time.time())
    return token


@job(timeout=0.3, max_attempts=2, backoff_base_seconds=0)
def blocks_in_c(token: str, seconds: float) -> str:
    """Blocks in one C call (``time.sleep``) past its timeout and its grace period: the raised
    ``JobTimeout`` cannot reach it until the call returns."""
    run = RecordedRun.objects.create(token=token, pid=os.getpid(), started_at=time.time())
    time.sleep(seconds)  # one call into C: a blocked socket read would behave the same
    RecordedRun.objects.filter(pk=run.pk).update(finished_at=time.time())
    return token


@job(timeout=0.3, max_attempts=1)
def catches_exceptions(seconds: float) -> str:
    """Guards its work with ``except Exception``, which a timeout goes through."""
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.01)  # the job's own work, in small steps: JobTimeout reaches it between
    except Exception:
        return "swallowed"
    return "finished"


@job(timeout=0.3, max_attempts=1)
async def overruns_async(token: str, seconds: float) -> str:
    """A coroutine awaiting past its timeout: its event loop cancels it."""
    await asyncio.sleep(seconds)
    return token


def _recorded_run(token: str, seconds: float, group_key: str = "") -> str:
    """Record a run's start (committed at once), host and end, around ``seconds`` of work."""
    host = os.environ.get("DJANGO_IQ_HOST_NAME", "")
    run = RecordedRun.objects.create(
        token=token, group_key=group_key, pid=os.getpid(), host=host, started_at=time.time()
    )
    time.sleep(seconds)  # the job's own work: a run that takes time, for overlap checks
    RecordedRun.objects.filter(pk=run.pk).update(finished_at=time.time())
    return token


@job(max_concurrency=3, max_concurrency_per_node=2)
def capped(token: str, seconds: float = 0.0) -> str:
    """At most 3 running in the cluster and 2 per node."""
    return _recorded_run(token, seconds)


@job(max_concurrency=1)
def one_at_a_time(token: str, seconds: float = 0.0) -> str:
    return _recorded_run(token, seconds)


@job(rate_limit="5/s")
def rate_limited(token: str, seconds: float = 0.0) -> str:
    """At most 5 starts in any second, cluster-wide."""
    return _recorded_run(token, seconds)


@job(max_concurrency=2, concurrency_key="account_id")
def per_account(account_id: str, token: str, seconds: float = 0.0) -> str:
    """At most 2 running per account, cluster-wide; records its account as the group key."""
    return _recorded_run(token, seconds, group_key=account_id)


def tenant_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The rate limit key of ``per_tenant``: its ``tenant`` argument, by position or name."""
    return kwargs["tenant"] if "tenant" in kwargs else args[0]


@job(rate_limit="3/s", rate_limit_key=tenant_of)
def per_tenant(tenant: str, token: str, seconds: float = 0.0) -> str:
    """At most 3 starts a second per tenant."""
    return _recorded_run(token, seconds, group_key=tenant)


@job(max_attempts=1)
def step(token: str, seconds: float = 0.0, fail: bool = False) -> str:
    """A workflow step: records its run (start, end); with ``fail``, fails for good after."""
    _recorded_run(token, seconds)
    if fail:
        raise ValueError(f"step {token} failed")
    return token


@job(group_by="obj_id")
def refresh_field(obj_id: int, field: str = "name") -> str:
    """Grouped by its ``obj_id`` argument; not merged."""
    return f"{obj_id}:{field}"


@job(group_by=lambda args, kwargs: f"{kwargs['kind']}-{kwargs['pk']}")
def refresh_by_callable(kind: str, pk: int) -> str:
    """Grouped by a key its callable makes from the call."""
    return f"{kind}-{pk}"


def union_ids(calls: list[dict]) -> dict:
    """Fold calls of ``invalidate``: one call with the union of their ids."""
    ids: set[int] = set()
    for call in calls:
        ids.update(call["ids"])
    return {"obj_id": calls[0]["obj_id"], "ids": sorted(ids), "seconds": calls[0]["seconds"]}


@job(group_by="obj_id", merge=union_ids, max_attempts=5)
def invalidate(obj_id: str, ids: list[int], seconds: float = 0.0) -> list[int]:
    """Process ``ids`` of object ``obj_id``: one JobRun per id (its token is unique, so an id
    processed twice fails loudly), each with the run's start and end."""
    started = time.time()
    if seconds:
        time.sleep(seconds)  # the job's own work: a run that takes time, for overlap checks
    finished = time.time()
    JobRun.objects.bulk_create(
        [
            JobRun(
                token=f"id:{id_}",
                group_key=obj_id,
                started_at=started,
                finished_at=finished,
                pid=os.getpid(),
            )
            for id_ in ids
        ]
    )
    return ids


def broken_fold(calls: list[dict]) -> dict:
    raise ValueError("cannot fold these")


@job(group_by="obj_id", merge=broken_fold)
def unfoldable(obj_id: str, ids: list[int]) -> None:
    """Its fold always raises: compaction must leave its groups alone."""


@job(group_by="obj_id", merge=lambda calls: {"obj_id": calls[0]["obj_id"], "ids": {1, 2}})
def folds_to_a_set(obj_id: str, ids: list[int]) -> None:
    """Its fold returns a set, which JSON cannot store."""


@job(max_attempts=20, backoff_base_seconds=0)
def batch_member(token: str, seconds: float = 0.0, fail: bool = False) -> str:
    """A batch's member: records its run (start, end); with ``fail``, then ends for good."""
    _recorded_run(token, seconds)
    if fail:
        raise Fail(f"{token}: fails for good")
    return token


@job
def batch_done(batch_id: int, succeeded: int, failed: int, label: str = "") -> str:
    """A batch's on_complete: records its run as ``batch:<id>``, the counts (and ``label``) as
    its group key, ``succeeded/failed``. With ``label=":broken"`` it fails until a run of
    token ``repaired`` is recorded."""
    if label == ":broken" and not RecordedRun.objects.filter(token="repaired").exists():
        raise ValueError("the summary is broken until a 'repaired' run is recorded")
    RecordedRun.objects.create(
        token=f"batch:{batch_id}",
        group_key=f"{succeeded}/{failed}{label}",
        pid=os.getpid(),
        started_at=time.time(),
        finished_at=time.time(),
    )
    return f"{succeeded}/{failed}"


def _sleep_then(seconds: float, fail: bool) -> None:
    time.sleep(seconds)  # the job's own work: a run of known length, with no query to wait on
    if fail:
        raise ValueError(f"failed after {seconds} s")


@job(max_attempts=1)
def sleeps(seconds: float, fail: bool = False) -> None:
    """Takes ``seconds`` and, with ``fail``, fails for good: runs of known durations."""
    _sleep_then(seconds, fail)


@job(max_attempts=1)
def sleeps_too(seconds: float, fail: bool = False) -> None:
    """Like ``sleeps``, under another job name."""
    _sleep_then(seconds, fail)


@job(keep_outcomes=False)
def unrecorded(token: str) -> str:
    """A job whose runs leave no outcome record."""
    JobRun.objects.create(token=token)
    return token


@job
def returns(value: object, nan: bool = False) -> object:
    """Returns what it was given (or, ``nan``, a float JSON cannot store), for the outcome
    record's return value."""
    return float("nan") if nan else value


@job(queue="emails")
def send_welcome(address: str) -> str:
    """Records the mail it "sends" (the welcome mail of docs/howto/testing.md, as a test job)."""
    JobRun.objects.create(token=f"welcome:{address}")
    return f"sent to {address}"


def sign_up(address: str) -> None:
    """Code under test: enqueues the welcome mail."""
    send_welcome.enqueue(address)


@job
def chain(token: str, more: int) -> str:
    """Records a run, then enqueues itself ``more`` times over (a job enqueueing jobs)."""
    JobRun.objects.create(token=f"{token}:{more}")
    if more:
        chain.enqueue(token, more - 1)
    return token


@job(max_attempts=1)
def checks_total(expected: int, total: int) -> int:
    """A job whose own assertion fails: its frames must stay in a test's traceback."""
    assert total == expected, f"total {total} != expected {expected}"
    return total


def _nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth - 1):
        value = [value]
    return value


# Return values no database column can hold as they are, by kind.
UNSTORABLE_RETURNS = {
    "nul": lambda: {"text": "before\x00after"},
    "nul_key": lambda: {"a\x00b": 1},
    "surrogate": lambda: ["\ud800"],
    "surrogate_key": lambda: {"\udc80": "x"},
    "deep_33": lambda: _nested(33),
    "deep_5000": lambda: _nested(5000),
}
# Storable, but the tests' trigger refuses a success holding this key.
REFUSED_RETURN = {"refused": True}


@job(max_attempts=3)
def returns_unstorable(token: str, kind: str) -> object:
    """Record this run (one JobRun per run), then return a value of ``kind``: one the database
    cannot store as it is, ``refused`` or ``deep_<n>`` (lists nested ``n`` deep)."""
    JobRun.objects.create(
        token=f"{token}:{time.time_ns()}", started_at=time.time(), pid=os.getpid()
    )
    if kind == "refused":
        return REFUSED_RETURN
    if kind in UNSTORABLE_RETURNS:
        return UNSTORABLE_RETURNS[kind]()
    return _nested(int(kind.removeprefix("deep_")))


class UnreadableError(Exception):
    """An exception whose text cannot be read: ``str()`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("this exception's text cannot be read")


@job(max_attempts=2, backoff_base_seconds=0)
def raises_unreadable(token: str) -> None:
    """Record this run (one JobRun per run), then raise an exception ``str()`` cannot read."""
    JobRun.objects.create(
        token=f"{token}:{time.time_ns()}", started_at=time.time(), pid=os.getpid()
    )
    raise UnreadableError


@job(max_attempts=2, backoff_base_seconds=0)
def raises_recorded(token: str, message: str) -> None:
    """Record this run (one JobRun per run), then raise ``ValueError(message)``."""
    JobRun.objects.create(
        token=f"{token}:{time.time_ns()}", started_at=time.time(), pid=os.getpid()
    )
    raise ValueError(message)


def _append_line(path: str, line: str) -> None:
    """Append one line to ``path`` in one write (O_APPEND: lines of processes do not mix)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@job(timeout=1, max_attempts=2, backoff_base_seconds=0)
def sleeps_in_one_statement(token: str, seconds: float, path: str) -> str:
    """Blocks in one database statement that sleeps ``seconds`` (on its first run; 0.1 s on a
    retry) and then writes a ``JobRun`` row, so the row's ``finished_at`` is when the statement
    ended in the server. Start and end (once the statement returned) are appended to ``path``:
    the database write is what blocks, so the file is the job's own record."""
    from django.db import connection

    pid = os.getpid()
    first = f"start {token} " not in (Path(path).read_text() if Path(path).exists() else "")
    _append_line(path, f"start {token} {pid} {time.time()!r}")
    sleep = "pg_sleep(%s)" if connection.vendor == "postgresql" else "SLEEP(%s)"
    now = (
        "EXTRACT(EPOCH FROM clock_timestamp())"
        if connection.vendor == "postgresql"
        else "UNIX_TIMESTAMP(SYSDATE(6))"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {JobRun._meta.db_table} (token, group_key, started_at, finished_at, pid) "  # noqa: S608
            f"SELECT %s, %s, %s, {now}, %s FROM (SELECT {sleep} AS slept) AS s",
            [f"{token}:{pid}", token, time.time(), pid, seconds if first else 0.1],
        )
    _append_line(path, f"end {token} {pid} {time.time()!r}")
    return token


class _TouchyText(str):
    """Text whose comparisons and length raise: what a broken ``__str__`` may return."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("this text cannot be compared")

    def __ne__(self, other: object) -> bool:
        raise RuntimeError("this text cannot be compared")

    def __len__(self) -> int:
        raise RuntimeError("this text has no length")

    __hash__ = str.__hash__


class TouchyTextError(Exception):
    def __str__(self) -> str:
        return _TouchyText("touchy text")


class ExitingTextError(Exception):
    def __str__(self) -> str:
        raise SystemExit("__str__ exits")


class _UnnamedMeta(type):
    @property
    def __module__(cls) -> str:  # type: ignore[override]
        raise RuntimeError("this class has no module")


class UnnamedError(Exception, metaclass=_UnnamedMeta):
    pass


ODD_EXCEPTIONS: dict[str, type[Exception]] = {
    "touchy_text": TouchyTextError,
    "exiting_text": ExitingTextError,
    "unnamed_class": UnnamedError,
}


@job(max_attempts=2, backoff_base_seconds=0)
def raises_odd(token: str, kind: str) -> None:
    """Record this run (one JobRun per run), then raise an exception of ``kind`` whose text or
    class name fights being read (see ``ODD_EXCEPTIONS``)."""
    JobRun.objects.create(
        token=f"{token}:{time.time_ns()}", started_at=time.time(), pid=os.getpid()
    )
    raise ODD_EXCEPTIONS[kind]()


@job(max_attempts=20)
def recorded_in_file(
    token: str,
    path: str,
    group_key: str = "",
    seconds: float = 0.0,
    step: float = 0.02,
    linger: float = 0.0,
) -> str:
    """The partition scenarios' job: append this run's start, then its end (``end``) or the
    exception that stopped it, to ``path``, as a run cut off from the database cannot write
    to it. Works in steps of ``step`` seconds: an exception raised in its thread arrives at the
    end of a step (a step as long as the run: a job blocked in C code). ``linger``: seconds
    spent cleaning up after that exception before it is raised on."""
    pid = os.getpid()

    def write(event: str) -> None:
        with open(path, "a") as out:  # one line per write, appended whole
            out.write(f"{event} {token} {group_key or '-'} {pid} {time.time():.6f}\n")

    write("start")
    outcome = "end"
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(min(step, max(0.0, deadline - time.monotonic())))  # the job's own work
    except BaseException as exc:
        outcome = type(exc).__name__
        time.sleep(linger)
        raise
    finally:
        write(outcome)
    return token


def _context_seen() -> dict[str, Any]:
    """What ``django_iq.current()`` says inside the run, as JSON."""
    context = current()
    if context is None:
        return {}
    return {
        "entry_id": context.entry_id,
        "attempt": context.attempt,
        "queue": context.queue,
        "job_name": context.job_name,
        "worker": context.worker,
        "batch_id": context.batch_id,
        "parents": {str(parent): value for parent, value in context.parents.items()},
    }


@job(max_attempts=3, backoff_base_seconds=0)
def whoami(fail_first: int = 0) -> dict[str, Any]:
    """Return the job's own context; fail the first ``fail_first`` attempts."""
    seen = _context_seen()
    if seen["attempt"] <= fail_first:
        raise RuntimeError(f"attempt {seen['attempt']} fails on purpose")
    return seen


@job
async def whoami_async() -> dict[str, Any]:
    await asyncio.sleep(0)
    return _context_seen()


@job(max_attempts=1)
def waits_for(entry_id: int, timeout: float = 5.0) -> Any:
    """Wait for another entry from inside a job (refused on the job's own queue)."""
    return wait(entry_id, timeout=timeout)


@job(max_attempts=1)
def returns_after(value: Any, seconds: float = 0.0, fail: str = "") -> Any:
    """Sleep ``seconds``, then return ``value``, or raise ``ValueError(fail)`` when given."""
    time.sleep(seconds)
    if fail:
        raise ValueError(fail)
    return value


@job(max_attempts=1)
async def returns_after_async(value: Any, seconds: float = 0.0) -> Any:
    await asyncio.sleep(seconds)
    return value


@job(expires=0.1)
def expiring(token: str) -> str:
    """Expires 0.1 s after each enqueue."""
    JobRun.objects.create(token=token, started_at=time.time(), pid=os.getpid())
    return token


@job(max_attempts=3)
def cancellable(token: str, seconds: float = 30.0) -> str:
    """Works in small steps for ``seconds``; records its start, and its end with whether it saw
    ``cancel_requested()`` (group key ``saw-cancel``) as it ended."""
    run = RecordedRun.objects.create(token=token, pid=os.getpid(), started_at=time.time())
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.01)
        return token
    finally:
        RecordedRun.objects.filter(pk=run.pk).update(
            finished_at=time.time(), group_key="saw-cancel" if cancel_requested() else ""
        )


@job(max_attempts=3)
def sleeps_in_c(token: str, seconds: float = 30.0) -> str:
    """Blocks in one C call (``time.sleep``): a raised ``JobCancelled`` waits for its return."""
    RecordedRun.objects.create(token=token, pid=os.getpid(), started_at=time.time())
    time.sleep(seconds)
    RecordedRun.objects.filter(token=token).update(finished_at=time.time())
    return token


@job(max_attempts=3)
async def cancellable_async(token: str, seconds: float = 30.0) -> str:
    """A coroutine job that awaits for ``seconds``; records its start, and its end with whether
    it saw ``cancel_requested()``."""
    from asgiref.sync import sync_to_async

    run = await sync_to_async(RecordedRun.objects.create)(
        token=token, pid=os.getpid(), started_at=time.time()
    )
    try:
        await asyncio.sleep(seconds)
        return token
    finally:
        await sync_to_async(RecordedRun.objects.filter(pk=run.pk).update)(
            finished_at=time.time(), group_key="saw-cancel" if cancel_requested() else ""
        )


@job
def progress_steps(directory: str, steps: int) -> int:
    """Report step 1 of ``steps``, wait until the test creates the file ``<directory>/1``,
    report step 2, and so on; return ``steps`` once the last step's file exists."""
    for step_number in range(1, steps + 1):
        set_progress(step_number, steps, note=f"step {step_number}")
        deadline = time.monotonic() + 30
        while not (Path(directory) / str(step_number)).exists() and time.monotonic() < deadline:
            time.sleep(0.02)  # the job polls the file the test creates to release it
    return steps


@job
def progress_then_retry(steps: int, pause_seconds: float = 0.0) -> None:
    """Report ``steps`` steps (``pause_seconds`` apart), then fail the attempt with a retry a
    minute later: the entry stays, showing the last report."""
    for step_number in range(1, steps + 1):
        set_progress(step_number, steps, note=f"step {step_number}")
        if pause_seconds:
            time.sleep(pause_seconds)  # the job's own work between reports
    raise RetryAfter(60, "reported, then failed")


@job
def progress_in_a_loop(reports: int, pause_seconds: float) -> None:
    """Report ``reports`` times, ``pause_seconds`` apart (0: in a tight loop), then fail the
    attempt with a retry a minute later, so that the entry stays to be read."""
    for done in range(1, reports + 1):
        set_progress(done, reports)
        if pause_seconds:
            time.sleep(pause_seconds)  # the job's own work between reports
    raise RetryAfter(60, "reported, then failed")


# Bad progress reports by name (JSON cannot carry NaN or a bool that is not a number).
BAD_PROGRESS: dict[str, tuple[Any, ...]] = {
    "text": ("3",),
    "bool": (True,),
    "none": (None,),
    "negative": (-1,),
    "nan": (math.nan,),
    "infinite": (math.inf,),
    "too_big": (10**400,),
    "negative_total": (0, -1),
    "total_text": (1, "10"),
    "more_than_total": (5, 4),
    "note_not_text": (1, 2, 3),
    "note_too_long": (1, 2, "x" * 201),
    "note_with_nul": (1, 2, "a\x00b"),
    "note_with_lone_surrogate": (1, 2, "a\ud800b"),
}


@job
def bad_progress(kind: str) -> None:
    """Report one good step, then the bad report ``BAD_PROGRESS[kind]``, which raises."""
    set_progress(1, 10, note="good")
    set_progress(*BAD_PROGRESS[kind])


@job
async def progress_async(steps: int) -> None:
    """A coroutine job reporting ``steps`` steps, then failing its attempt with a retry a
    minute later, so that the entry stays to be read."""
    for step_number in range(1, steps + 1):
        set_progress(step_number, steps, note=f"async step {step_number}")
        await asyncio.sleep(0)
    raise RetryAfter(60, "reported, then failed")


@job
def export_rows(export_id: int, rows: int, stop_after: int | None = None) -> int:
    """The progress recipe's job (docs/howto/progress.md): one report per row written. With
    ``stop_after``, the attempt fails after that many rows (retried a minute later), leaving
    its entry and its progress to be read."""
    for done in range(1, rows + 1):
        set_progress(done, rows, note=f"export {export_id}: row {done}")
        if done == stop_after:
            raise RetryAfter(60, "stopped part way")
    return rows


@job
def reports_and_returns(reports: int) -> int:
    """Report ``reports`` times in a tight loop, then succeed."""
    for done in range(1, reports + 1):
        set_progress(done, reports)
    return reports


@job(max_attempts=2, backoff_base_seconds=0)
def logs_a_line(note: str, fail: bool = False) -> str:
    """Log a line of its own (a logger of the project's, not django_iq's), then fail if told."""
    logging.getLogger("shop.payments").info("charging note=%s", note)
    if fail:
        raise ValueError(f"card declined: {note}")
    return note


@job
def records_its_trace(token: str) -> str:
    """Record the trace id current in its run (0: none) as ``<token>:<trace id in hex>``."""
    from opentelemetry import trace

    trace_id = trace.get_current_span().get_span_context().trace_id
    JobRun.objects.create(token=f"{token}:{trace_id:032x}", started_at=time.time())
    return token
