"""``runworker --reload``: a changed jobs module is picked up after a graceful stop, a broken one
waits for the fix, and a stop signal to the parent stops the worker gracefully."""

from __future__ import annotations

import os
import signal
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from django_iq.models import Entry, GroupLock, Queue, Worker
from tests.conftest import wait_until
from tests.processes import (
    ROOT,
    Command,
    command_env,
    finish,
    manage,
    start_command,
)
from tests.testapp.models import JobRun

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


JOBS = """
import time

from django_iq import job
from tests.testapp.models import JobRun

VERSION = {version!r}


@job
def version(token, seconds=0.0):
    started = time.time()
    time.sleep(seconds)  # a run long enough to be under way when the module changes
    JobRun.objects.create(token=f"{{token}}:{{VERSION}}", started_at=started, finished_at=time.time())
"""


class Module:
    """A jobs module in a directory of its own, rewritten by the test."""

    def __init__(self, directory: Path) -> None:
        self.name = f"iq_reload_{uuid.uuid4().hex[:8]}"
        self.path = directory / f"{self.name}.py"
        self.env = command_env(
            DJANGO_SETTINGS_MODULE="tests.settings_reload",
            IQ_RELOAD_MODULE=self.name,
            PYTHONPATH=f"{directory}{os.pathsep}{ROOT}",
        )

    def write(self, text: str) -> None:
        self.path.write_text(text)
        # The reloader compares modification times: make each version's differ.
        stamp = time.time() + len(JobRun.objects.all()) + 2
        os.utime(self.path, (stamp, stamp))

    def enqueue(self, token: str, seconds: float = 0.0) -> None:
        Queue.objects.get_or_create(name="default")
        Entry.objects.create(
            queue_id="default",
            job_name=f"{self.name}.version",
            kwargs={"token": token, "seconds": seconds},
            lock_key=f"e:{token}",
        )


def ran(token: str) -> list[str]:
    return list(
        JobRun.objects.filter(token__startswith=f"{token}:").values_list("token", flat=True)
    )


def start(module: Module) -> Command:
    # At INFO: a failure shows which file change the reloader saw and how the worker stopped.
    return start_command("runworker", "--reload", "--threads", "2", "-v", "2", env=module.env)


def test_a_changed_jobs_module_is_run_after_the_running_job_finished(tmp_path: Path) -> None:
    module = Module(tmp_path)
    module.write(JOBS.format(version="v1"))
    worker = start(module)
    module.enqueue("a")
    wait_until(lambda: ran("a"), 60, message="the first version ran")
    assert ran("a") == ["a:v1"]

    module.enqueue("slow", seconds=3.0)
    wait_until(lambda: GroupLock.objects.filter(key="e:slow").exists(), 30, message="claimed")
    module.write(JOBS.format(version="v2"))
    wait_until(
        lambda: Worker.objects.count() == 2, 60, message=f"a second worker: {worker.output()}"
    )
    # The run under way when the module changed finished in the old worker, once.
    assert ran("slow") == ["slow:v1"], worker.output()[-3000:]
    first, second = Worker.objects.order_by("started_at")
    assert first.stopped_at is not None and not first.died
    assert second.started_at >= first.stopped_at

    module.enqueue("b")
    wait_until(lambda: ran("b"), 60, message="the new version ran")
    assert ran("b") == ["b:v2"]

    worker.send_signal(signal.SIGTERM)
    code, output = finish(worker, 60)
    assert code == 0, output[-3000:]
    assert not Worker.objects.filter(stopped_at__isnull=True).exists()


def test_a_broken_jobs_module_waits_for_the_fix(tmp_path: Path) -> None:
    module = Module(tmp_path)
    module.write("def broken(:\n")
    worker = start(module)
    # Logged once the reloader has taken its first look, the broken version among the files.
    wait_until(lambda: "failed to start" in worker.output(), 60, message="the failed start")
    assert worker.poll() is None, "the parent waits for a change"

    module.write(JOBS.format(version="fixed"))
    module.enqueue("a")
    wait_until(lambda: ran("a"), 60, message=f"the fixed module ran: {worker.output()}")
    assert ran("a") == ["a:fixed"]
    worker.send_signal(signal.SIGINT)
    code, output = finish(worker, 60)
    assert code == 0, output[-3000:]


def test_a_broken_jobs_module_the_urlconf_imports_waits_for_the_fix(tmp_path: Path) -> None:
    # The system checks import the URLconf, and with it the jobs module, before the worker.
    module = Module(tmp_path)
    urls = f"{module.name}_urls"
    (tmp_path / f"{urls}.py").write_text(
        f"import {module.name}  # noqa: F401\n\nfrom tests.urls import urlpatterns\n"
    )
    module.env["IQ_RELOAD_URLCONF"] = urls
    module.write("def broken(:\n")
    worker = start(module)
    # Logged once the reloader has taken its first look, the broken version among the files.
    wait_until(lambda: "failed to start" in worker.output(), 60, message="the failed start")
    assert worker.poll() is None, f"the parent waits for a change: {worker.output()[-2000:]}"

    module.write(JOBS.format(version="fixed"))
    module.enqueue("a")
    wait_until(lambda: ran("a"), 60, message=f"the fixed module ran: {worker.output()}")
    assert ran("a") == ["a:fixed"]
    worker.send_signal(signal.SIGINT)
    code, output = finish(worker, 60)
    assert code == 0, output[-3000:]


@pytest.mark.parametrize(
    "flags", [["--burst"], ["--processes", "2"], ["--max-jobs-per-child", "5"]]
)
def test_reload_runs_one_worker_process(flags: list[str]) -> None:
    result = manage("runworker", "--reload", *flags)
    assert result.returncode != 0
    assert f"cannot be combined with {flags[0]}" in result.stderr
    assert not Worker.objects.exists()


def test_the_jobs_module_text_is_valid() -> None:
    compile(textwrap.dedent(JOBS.format(version="v")), "jobs", "exec")
