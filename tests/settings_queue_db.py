"""The test settings with django_iq's tables on a database of their own: the application's
database from DATABASE_URL (PostgreSQL or SQLite), the queue's from QUEUE_DATABASE_URL
(PostgreSQL), routed by ``django_iq.routers.QueueRouter`` (docs/howto/queue-database.md).

tests/queue_db runs under these settings, started by tests/test_queue_database.py."""

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, DJANGO_IQ, env

# The three lines of docs/howto/queue-database.md.
DATABASES["queue"] = env.db("QUEUE_DATABASE_URL")
DATABASE_ROUTERS = ["django_iq.routers.QueueRouter"]
DJANGO_IQ = {**DJANGO_IQ, "DATABASE": "queue"}
