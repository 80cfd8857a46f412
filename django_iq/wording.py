"""Words shared by every door that talks to people (admin messages, API messages, commands)."""


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``"1 entry"``, ``"3 entries"``: a count with its noun."""
    return f"{count:,} {singular if count == 1 else plural_form or singular + 's'}"
