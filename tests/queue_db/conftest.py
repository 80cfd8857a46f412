"""tests/queue_db runs only under tests.settings_queue_db (the queue on a database of its own),
which tests/test_queue_database.py starts; the suite's own run leaves it out."""

from django.conf import settings

if "queue" not in settings.DATABASES:
    collect_ignore_glob = ["test_*.py"]
