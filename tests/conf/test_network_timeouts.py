"""The connection options django_iq's processes add so a silent network shows in bounded time."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
from django.db import connection, connections
from django.test import override_settings

from django_iq.conf import iq_settings
from django_iq.dbconn import apply_network_timeouts, network_timeouts
from django_iq.process import IQProcess


def timing(heartbeat: float, silent: float) -> override_settings:
    return override_settings(
        DJANGO_IQ={"HEARTBEAT_INTERVAL_SECONDS": heartbeat, "WORKER_SILENT_AFTER_SECONDS": silent}
    )


@pytest.fixture
def options_kept() -> Iterator[dict[str, object]]:
    """The default alias's OPTIONS, put back as they were after the test."""
    settings_dict = connections.settings["default"]
    saved = copy.deepcopy(settings_dict.get("OPTIONS", {}))
    yield settings_dict.setdefault("OPTIONS", {})
    settings_dict["OPTIONS"] = saved
    connection.settings_dict["OPTIONS"] = saved


def test_postgresql_gets_keepalives_and_timeouts_from_the_settings() -> None:
    with timing(heartbeat=5, silent=30):
        assert network_timeouts("postgresql") == {
            "connect_timeout": 10,
            "keepalives": 1,
            "keepalives_idle": 5,
            "keepalives_interval": 5,
            "keepalives_count": 3,
            # Unacknowledged data fails a statement by the fence: 30 - 2 x 5 s.
            "tcp_user_timeout": 20_000,
        }
        assert iq_settings.HEARTBEAT_INTERVAL_SECONDS == 5


def test_short_heartbeats_round_up_to_what_the_drivers_take() -> None:
    with timing(heartbeat=0.5, silent=3):
        assert network_timeouts("postgresql") == {
            "connect_timeout": 2,  # libpq's least
            "keepalives": 1,
            "keepalives_idle": 1,
            "keepalives_interval": 1,
            "keepalives_count": 3,
            "tcp_user_timeout": 2_000,
        }


def test_mariadb_gets_connect_and_write_timeouts_but_no_read_timeout() -> None:
    with timing(heartbeat=5, silent=30):
        # read_timeout would also end a job's own long query.
        assert network_timeouts("mysql") == {"connect_timeout": 10, "write_timeout": 20}
    assert network_timeouts("sqlite") == {}


def test_the_users_own_options_win_and_none_leaves_the_drivers_default(
    options_kept: dict[str, object],
) -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite connections have no network options")
    defaults = network_timeouts(connection.vendor)
    options_kept["connect_timeout"] = 7
    options_kept["write_timeout" if connection.vendor == "mysql" else "keepalives"] = None
    apply_network_timeouts()
    options = connections.settings["default"]["OPTIONS"]
    assert options["connect_timeout"] == 7
    removed = "write_timeout" if connection.vendor == "mysql" else "keepalives"
    assert removed not in options
    for key, value in defaults.items():
        if key not in ("connect_timeout", removed):
            assert options[key] == value


@pytest.mark.postgresql
@pytest.mark.django_db
def test_a_process_connects_with_them(options_kept: dict[str, object]) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("libpq's options")
    IQProcess("network-timeouts")
    fresh = connections.create_connection("default")
    try:
        with fresh.cursor() as cursor:
            cursor.execute("SELECT 1")
            assert cursor.fetchone() == (1,)
        dsn = fresh.connection.info.dsn
    finally:
        fresh.close()
    assert "keepalives=1" in dsn and "tcp_user_timeout=2000" in dsn, dsn
