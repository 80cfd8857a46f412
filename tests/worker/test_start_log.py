"""A worker says at start which jobs it runs, so that a jobs module that was never imported
shows at once rather than as entries that wait forever."""

from __future__ import annotations

import logging
import re

import pytest

from django_iq.worker import LOGGED_JOB_NAMES, WorkerProcess
from tests.processes import manage

pytestmark = pytest.mark.django_db(transaction=True)


def test_runworker_logs_the_count_and_the_first_names_at_info_and_all_at_debug() -> None:
    # What a fresh process registers (its JOB_MODULES), not what this test process has
    # imported meanwhile: the DEBUG line names them all.
    verbose = manage("runworker", "--burst", "-v", "3").stderr
    (debug,) = [
        line for line in verbose.splitlines() if "jobs registered" in line and "count=" not in line
    ]
    names = debug.split(" jobs=", 1)[1].split(", ")
    assert names == sorted(names) and "tests.testapp.jobs.record" in names
    assert len(names) > LOGGED_JOB_NAMES  # the test settings register more than are shown

    quiet = manage("runworker", "--burst").stderr
    (info,) = [line for line in quiet.splitlines() if "jobs registered" in line]
    assert re.search(
        rf"jobs registered name=\S+ count={len(names)} "
        rf"jobs={re.escape(', '.join(names[:LOGGED_JOB_NAMES]))} "
        rf"and {len(names) - LOGGED_JOB_NAMES} more \(all at DEBUG, runworker -v 3\)$",
        info,
    ), info


def test_a_worker_with_no_jobs_says_so_at_info(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="django_iq.worker"):
        assert WorkerProcess(burst=True, job_names=[]).run(install_signal_handlers=False) == 0
    (said,) = [r for r in caplog.records if "registered" in r.getMessage()]
    assert said.levelno == logging.INFO
    assert re.fullmatch(
        r"no jobs registered name=\S+: is the jobs module imported\? Put @job functions in a "
        r"jobs\.py of an installed app or list their module in DJANGO_IQ\[\"JOB_MODULES\"\]; "
        r"see docs/getting-started\.md#a-first-job",
        said.getMessage(),
    )


def test_a_few_jobs_are_all_named_at_info(caplog: pytest.LogCaptureFixture) -> None:
    names = ["shop.jobs.send_receipt", "shop.jobs.refund"]
    with caplog.at_level(logging.INFO, logger="django_iq.worker"):
        WorkerProcess(burst=True, job_names=names).run(install_signal_handlers=False)
    (said,) = [r.getMessage() for r in caplog.records if "jobs registered" in r.getMessage()]
    assert said.endswith("count=2 jobs=shop.jobs.refund, shop.jobs.send_receipt")
