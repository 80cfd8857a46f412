"""The Python blocks of docs/howto/testing.md run as written. A block headed by a file
comment (``# accounts/jobs.py``) is run at collection as that module, so later blocks import it;
the jobs it registers are registered for the tests of this file only. Blocks that define tests
are run at collection and their tests collected here, so pytest runs them with their marks and
fixtures (``iq_jobs``) and Django runs their test cases; the other blocks run in a test of
their own, in order."""

from __future__ import annotations

import inspect
import re
import sys
import types
import unittest
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

from django_iq import registry
from tests.docsrun import FILE_COMMENT

PAGE = Path(__file__).resolve().parent.parent.parent / "docs" / "howto" / "testing.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
DEFINES_TESTS = re.compile(r"^(def test_|class \w+\(.*TestCase\))", re.MULTILINE)


def _run(number: int, block: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": f"docs_testing_block_{number}"}
    exec(compile(block, f"{PAGE.name} block {number}", "exec"), namespace)  # noqa: S102
    return namespace


def _run_module(number: int, block: str, path: str) -> None:
    """Run ``block`` as the module at ``path`` (``accounts/jobs.py``), its packages made."""
    parts = path.split("/")
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        module = sys.modules.setdefault(name, types.ModuleType(name))
        if depth < len(parts):
            module.__path__ = []
        if depth > 1:
            setattr(sys.modules[".".join(parts[: depth - 1])], parts[depth - 1], module)
    code = compile(block, f"{PAGE.name} block {number}", "exec")
    exec(code, sys.modules[".".join(parts)].__dict__)  # noqa: S102


BLOCKS = list(enumerate(BLOCK.findall(PAGE.read_text()), 1))
MODULE_BLOCKS = [
    (number, block, match.group(1))
    for number, block in BLOCKS
    if (match := FILE_COMMENT.match(block)) and match.group(1) != "settings"
]
PLAIN_BLOCKS = [
    (number, block)
    for number, block in BLOCKS
    if not DEFINES_TESTS.search(block) and number not in {n for n, _, _ in MODULE_BLOCKS}
]

_registered = registry.registered_jobs()
for _number, _block, _path in MODULE_BLOCKS:
    _run_module(_number, _block, _path)
# The page's jobs, registered around each test of this file only (see _page_jobs).
PAGE_JOBS = {
    name: job for name, job in registry.registered_jobs().items() if name not in _registered
}
for _name in PAGE_JOBS:
    del registry._jobs[_name]


@pytest.fixture(autouse=True)
def _page_jobs() -> Iterator[None]:
    registry._jobs.update(PAGE_JOBS)
    try:
        yield
    finally:
        for name in PAGE_JOBS:
            registry._jobs.pop(name, None)


for _number, _block in BLOCKS:
    if _number in dict(PLAIN_BLOCKS) or _number in {n for n, _, _ in MODULE_BLOCKS}:
        continue
    for _name, _value in _run(_number, _block).items():
        defined_here = getattr(_value, "__module__", None) == f"docs_testing_block_{_number}"
        if not defined_here:
            continue
        if _name.startswith("test_") and inspect.isfunction(_value):
            globals()[f"test_block_{_number}_{_name[5:]}"] = _value
        elif inspect.isclass(_value) and issubclass(_value, unittest.TestCase):
            globals()[f"TestBlock{_number}{_name}"] = _value
# Else pytest would collect the last test case a second time, under the loop's name.
del _name, _value


def test_the_page_keeps_its_examples() -> None:
    assert len(BLOCKS) >= 5 and len(PLAIN_BLOCKS) >= 2, f"{PAGE} lost its examples"
    assert set(PAGE_JOBS) == {"accounts.jobs.send_welcome"}, f"{PAGE} lost its job"


@pytest.mark.django_db
@pytest.mark.parametrize(("number", "block"), PLAIN_BLOCKS)
def test_each_block_without_tests_runs(number: int, block: str) -> None:
    with transaction.atomic():
        _run(number, block)
        transaction.set_rollback(True)
