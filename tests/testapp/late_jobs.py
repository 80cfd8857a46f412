"""A job module no worker of the test settings imports: the tests import it to stand for a job
deployed to some workers only."""

from __future__ import annotations

from django_iq import job
from tests.testapp.models import JobRun


@job
def arrives_later(token: str) -> str:
    JobRun.objects.create(token=token)
    return token
