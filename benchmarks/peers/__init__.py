"""Side-by-side benchmark of django_iq and its peers: django-tasks-db, procrastinate, Celery.

    python -m benchmarks.peers                     # all systems, full sizes (minutes)
    python -m benchmarks.peers --quick             # small sizes: a smoke test
    python -m benchmarks.peers --systems django_iq procrastinate --json peers.json

See ``__main__`` for the workloads and ``harness`` for how each one is measured.
"""
