"""conf.py: defaults, the user's DJANGO_IQ dict, environment overrides and the cache reset."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from django.test import override_settings

from django_iq.conf import SETTINGS, iq_settings
from django_iq.exceptions import ImproperlyConfiguredIQ
from tests.conftest import iq_settings_with


@pytest.fixture
def set_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], None]]:
    """Set ``DJANGO_IQ_<KEY>`` variables; the settings cache is cleared before and after."""

    def setter(key: str, value: str) -> None:
        monkeypatch.setenv(f"DJANGO_IQ_{key}", value)
        iq_settings.reset()

    yield setter
    monkeypatch.undo()
    iq_settings.reset()


def test_keys_missing_from_the_user_dict_take_their_defaults() -> None:
    assert iq_settings.CLAIM_BATCH_SIZE == SETTINGS["CLAIM_BATCH_SIZE"].default == 100
    assert iq_settings.DEFAULT_QUEUE == "default"
    assert iq_settings.TRACEBACK_MAX_CHARS == 20_000


@override_settings(DJANGO_IQ={})
def test_an_empty_user_dict_gives_every_default() -> None:
    for key, spec in SETTINGS.items():
        assert getattr(iq_settings, key) == spec.default, key


def test_user_values_override_defaults() -> None:
    # tests/settings.py sets these two.
    assert iq_settings.POLL_INTERVAL_SECONDS == 0.05
    assert iq_settings.QUEUES == {"default": {}, "emails": {"weight": 2}, "reports": {}}


def test_override_settings_clears_the_cache_on_entry_and_exit() -> None:
    before = iq_settings.CLAIM_BATCH_SIZE

    with iq_settings_with(CLAIM_BATCH_SIZE=7):
        assert iq_settings.CLAIM_BATCH_SIZE == 7

    assert iq_settings.CLAIM_BATCH_SIZE == before


@override_settings(DJANGO_IQ=["not", "a", "dict"])
def test_a_user_setting_that_is_not_a_dict_is_ignored_by_the_reader() -> None:
    # The system check django_iq.E001 reports it; reading settings must not crash meanwhile.
    assert iq_settings.DEFAULT_QUEUE == "default"


@override_settings(DJANGO_IQ={"NOT_A_KEY": 1})
def test_unknown_user_keys_are_not_readable() -> None:
    with pytest.raises(AttributeError, match="django_iq has no setting 'NOT_A_KEY'"):
        _ = iq_settings.NOT_A_KEY


def test_an_env_variable_overrides_an_integer_key(set_env: Callable[[str, str], None]) -> None:
    set_env("PROCESSING_THREADS", "7")

    assert iq_settings.PROCESSING_THREADS == 7
    assert isinstance(iq_settings.PROCESSING_THREADS, int)


def test_an_env_variable_overrides_the_user_dict(set_env: Callable[[str, str], None]) -> None:
    set_env("POLL_INTERVAL_SECONDS", "2.5")

    assert iq_settings.POLL_INTERVAL_SECONDS == 2.5


def test_env_variables_are_ignored_for_keys_without_env(
    set_env: Callable[[str, str], None],
) -> None:
    assert not SETTINGS["CLAIM_BATCH_SIZE"].env
    set_env("CLAIM_BATCH_SIZE", "5")

    assert iq_settings.CLAIM_BATCH_SIZE == 100


def test_an_empty_env_variable_is_ignored(set_env: Callable[[str, str], None]) -> None:
    set_env("PROCESSING_THREADS", "")

    assert iq_settings.PROCESSING_THREADS == SETTINGS["PROCESSING_THREADS"].default


@pytest.mark.parametrize(
    ("key", "raw", "expected"),
    [
        ("PROCESSING_THREADS", "many", "set it to a whole number or unset it"),
        ("PROCESSING_THREADS", "2.5", "set it to a whole number or unset it"),
        ("POLL_INTERVAL_SECONDS", "soon", "set it to a number or unset it"),
    ],
)
def test_an_env_variable_that_is_not_a_number_raises_naming_the_variable(
    set_env: Callable[[str, str], None], key: str, raw: str, expected: str
) -> None:
    set_env(key, raw)

    with pytest.raises(ImproperlyConfiguredIQ, match=f"DJANGO_IQ_{key}='{raw}' is not a number"):
        getattr(iq_settings, key)
    with pytest.raises(ImproperlyConfiguredIQ, match=expected):
        getattr(iq_settings, key)


@pytest.mark.parametrize(
    ("key", "raw"),
    [
        ("PROCESSING_THREADS", "0"),
        ("PROCESSING_THREADS", "100000"),
        ("CPU_THROTTLE_PERCENT", "nan"),
        ("HEARTBEAT_INTERVAL_SECONDS", "inf"),
    ],
)
def test_an_env_variable_out_of_range_raises_naming_the_range(
    set_env: Callable[[str, str], None], key: str, raw: str
) -> None:
    spec = SETTINGS[key]
    set_env(key, raw)

    with pytest.raises(
        ImproperlyConfiguredIQ,
        match=rf"DJANGO_IQ_{key}='{raw}' is out of range \[{spec.minimum}, {spec.maximum}\]",
    ):
        getattr(iq_settings, key)


@pytest.mark.parametrize(("raw", "expected"), [("none", None), ("OFF", None), ("92.5", 92.5)])
def test_the_cpu_throttle_is_switched_off_or_on_from_the_environment(
    set_env: Callable[[str, str], None], raw: str, expected: float | None
) -> None:
    set_env("CPU_THROTTLE_PERCENT", raw)

    assert iq_settings.CPU_THROTTLE_PERCENT == expected


def test_the_cpu_throttle_is_off_by_default_and_memory_on() -> None:
    assert SETTINGS["CPU_THROTTLE_PERCENT"].default is None
    assert (
        SETTINGS["MEMORY_THROTTLE_PERCENT"].default,
        SETTINGS["MEMORY_RESUME_PERCENT"].default,
    ) == (
        90.0,
        80.0,
    )
