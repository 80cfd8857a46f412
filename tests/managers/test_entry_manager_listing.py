"""``Entry.objects`` lists everything it can do in one place (``managers/entries.py``), and
docs/reference/api.md documents exactly that list."""

from __future__ import annotations

import re
from pathlib import Path

from django.db import models

from django_iq.managers.entries import EntryManager

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "api.md"


def own_methods() -> set[str]:
    """The public methods ``Entry.objects`` has beyond Django's manager's."""
    base = set(dir(models.Manager))
    return {
        name
        for name in dir(EntryManager)
        if not name.startswith("_") and name not in base and callable(getattr(EntryManager, name))
    }


def documented() -> set[str]:
    page = REFERENCE.read_text()
    section = page.split("### `Entry.objects`", 1)[1].split("\n### ", 1)[0]
    # The first cell of each table row names the methods.
    cells = re.findall(r"^\| ([^|]+) \|", section, re.M)
    return {name for cell in cells for name in re.findall(r"`([a-z_]+)\(", cell)}


def test_every_method_of_entry_objects_is_documented_and_nothing_else() -> None:
    assert own_methods() == documented()


def test_entry_objects_has_no_private_methods_of_its_own() -> None:
    """Helpers live in the module that does the work, not on the manager."""
    base = set(dir(models.Manager))
    private = {
        name for name in vars(EntryManager) if name.startswith("_") and not name.startswith("__")
    }
    assert private - base == set()
