"""Argument types of the commands (argparse ``type=``): numbers that are whole or finite and in
range, so that ``nan``, ``inf`` or a huge number is refused on the command line, not deep in a
thread; and filter values that must not be empty."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

# Ids and counts: 64-bit, what the database's keys hold.
MAX_WHOLE = 2**63 - 1


def whole(minimum: int = 1, maximum: int = MAX_WHOLE) -> Callable[[str], int]:
    """A whole number from ``minimum`` to ``maximum``."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
        if number < minimum:
            if minimum == 1:
                raise argparse.ArgumentTypeError(f"must be greater than zero, got {number}")
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {number}")
        if number > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:,}, got {number}")
        return number

    return parse


def seconds(
    minimum: float, maximum: float, *, above_minimum: bool = False
) -> Callable[[str], float]:
    """A finite number of seconds from ``minimum`` (or above it) to ``maximum``."""

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise argparse.ArgumentTypeError(f"expected a finite number of seconds, got {value!r}")
        if number < minimum or (above_minimum and number == minimum):
            bound = "greater than" if above_minimum else "at least"
            shown = "zero" if minimum == 0 else f"{minimum:g}"
            raise argparse.ArgumentTypeError(f"must be {bound} {shown}, got {value}")
        if number > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:g}, got {value}")
        return number

    return parse


positive_int = whole(1)


def non_empty(value: str) -> str:
    """A filter value (argparse ``type=``): an empty one would match everything."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return value.strip()


def add_ids_option(
    parser: argparse.ArgumentParser, help_text: str, *, required: bool = True
) -> None:
    """The repeatable ``--id N...`` option, into ``options["ids"]`` (None when not given)."""
    parser.add_argument(
        "--id",
        dest="ids",
        type=positive_int,
        action="extend",
        nargs="+",
        required=required,
        metavar="N",
        help=help_text,
    )
