"""The workloads every system runs, shared by the per-system scripts (stdlib and psutil only).

Not run on its own: each ``<system>_bench.py`` script builds a ``System`` adapter and calls
``main(factory)``, which parses the common options, runs the workloads and prints one JSON
object on stdout (everything else goes to stderr). The scripts run inside their own system's
virtualenv, started by ``python -m benchmarks.peers``; this module is imported from the
script's directory, never as part of the ``benchmarks`` package.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import psutil

HERE = Path(__file__).resolve().parent
POLL_SECONDS = 0.05  # how often a drain checks the queue
STOP_GRACE_SECONDS = 15.0  # SIGTERM, then SIGKILL for whatever is left of a worker tree


class System(Protocol):
    """What a script tells the harness about its system."""

    label: str
    bulk_api: str | None  # None: the system has no bulk enqueue
    worker_env: dict[str, str]

    def reset(self) -> None: ...
    def enqueue_one(self) -> None: ...
    def enqueue_bulk(self, count: int) -> None: ...
    def preenqueue(self, count: int) -> None: ...
    def pending(self) -> int: ...
    def failed(self) -> int | None: ...
    def worker_commands(self, processes: int, threads: int) -> list[list[str]] | None: ...
    def enqueue_probe(self, enqueued_at: float, path: str) -> None: ...


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def django_database(url: str) -> dict[str, Any]:
    """DATABASES["default"] for a postgres:// URL (the peers' venvs have no django-environ)."""
    parts = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "USER": unquote(parts.username or "postgres"),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "127.0.0.1",
        "PORT": str(parts.port or 5432),
    }


def record_start(enqueued_at: float, path: str) -> None:
    """The probe job's body: one line, appended atomically (O_APPEND, shorter than PIPE_BUF)."""
    started = time.time()
    with open(path, "a", encoding="ascii") as handle:
        handle.write(f"{enqueued_at!r} {started!r}\n")


def machine_busy_seconds() -> float:
    """Busy CPU seconds of the whole machine since boot, all cores (guest is inside user)."""
    t = psutil.cpu_times()
    return float(t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0))


class WorkerGroup:
    """Worker processes started together, sampled for RSS and CPU, stopped together."""

    def __init__(self, commands: list[list[str]], env: dict[str, str], log_dir: Path) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.rss_peak: dict[int, int] = {}
        self.cpu_last: dict[int, float] = {}
        self.total_rss_peak = 0
        self.log_paths: list[Path] = []
        for index, command in enumerate(commands):
            path = log_dir / f"worker-{index}-{time.monotonic_ns()}.log"
            self.log_paths.append(path)
            with open(path, "wb") as handle:
                # Same process group as this script: killing the script's group kills them too.
                self.procs.append(
                    subprocess.Popen(
                        command,
                        cwd=HERE,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=handle,
                        stderr=subprocess.STDOUT,
                    )
                )

    def tree(self) -> list[psutil.Process]:
        found: list[psutil.Process] = []
        for proc in self.procs:
            try:
                root = psutil.Process(proc.pid)
                found.append(root)
                found.extend(root.children(recursive=True))
            except psutil.NoSuchProcess:
                continue
        return found

    def sample(self) -> None:
        total = 0
        for proc in self.tree():
            try:
                rss = proc.memory_info().rss
                cpu = proc.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            total += rss
            self.rss_peak[proc.pid] = max(self.rss_peak.get(proc.pid, 0), rss)
            self.cpu_last[proc.pid] = cpu.user + cpu.system
        self.total_rss_peak = max(self.total_rss_peak, total)

    def exited(self) -> list[int]:
        return [code for code in (p.poll() for p in self.procs) if code is not None]

    def log_tail(self, chars: int = 2000) -> str:
        text = "".join(p.read_text(errors="replace") for p in self.log_paths if p.exists())
        return text[-chars:]

    def stop(self) -> None:
        # A signal now (the orchestrator giving up) must not cut the cleanup short.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            self._stop()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _stop(self) -> None:
        members = self.tree()
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for member in members + self.tree():
            try:
                member.kill()
            except psutil.NoSuchProcess:
                continue
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                log(f"worker {proc.pid} did not exit after SIGKILL")


def timed_rate(count: int, action: Callable[[], None]) -> dict[str, Any]:
    started = time.perf_counter()
    action()
    seconds = time.perf_counter() - started
    return {"jobs": count, "seconds": round(seconds, 4), "per_s": count / seconds}


def drain(system: System, shape: tuple[int, int], jobs: int, timeout: float, logs: Path) -> Any:
    """Pre-enqueue ``jobs``, start the workers, time until the queue is empty."""
    commands = system.worker_commands(*shape)
    if commands is None:
        return None
    system.reset()
    system.preenqueue(jobs)
    waiting = system.pending()
    if waiting != jobs:
        raise RuntimeError(f"{waiting} jobs waiting after pre-enqueueing {jobs}")
    busy_before = machine_busy_seconds()
    started = time.perf_counter()
    group = WorkerGroup(commands, system.worker_env, logs)
    status, left, sampled_at = "timeout", jobs, 0.0
    try:
        while time.perf_counter() - started < timeout:
            now = time.perf_counter()
            if now - sampled_at >= 0.2:
                group.sample()
                sampled_at = now
            left = system.pending()
            if left == 0:
                status = "ok"
                break
            if group.exited():
                status = "worker-exited"
                break
            time.sleep(POLL_SECONDS)
        seconds = time.perf_counter() - started
        busy = machine_busy_seconds() - busy_before
        group.sample()
    finally:
        group.stop()
    done = jobs - left
    failed = system.failed()
    if status == "ok" and failed:
        status = "jobs-failed"
    result: dict[str, Any] = {
        "status": status,
        "jobs": jobs,
        "left": left,
        "failed": failed,
        "seconds": round(seconds, 3),
        "per_s": done / seconds if status == "ok" else None,
        "machine_cpu_ms_per_job": 1000 * busy / done if done else None,
        "worker_cpu_ms_per_job": 1000 * sum(group.cpu_last.values()) / done if done else None,
        "rss_peak_mb": max(group.rss_peak.values(), default=0) / 2**20,
        "rss_total_peak_mb": group.total_rss_peak / 2**20,
        "processes_seen": len(group.rss_peak),
    }
    if status != "ok":
        result["worker_log_tail"] = group.log_tail()
    return result


