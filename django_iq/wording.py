"""Words shared by every door that talks to people (admin messages, API messages, commands)."""


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``"1 entry"``, ``"3 entries"``: a count with its noun."""
    return f"{count:,} {singular if count == 1 else plural_form or singular + 's'}"


def used_of(used: int, cap: int | None) -> str:
    """``"2 / 3"``: what is used of a cap; ``"-"`` when there is no cap."""
    return "-" if cap is None else f"{used} / {cap}"


def rate_use(recent: int, count: int | None, period_seconds: float | None) -> str:
    """``"3 / 5 per 1 s"``: starts within a rate limit's window; ``"-"`` without one."""
    if count is None or period_seconds is None:
        return "-"
    return f"{recent} / {count} per {period_seconds:g} s"
