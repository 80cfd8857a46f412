"""The docs' block runner (tests/docsrun.py) on pages written here: a block that does not run
fails naming its page and line, settings go through django_iq's checks, module blocks are real
modules, skip markers skip, and a page leaves nothing behind."""

from __future__ import annotations

import sys
from pathlib import Path
from unittest import SkipTest

import pytest

from django_iq import registry
from tests.docsrun import (
    BlockFailed,
    code_blocks,
    remove_shell_sandbox,
    run_block,
    runs_on_this_database,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _on_sqlite() -> None:
    reason = runs_on_this_database()
    if reason:
        pytest.skip(reason)


def page(tmp_path: Path, text: str) -> list:
    path = tmp_path / "page.md"
    path.write_text(text)
    return code_blocks([path])


def test_a_failing_python_block_names_its_page_and_line(tmp_path: Path) -> None:
    (block,) = page(tmp_path, "# Title\n\n```python\nx = 1\nundefined_name\n```\n")
    with pytest.raises(
        BlockFailed, match=r"page\.md:3: the python block raised NameError"
    ) as caught:
        run_block(block)
    assert f'{tmp_path / "page.md"}", line 5' in str(caught.value)


def test_a_settings_block_the_checks_refuse_fails(tmp_path: Path) -> None:
    blocks = page(
        tmp_path,
        '```python\nDJANGO_IQ = {"PROCESSING_THREADS": 8}\n```\n\n'
        '```python\nDJANGO_IQ = {"PROCESSING_THREADS": 0, "CRON": {"n": {"job": "no.such.job", "schedule": "* * * * *"}}}\n```\n',
    )
    run_block(blocks[0])
    with pytest.raises(BlockFailed, match=r"page\.md:5: the settings would be refused") as caught:
        run_block(blocks[1])
    assert "PROCESSING_THREADS" in str(caught.value)
    assert "'no.such.job' is not a registered job" in str(caught.value)


def test_a_module_block_is_a_module_for_later_blocks_and_is_undone_after(tmp_path: Path) -> None:
    blocks = page(
        tmp_path,
        "```python\n# docsdemo/jobs.py\nfrom django_iq import job\n\n\n@job\ndef ping() -> None: ...\n```\n\n"
        "```python\nfrom docsdemo.jobs import ping\n\nentry = ping.enqueue()\n"
        'assert entry.job_name == "docsdemo.jobs.ping", entry.job_name\n```\n',
    )
    run_block(blocks[1])
    assert "docsdemo.jobs" not in sys.modules and "docsdemo" not in sys.modules
    assert "docsdemo.jobs.ping" not in registry.registered_jobs()


def test_a_skip_marker_skips_the_next_block_with_its_reason(tmp_path: Path) -> None:
    blocks = page(
        tmp_path,
        '<!-- skip: next "needs a server" -->\n```python\nraise RuntimeError\n```\n\n'
        "```python\nassert True\n```\n",
    )
    with pytest.raises(SkipTest, match="needs a server"):
        run_block(blocks[0])
    run_block(blocks[1])


def test_a_failing_shell_block_names_its_line_and_shows_its_output(tmp_path: Path) -> None:
    blocks = page(
        tmp_path,
        "```bash\npython manage.py iq_pause emails\n```\n\n"
        '```bash\npython manage.py iq_pause no_such_queue\n```\n\n```json\n{"a": }\n```\n',
    )
    try:
        run_block(blocks[0])
        with pytest.raises(
            BlockFailed, match=r"page\.md:5: the shell block exited with status 1"
        ) as caught:
            run_block(blocks[1])
        assert "no_such_queue" in str(caught.value)
    finally:
        remove_shell_sandbox()
    with pytest.raises(BlockFailed, match=r"page\.md:9: the json block does not parse"):
        run_block(blocks[2])