def _read_starts(path: Path) -> list[tuple[float, float]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="ascii").splitlines():
        enqueued, started = line.split()
        rows.append((float(enqueued), float(started)))
    return rows


def _percentile(values: list[float], percent: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(percent / 100 * len(ordered)) - 1)]


def latency(system: System, count: int, gap: float, timeout: float, logs: Path) -> Any:
    """One 1x1 worker, idle; ``count`` probe jobs ``gap`` seconds apart; start minus enqueue."""
    commands = system.worker_commands(1, 1)
    if commands is None:
        return None
    system.reset()
    path = logs / f"starts-{time.monotonic_ns()}.log"
    group = WorkerGroup(commands, system.worker_env, logs)
    try:
        system.enqueue_probe(-1.0, str(path))  # warm-up: the worker is up once this has run
        deadline = time.monotonic() + min(timeout, 120.0)
        while not _read_starts(path):
            if time.monotonic() > deadline or group.exited():
                return {"status": "worker-not-ready", "worker_log_tail": group.log_tail()}
            time.sleep(POLL_SECONDS)
        time.sleep(1.0)  # back to idle: waiting for work the way it does between jobs
        first = time.monotonic()
        for index in range(count):
            system.enqueue_probe(time.time(), str(path))
            time.sleep(max(0.0, first + (index + 1) * gap - time.monotonic()))
        deadline = time.monotonic() + timeout
        probes: list[tuple[float, float]] = []
        while time.monotonic() < deadline and not group.exited():
            probes = [row for row in _read_starts(path) if row[0] >= 0]
            if len(probes) >= count:
                break
            time.sleep(POLL_SECONDS)
    finally:
        group.stop()
    values = [1000 * (started - enqueued) for enqueued, started in probes]
    if len(values) < count:
        return {"status": "timeout", "received": len(values), "jobs": count}
    return {
        "status": "ok",
        "jobs": count,
        "p50_ms": _percentile(values, 50),
        "p99_ms": _percentile(values, 99),
        "max_ms": max(values),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db-url", default="")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--drain-jobs", type=int, default=10000)
    parser.add_argument("--latency-jobs", type=int, default=200)
    parser.add_argument("--latency-gap", type=float, default=0.05)
    parser.add_argument("--drain-timeout", type=float, default=600.0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--shapes", default="2x1,2x4")
    parser.add_argument("--variant", default="")
    return parser.parse_args(argv)


def run(system: System, args: argparse.Namespace, result: dict[str, Any], logs: Path) -> None:
    """Fill ``result`` workload by workload, so a failure keeps what was measured before it."""
    result["bulk_api"] = system.bulk_api
    system.reset()
    log(f"[{system.label}] single enqueue x{args.jobs}")

    def singles() -> None:
        for _ in range(args.jobs):
            system.enqueue_one()

    result["single"] = timed_rate(args.jobs, singles)
    system.reset()
    if system.bulk_api is not None:
        log(f"[{system.label}] bulk enqueue x{args.jobs}: {system.bulk_api}")
        result["bulk"] = timed_rate(args.jobs, lambda: system.enqueue_bulk(args.jobs))
        system.reset()
    result["drain"] = {}
    for name in args.shapes.split(","):
        p, t = (int(part) for part in name.split("x"))
        runs: list[Any] = []
        for index in range(args.runs):
            outcome = drain(system, (p, t), args.drain_jobs, args.drain_timeout, logs)
            if outcome is None:
                log(f"[{system.label}] drain {name}: not supported")
                break
            rate = outcome["per_s"] or 0.0
            log(f"[{system.label}] drain {name} run {index + 1}: {outcome['status']}, {rate:.0f}/s")
            runs.append(outcome)
        result["drain"][name] = runs or None
    log(f"[{system.label}] latency x{args.latency_jobs}")
    result["latency"] = latency(system, args.latency_jobs, args.latency_gap, 60.0, logs)
    system.reset()


def main(factory: Callable[[argparse.Namespace], System]) -> int:
    """Parse the options, run everything, print one JSON object on the real stdout."""
    out = sys.stdout
    sys.stdout = sys.stderr  # libraries that print must not corrupt the JSON
    signal.signal(signal.SIGTERM, _terminate)
    args = parse_args()
    result: dict[str, Any] = {"error": None}
    with tempfile.TemporaryDirectory(prefix="iq-peer-") as tmp:
        try:
            system = factory(args)
            result["system"] = system.label
            run(system, args, result, Path(tmp))
        except (Exception, KeyboardInterrupt, SystemExit) as exc:
            result["error"] = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, Exception):
                traceback.print_exc()
    print(json.dumps(result), file=out, flush=True)
    return 0 if result["error"] is None else 1


def _terminate(signum: int, frame: object) -> None:
    # Unwind through the ``finally`` blocks, which stop the workers.
    raise SystemExit(f"stopped by {signal.Signals(signum).name}")


def worker_env(**extra: str) -> dict[str, str]:
    """The environment of worker processes: this one, the scripts' directory on the path."""
    return dict(os.environ, PYTHONPATH=str(HERE), PYTHONUNBUFFERED="1", **extra)
