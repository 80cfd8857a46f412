"""Memory of the API's listings over large rows: entries of 1 MiB arguments, read as pages and
streamed, each in a fresh process whose peak resident memory is compared with its own before.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/iq_bench python -m benchmarks.api_page_memory
    python -m benchmarks.api_page_memory --entries 300 --argument-mib 1

It creates (and afterwards drops) its own database, so it never touches yours. The table shows,
per way of reading: the requests made, the largest response body, and how much the process's
peak resident memory grew while answering (``ru_maxrss``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WAYS = {
    "first page, limit=1000": {"limit": "1000"},
    "every page, limit=1000": {"limit": "1000", "walk": "1"},
    "format=ndjson": {"format": "ndjson"},
}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entries", type=int, default=300)
    parser.add_argument("--argument-mib", type=float, default=1.0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{ROOT / '.bench.sqlite3'}")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    if args.child:
        print(json.dumps(read(json.loads(args.child))))
        return 0
    from django.db import connection
    from django.test.utils import setup_databases, teardown_databases

    from tests.processes import database_url

    old = setup_databases(verbosity=0, interactive=False)
    try:
        # Just under MAX_ARGUMENTS_BYTES for 1 MiB (the JSON list around the string takes a few).
        fill(args.entries, int(args.argument_mib * 1024 * 1024) - 64)
        database = dict(os.environ, DATABASE_URL=database_url())
        rows = []
        for way, params in WAYS.items():
            child = subprocess.run(
                [sys.executable, "-m", "benchmarks.api_page_memory", "--child", json.dumps(params)],
                cwd=ROOT,
                env=database,
                capture_output=True,
                text=True,
                check=True,
            )
            rows.append((way, json.loads(child.stdout.strip().splitlines()[-1])))
    finally:
        teardown_databases(old, verbosity=0)
    print(
        f"{args.entries} entries of {args.argument_mib:g} MiB arguments, on {connection.vendor}\n"
    )
    print("| reading | requests | largest body (MB) | peak RSS growth (MB) |")
    print("|---|---|---|---|")
    for way, found in rows:
        print(
            f"| {way} | {found['requests']} | {found['largest_body'] / 1e6:.1f} | "
            f"{found['rss_growth'] / 1e6:.0f} |"
        )
    return 0


def fill(total: int, size: int) -> None:
    from django_iq import enqueue_many
    from tests.testapp.jobs import record

    for start in range(0, total, 20):
        count = min(20, total - start)
        enqueue_many(record, [(("x" * size,), {}) for _ in range(count)])


def read(params: dict[str, str]) -> dict[str, int]:
    """Answer the listing as the API does for a signed-in superuser; return the requests made,
    the largest body and the growth of resident memory at its peak meanwhile (bytes)."""
    import resource

    from django.contrib.auth.models import User
    from django.test import Client

    user = User.objects.create_superuser(f"bench{os.getpid()}")
    client = Client()
    client.force_login(user)
    walk = params.pop("walk", None)
    import psutil

    # Peak growth over the resident memory now (the peak so far may be higher: imports).
    before = psutil.Process().memory_info().rss
    path: str | None = "/iq/api/entries/?" + "&".join(f"{k}={v}" for k, v in params.items())
    requests = largest = 0
    while path:
        response = client.get(path)
        requests += 1
        if params.get("format") == "ndjson":
            size = sum(len(chunk) for chunk in response.streaming_content)
            path = None
        else:
            size = len(response.content)
            path = response.json()["next"] if walk else None
        largest = max(largest, size)
        del response
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    user.delete()
    return {"requests": requests, "largest_body": largest, "rss_growth": grown}


if __name__ == "__main__":
    sys.exit(main())
