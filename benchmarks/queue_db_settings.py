"""The benchmarks' settings (``benchmarks.fleet_settings``) with django_iq's tables on a database
of their own: the application's from DATABASE_URL, the queue's from QUEUE_DATABASE_URL, as
docs/howto/queue-database.md sets it up."""

from benchmarks.fleet_settings import *  # noqa: F403
from benchmarks.fleet_settings import DATABASES, DJANGO_IQ
from tests.settings import env

DATABASES["queue"] = env.db("QUEUE_DATABASE_URL")
DATABASE_ROUTERS = ["django_iq.routers.QueueRouter"]
DJANGO_IQ = {**DJANGO_IQ, "DATABASE": "queue"}
