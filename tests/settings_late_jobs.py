"""The test settings plus one more job module: a worker of a later deploy that knows a job the
others do not (tests/concurrency/test_worker_processes.py)."""

from tests.settings import *  # noqa: F403
from tests.settings import DJANGO_IQ

DJANGO_IQ = {
    **DJANGO_IQ,
    "JOB_MODULES": [*DJANGO_IQ.get("JOB_MODULES", []), "tests.testapp.late_jobs"],
}
