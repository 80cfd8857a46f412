"""Structured logs (django_iq/logs.py, docs/howto/logging.md): a real worker with the documented
JSON logging writes one JSON object per line, django_iq's records and the jobs' own carrying the
fields of the run they are about."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import pytest

from django_iq.logs import FIELDS, JobContextFilter, JsonFormatter, get_logger, run_fields
from django_iq.testing import run_jobs
from tests.processes import command_env, finish, start_command
from tests.testapp.jobs import logs_a_line

pytestmark = pytest.mark.django_db(transaction=True)


def json_lines(output: str) -> list[dict[str, Any]]:
    """Every line of ``output`` that is a JSON object, parsed; other lines (a warning printed
    before logging is configured) are left out."""
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_a_workers_json_lines_carry_the_fields_of_the_runs_they_are_about() -> None:
    paid = logs_a_line.enqueue("paid")
    declined = logs_a_line.enqueue("declined", fail=True)
    worker = start_command(
        "runworker",
        "--burst",
        "--threads",
        "1",
        "-v",
        "3",
        env=command_env(DJANGO_SETTINGS_MODULE="tests.settings_json_logs"),
    )

    code, output = finish(worker)

    assert code == 0, output[-3000:]
    lines = json_lines(output)
    assert lines, output[-3000:]
    for line in lines:
        assert {"time", "level", "logger", "message", *FIELDS} <= set(line), line
    worker_names = {line["worker"] for line in lines}
    assert len(worker_names) == 1 and None not in worker_names, "one worker, named on every line"

    # The jobs' own lines (a logger of the project's) carry their run's entry, job and attempt.
    charged = [line for line in lines if line["logger"] == "shop.payments"]
    assert sorted((line["entry_id"], line["attempt"]) for line in charged) == sorted(
        [(paid.pk, 1), (declined.pk, 1), (declined.pk, 2)]
    )
    assert {line["job"] for line in charged} == {logs_a_line.name}
    assert {line["queue"] for line in charged} == {"default"}

    # The worker's lines about how each run ended: outcome, attempt and duration.
    ended = {
        (line["entry_id"], line["attempt"]): line
        for line in lines
        if line["logger"] == "django_iq.processing" and line["outcome"]
    }
    # The failed signal's own line (INFO) carries the attempt's outcome too.
    failed = [line for line in lines if line["logger"] == "django_iq.receivers"]
    assert {(line["attempt"], line["outcome"]) for line in failed} >= {
        (1, "retrying"),
        (2, "failed"),
    }
    assert ended[(paid.pk, 1)]["outcome"] == "succeeded"
    assert ended[(paid.pk, 1)]["level"] == "DEBUG"
    assert ended[(declined.pk, 1)]["outcome"] == "retrying"
    assert ended[(declined.pk, 1)]["level"] == "WARNING"
    final = ended[(declined.pk, 2)]
    assert final["outcome"] == "failed" and final["level"] == "ERROR"
    assert "card declined: declined" in final["message"]
    for line in ended.values():
        assert isinstance(line["duration"], float) and 0 <= line["duration"] < 30
        assert line["worker"] in worker_names


def test_a_jobs_own_lines_carry_its_run_through_the_filter() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(JobContextFilter())
    project = logging.getLogger("shop.payments")
    project.addHandler(handler)
    project.setLevel(logging.INFO)
    try:
        entry = logs_a_line.enqueue("inline")
        run_jobs()
        project.info("outside any run")
    finally:
        project.removeHandler(handler)

    inside, outside = json_lines(stream.getvalue())
    assert (inside["entry_id"], inside["job"], inside["attempt"]) == (entry.pk, logs_a_line.name, 1)
    assert inside["message"] == "charging note=inline"
    assert outside["entry_id"] is None and outside["job"] is None


def test_the_json_formatter_writes_extra_fields_and_the_traceback() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = get_logger("django_iq.tests")
    logger.logger.addHandler(handler)
    entry = logs_a_line.enqueue("formatted")
    try:
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logger.exception(
                "failed entry=%s", entry.pk, extra={**run_fields(entry), "custom": object}
            )
    finally:
        logger.logger.removeHandler(handler)

    [line] = json_lines(stream.getvalue())
    assert line["message"] == f"failed entry={entry.pk}" and line["level"] == "ERROR"
    assert (line["entry_id"], line["queue"], line["attempt"]) == (entry.pk, "default", 1)
    assert line["custom"] == str(object), "a value JSON cannot hold is written as its str()"
    assert line["exception"].startswith("Traceback") and "RuntimeError: boom" in line["exception"]
