from collections.abc import Iterator

import pytest

from tests.processes import kill_leftovers


@pytest.fixture(autouse=True)
def _no_leftover_processes() -> Iterator[None]:
    yield
    kill_leftovers()
