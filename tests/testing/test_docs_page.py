"""The Python blocks of docs/howto/testing.md run as written. Blocks that define tests are
run at collection and their tests collected here, so pytest runs them with their marks and
fixtures (``iq_jobs``) and Django runs their test cases; the other blocks run in a test of
their own, in order."""

from __future__ import annotations

import inspect
import re
import unittest
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

PAGE = Path(__file__).resolve().parent.parent.parent / "docs" / "howto" / "testing.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
DEFINES_TESTS = re.compile(r"^(def test_|class \w+\(.*TestCase\))", re.MULTILINE)


def _run(number: int, block: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": f"docs_testing_block_{number}"}
    exec(compile(block, f"{PAGE.name} block {number}", "exec"), namespace)  # noqa: S102
    return namespace


BLOCKS = list(enumerate(BLOCK.findall(PAGE.read_text()), 1))
PLAIN_BLOCKS = [(number, block) for number, block in BLOCKS if not DEFINES_TESTS.search(block)]

for _number, _block in BLOCKS:
    if _block in dict(PLAIN_BLOCKS).values():
        continue
    for _name, _value in _run(_number, _block).items():
        defined_here = getattr(_value, "__module__", None) == f"docs_testing_block_{_number}"
        if not defined_here:
            continue
        if _name.startswith("test_") and inspect.isfunction(_value):
            globals()[f"test_block_{_number}_{_name[5:]}"] = _value
        elif inspect.isclass(_value) and issubclass(_value, unittest.TestCase):
            globals()[f"TestBlock{_number}{_name}"] = _value


def test_the_page_keeps_its_examples() -> None:
    assert len(BLOCKS) >= 5 and len(PLAIN_BLOCKS) >= 2, f"{PAGE} lost its examples"


@pytest.mark.django_db
@pytest.mark.parametrize(("number", "block"), PLAIN_BLOCKS)
def test_each_block_without_tests_runs(number: int, block: str) -> None:
    with transaction.atomic():
        _run(number, block)
        transaction.set_rollback(True)
