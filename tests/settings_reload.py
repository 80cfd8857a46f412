"""The test settings plus a jobs module written by the test itself (``IQ_RELOAD_MODULE``, on the
``PYTHONPATH`` the test gives): the module ``runworker --reload`` must notice when it changes
(tests/worker/test_reload.py). ``IQ_RELOAD_URLCONF``, when given, is the URLconf (one that
imports the jobs module, as a project's views do)."""

import os

from tests.settings import *  # noqa: F403
from tests.settings import DJANGO_IQ

DJANGO_IQ = {
    **DJANGO_IQ,
    "JOB_MODULES": [*DJANGO_IQ.get("JOB_MODULES", []), os.environ["IQ_RELOAD_MODULE"]],
}

if os.environ.get("IQ_RELOAD_URLCONF"):
    ROOT_URLCONF = os.environ["IQ_RELOAD_URLCONF"]
