"""Words shared by every door that talks to people (admin messages, API messages, commands)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``"1 entry"``, ``"3 entries"``: a count with its noun."""
    return f"{count:,} {singular if count == 1 else plural_form or singular + 's'}"


def duration(seconds: float | None, none: str = "-") -> str:
    """A duration or an age, one wording on every surface (the admin, the dashboard, the
    commands): ``"20 ms"``, ``"1.5 s"``, ``"42 s"``, ``"3 min 5 s"``, ``"2 h 10 min"``,
    ``"3 d 4 h"``; ``none`` for None. Negative values (clocks a little apart) read as 0."""
    if seconds is None:
        return none
    seconds = max(0.0, float(seconds))
    if seconds == 0:
        return "0 s"
    if seconds < 1:
        return f"{seconds * 1000:.3g} ms"
    if seconds < 10:
        return f"{int(seconds * 10) / 10:g} s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86_400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86_400} d {whole % 86_400 // 3600} h"


def byte_size(size: int | None, none: str = "-") -> str:
    """A size on disk in decimal units (1 kB = 1,000 bytes), one decimal below 100: ``"512 B"``,
    ``"8.2 kB"``, ``"12.3 MB"``, ``"106 MB"``, ``"1.5 GB"``; ``none`` for None."""
    if size is None:
        return none
    value, unit = float(size), "B"
    for larger in ("kB", "MB", "GB", "TB"):
        if value < 999.5:
            break
        value, unit = value / 1000, larger
    return f"{value:.0f} {unit}" if unit == "B" or value >= 99.95 else f"{value:.1f} {unit}"


def used_of(used: int, cap: int | None) -> str:
    """``"2 / 3"``: what is used of a cap; ``"-"`` when there is no cap."""
    return "-" if cap is None else f"{used} / {cap}"


def rate_use(recent: int, count: int | None, period_seconds: float | None) -> str:
    """``"3 / 5 per 1 s"``: starts within a rate limit's window; ``"-"`` without one."""
    if count is None or period_seconds is None:
        return "-"
    return f"{recent} / {count} per {period_seconds:g} s"


# How alike a name must be to a known one to be suggested (difflib's ratio: twice the matched
# characters over both lengths). difflib's default of 0.6 suggested names sharing little more
# than a few letters ('fast' for 'default'); 0.75 keeps a typo, a missing or doubled letter, a
# transposition or a missing suffix ('POLL_INTERVAL' for 'POLL_INTERVAL_SECONDS'). Names of
# five characters or more also match within two edits ('staus' for 'state', 'emial' for
# 'emails').
CLOSE_NAME_CUTOFF = 0.75
CLOSE_NAME_EDITS = 2


def close_names(name: str, known: Iterable[str]) -> list[str]:
    """The known name closest to ``name``, in a list of one, or an empty list when none is
    close enough to be what was meant (for "Did you mean ...?").

    Dotted names (jobs) are compared part by part as well: their shared module path alone
    made any two jobs of a module look alike ('app.jobs.nothing' suggested 'app.jobs.chain').
    """
    candidates = difflib.get_close_matches(name, list(known), n=5, cutoff=0.5)
    for candidate in candidates:
        if not _alike(name, candidate):
            continue
        module, _, last = name.rpartition(".")
        known_module, _, known_last = candidate.rpartition(".")
        if not module or not known_module:
            return [candidate]
        if _alike(last, known_last) and (module == known_module or _alike(module, known_module)):
            return [candidate]
    return []


def _alike(first: str, second: str) -> bool:
    if difflib.SequenceMatcher(None, first, second).ratio() >= CLOSE_NAME_CUTOFF:
        return True
    return min(len(first), len(second)) >= 5 and _edits(first, second) <= CLOSE_NAME_EDITS


def _edits(first: str, second: str) -> int:
    """Characters changed, added or removed, and neighbours swapped, to make ``second`` of
    ``first`` (the optimal string alignment distance)."""
    rows = [list(range(len(second) + 1))]
    for i, a in enumerate(first, 1):
        row = [i]
        for j, b in enumerate(second, 1):
            cost = min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + (a != b))
            if i > 1 and j > 1 and a == second[j - 2] and first[i - 2] == b:
                cost = min(cost, rows[-2][j - 2] + 1)
            row.append(cost)
        rows.append(row)
    return rows[-1][-1]


def one_edit_apart(first: str, second: str) -> bool:
    """True if ``second`` is ``first`` with one character changed, added or removed, or two
    neighbours swapped; false for equal names."""
    return _edits(first, second) == 1
