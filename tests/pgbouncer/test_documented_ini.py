"""The pgbouncer.ini that docs/howto/deploy.md shows is the one the PgBouncer tests run with."""

from __future__ import annotations

import re

from tests.pgbouncer.conftest import INI, POOL_SIZE
from tests.processes import ROOT


def test_the_deploy_howto_shows_the_ini_file_the_tests_use() -> None:
    page = (ROOT / "docs" / "howto" / "deploy.md").read_text()
    blocks = re.findall(r"^```ini\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
    shown = [block for block in blocks if "[pgbouncer]" in block]

    assert shown == [
        INI.format(
            host="127.0.0.1",
            port=5432,
            listen_port=6432,
            auth_file="/etc/pgbouncer/userlist.txt",
            pool_size=POOL_SIZE,
        )
    ], "update the ini block of docs/howto/deploy.md, or tests/pgbouncer/conftest.py's INI"
