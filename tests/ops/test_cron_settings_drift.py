"""A changed ``DJANGO_IQ["CRON"]`` said where cron jobs are listed: the leader syncs the settings
it started with, so ``iq_cron list`` and the admin's cron list name the declared cron jobs it
has not loaded, changed or removed yet, until a leader (re)starts with the new settings."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client

from django_iq.models import CronJob
from tests.admin.conftest import changelist_url, login_superuser, messages_of
from tests.conftest import iq_settings_with
from tests.leader.test_leader import cron_leader

pytestmark = pytest.mark.django_db(transaction=True)

NOOP = "tests.testapp.jobs.noop"
STARTED_WITH = {
    "nightly": {"job": NOOP, "schedule": "30 2 * * *", "timezone": "Europe/Paris"},
    "weekly": {"job": NOOP, "schedule": "0 4 * * 1"},
}
# Then edited: nightly moved to 03:30, weekly removed, often added.
EDITED = {
    "nightly": {"job": NOOP, "schedule": "30 3 * * *", "timezone": "Europe/Paris"},
    "often": {"job": NOOP, "every": timedelta(seconds=90), "queue": "default"},
}
NOT_LOADED = (
    "The settings declare cron jobs the leader has not loaded yet: {}; they start once a leader "
    "(re)starts with these settings."
)
CHANGED = (
    "The settings declare other schedules, jobs, arguments, queues or priorities than the "
    "leader has stored for: {}; they change once a leader (re)starts with these settings."
)
NOT_DECLARED = (
    "The leader still has cron jobs the settings no longer declare: {}; they are removed once a "
    "leader (re)starts with these settings."
)


def iq_cron(*args: str) -> str:
    out = io.StringIO()
    call_command("iq_cron", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def leader_started_with(cron: dict[str, dict[str, object]]) -> None:
    """A leader's first pass with ``cron`` as its settings; it then stops, as on a restart."""
    leader = cron_leader("a")
    with iq_settings_with(CRON=cron):
        assert leader.run_once().is_leader
    leader._step_down()


@iq_settings_with(CRON=STARTED_WITH)
def test_before_a_leader_ran_the_list_shows_the_declared_cron_jobs_as_not_loaded() -> None:
    lines = iq_cron("list").splitlines()

    assert lines[0].split()[:2] == ["NAME", "SCHEDULE"]
    assert lines[1].split() == (
        ["nightly", "30", "2", "*", "*", "*", "Europe/Paris", NOOP, "default", "not", "loaded"]
        + ["-"] * 4
    )
    assert lines[2].split()[:7] == ["weekly", "0", "4", "*", "*", "1", "UTC"]
    assert lines[3:] == [NOT_LOADED.format("nightly, weekly")]
    document = json.loads(iq_cron("list", "--json"))
    assert document == {
        "cron_jobs": [],
        "settings_differ": {"not_loaded": ["nightly", "weekly"], "changed": [], "not_declared": []},
    }


@iq_settings_with(CRON=STARTED_WITH)
def test_once_the_leader_loaded_the_settings_nothing_differs() -> None:
    leader_started_with(STARTED_WITH)

    output = iq_cron("list")

    assert [line.split()[0] for line in output.splitlines()] == ["NAME", "nightly", "weekly"]
    assert "not loaded" not in output
    assert json.loads(iq_cron("list", "--json"))["settings_differ"] == {
        "not_loaded": [],
        "changed": [],
        "not_declared": [],
    }


@iq_settings_with(CRON=EDITED)
def test_edited_settings_are_said_until_a_leader_restarts_with_them() -> None:
    leader_started_with(STARTED_WITH)

    lines = iq_cron("list").splitlines()

    assert [line.split()[0] for line in lines[1:4]] == ["nightly", "often", "weekly"]
    assert lines[1].split()[1:3] == ["30", "2"], "the stored schedule, until the restart"
    assert lines[2].split() == (
        ["often", "every", "1m30s", "UTC", NOOP, "default", "not", "loaded"] + ["-"] * 4
    )
    assert lines[4:] == [
        NOT_LOADED.format("often"),
        CHANGED.format("nightly"),
        NOT_DECLARED.format("weekly"),
    ]
    assert json.loads(iq_cron("list", "--json"))["settings_differ"] == {
        "not_loaded": ["often"],
        "changed": ["nightly"],
        "not_declared": ["weekly"],
    }

    leader_started_with(EDITED)

    lines = iq_cron("list").splitlines()
    assert [line.split()[0] for line in lines] == ["NAME", "nightly", "often"]
    assert lines[1].split()[1:3] == ["30", "3"]
    assert CronJob.objects.get(name="nightly").schedule == "30 3 * * *"


@iq_settings_with(CRON=EDITED)
def test_the_admin_cron_list_says_what_the_leader_has_not_loaded(client: Client) -> None:
    leader_started_with(STARTED_WITH)
    login_superuser(client)

    response = client.get(changelist_url(CronJob))

    assert response.status_code == 200
    assert messages_of(response) == [
        NOT_LOADED.format("often"),
        CHANGED.format("nightly"),
        NOT_DECLARED.format("weekly"),
    ]
    assert "they start once a leader (re)starts" in response.content.decode()

    leader_started_with(EDITED)

    assert messages_of(client.get(changelist_url(CronJob))) == []
