"""The markdown table of ``python -m benchmarks.peers``: one row per system, ratio rows, notes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PEERS = ("tasksdb", "procrastinate", "celery")
IQ_ROWS = ("django_iq", "django_iq_tasks")
HEADER = (
    "system",
    "single enqueue /s",
    "bulk /s",
    "drain 2x1 /s (run 1 / 2)",
    "drain 2x4 /s (run 1 / 2)",
    "CPU ms/job 2x4: machine (workers)",
    "RSS MB: per process (all workers)",
    "enqueue-to-start p50 / p99 ms",
)
WORKER_MODELS = {
    "django_iq": "`runworker --processes P --threads T`: a supervisor forking P worker processes "
    "of T processing threads",
    "django_iq_tasks": "the same workers; jobs enqueued as `@task` through `IQBackend`",
    "tasksdb": "P `db_worker` processes (each waits a random 0-1 s before its first poll, its "
    "default); it runs one task at a time and has no threads, so no 2x4 (its CPU and RSS are "
    "from the 2x1 drain)",
    "procrastinate": "P `procrastinate worker --concurrency T` processes (asyncio; the sync "
    "task runs in the loop's thread executor)",
    "celery": "P `celery worker --concurrency T` instances, default prefork pool: 1 + T "
    "processes each",
}


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _runs(result: dict[str, Any], shape: str) -> list[dict[str, Any]] | None:
    runs: list[dict[str, Any]] | None = (result.get("drain") or {}).get(shape)
    return runs


def _drain_cell(result: dict[str, Any], shape: str) -> str:
    runs = _runs(result, shape)
    if not runs:
        return "-"
    return " / ".join(
        _num(r["per_s"]) if r["status"] == "ok" else f"{r['status']} ({r['left']} left)"
        for r in runs
    )


def best_drain(result: dict[str, Any], shape: str) -> float | None:
    rates = [r["per_s"] for r in _runs(result, shape) or [] if r["status"] == "ok"]
    return max(rates, default=None)


def _cost_runs(result: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    for shape in ("2x4", "2x1"):
        runs = [r for r in _runs(result, shape) or [] if r["status"] == "ok"]
        if runs:
            return runs, "" if shape == "2x4" else " at 2x1"
    return [], ""


def cpu(result: dict[str, Any]) -> float | None:
    runs, _ = _cost_runs(result)
    values = [r["machine_cpu_ms_per_job"] for r in runs]
    return sum(values) / len(values) if values else None


def rss(result: dict[str, Any]) -> float | None:
    runs, _ = _cost_runs(result)
    return max((r["rss_peak_mb"] for r in runs), default=None)


def _latency(result: dict[str, Any], key: str) -> float | None:
    lat = result.get("latency") or {}
    value: float | None = lat.get(key) if lat.get("status") == "ok" else None
    return value


def _rate(result: dict[str, Any], key: str) -> float | None:
    value: float | None = (result.get(key) or {}).get("per_s")
    return value


def _row(result: dict[str, Any]) -> list[str]:
    runs, where = _cost_runs(result)
    workers = [r["worker_cpu_ms_per_job"] for r in runs]
    totals = [r["rss_total_peak_mb"] for r in runs]
    lat = result.get("latency") or {}
    return [
        result.get("system", "?"),
        _num(_rate(result, "single")),
        _num(_rate(result, "bulk")) if result.get("bulk_api") else "n/a",
        _drain_cell(result, "2x1"),
        _drain_cell(result, "2x4"),
        f"{_num(cpu(result), 2)} ({_num(sum(workers) / len(workers), 2)}){where}" if runs else "-",
        f"{_num(rss(result))} ({_num(max(totals))}){where}" if runs else "-",
        f"{_num(_latency(result, 'p50_ms'), 1)} / {_num(_latency(result, 'p99_ms'), 1)}"
        if lat.get("status") == "ok"
        else (lat.get("status") or "-"),
    ]


def _ratio(
    iq: dict[str, Any],
    peers: dict[str, dict[str, Any]],
    metric: Callable[[dict[str, Any]], float | None],
    higher_is_better: bool,
) -> str:
    mine = metric(iq)
    scored = [(value, r["system"]) for r in peers.values() if (value := metric(r)) is not None]
    if mine is None or not scored:
        return "-"
    best, name = max(scored) if higher_is_better else min(scored)
    return f"{mine / best:.2f}x best peer ({name})" if best else "-"


def _ratio_row(iq: dict[str, Any], peers: dict[str, dict[str, Any]]) -> list[str]:
    up, down = True, False
    p50 = _ratio(iq, peers, lambda r: _latency(r, "p50_ms"), down)
    p99 = _ratio(iq, peers, lambda r: _latency(r, "p99_ms"), down)
    return [
        "↳ vs best peer",
        _ratio(iq, peers, lambda r: _rate(r, "single"), up),
        _ratio(iq, peers, lambda r: _rate(r, "bulk") if r.get("bulk_api") else None, up)
        if iq.get("bulk_api")
        else "n/a",
        _ratio(iq, peers, lambda r: best_drain(r, "2x1"), up),
        _ratio(iq, peers, lambda r: best_drain(r, "2x4"), up),
        _ratio(iq, peers, cpu, down),
        _ratio(iq, peers, rss, down),
        f"p50 {p50}; p99 {p99}",
    ]


def render(results: dict[str, dict[str, Any]], pgbench: dict[str, Any] | None, params: str) -> str:
    """The table, then notes: sizes, worker models, bulk APIs, definitions, errors."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    peers = {key: results[key] for key in PEERS if key in results and not results[key]["error"]}
    notes: list[str] = []
    for key, result in results.items():
        result.setdefault("system", key)
        lines.append("| " + " | ".join(_row(result)) + " |")
        if key in IQ_ROWS and peers:
            lines.append("| " + " | ".join(_ratio_row(result, peers)) + " |")
        if result.get("error"):
            notes.append(f"- **{result['system']}: {result['error']}**")
    if pgbench is not None:
        clients = pgbench.get("clients", {})
        lines.append(
            "| pgbench limit (SQL only) | - | - | "
            f"{_num(clients.get('2'))} (2 clients) | {_num(clients.get('4'))} (4 clients) "
            "| - | - | - |"
        )
        if pgbench.get("error"):
            notes.append(f"- **pgbench: {pgbench['error']}**")
    notes[:0] = [
        "",
        f"Sizes: {params}. Rates are jobs per second of no-op jobs.",
        "",
        "- Worker shapes (P processes x T threads/concurrency), each system with its defaults"
        " and per-job logging off:",
        *(f"  - {results[k]['system']}: {WORKER_MODELS[k]}" for k in results),
        "- Bulk enqueue: "
        + "; ".join(
            f"{r['system']}: {r.get('bulk_api') or 'n/a (no bulk API)'}" for r in results.values()
        )
        + ".",
        "- Drain: pre-enqueue, start the workers, poll every 50 ms until no job is waiting or"
        " running (Celery: the `celery` list and the `unacked` hash are empty); includes"
        " worker start-up. A run past the time limit prints `timeout`.",
        "- CPU: busy CPU of the whole machine during the 2x4 drain (PostgreSQL, Redis and"
        " anything else running included) per job, mean of the runs; in parentheses the"
        " worker processes' own CPU. RSS: the largest worker process's peak; in parentheses the"
        " peak of all worker processes together.",
        "- Enqueue-to-start: one 1x1 worker, idle, jobs enqueued 50 ms apart; each job appends"
        " its start time and its enqueue time (an argument) to a file.",
        "- Ratio rows: django_iq ÷ the best peer (django-tasks-db, procrastinate, Celery); drains"
        " compare the better of the two runs. Above 1 is better for rates, worse for CPU, RSS"
        " and latency.",
        "- pgbench limit: a custom script, one INSERT then `DELETE ... WHERE id = (SELECT id"
        " ... ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)` per transaction on a scratch table;"
        " transactions per second, i.e. jobs per second with nothing but the SQL.",
    ]
    return "\n".join(lines + notes)
