"""The value types of the commands' flags: one parser per kind of number, one wording."""

from __future__ import annotations

import argparse
import math


def _whole_number(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
    return value


def positive(text: str) -> int:
    """A whole number of 1 or more."""
    return _whole_number(text, 1)


def non_negative(text: str) -> int:
    """A whole number of 0 or more."""
    return _whole_number(text, 0)


def non_negative_seconds(text: str) -> float:
    """A finite number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a number of seconds from 0, got {text!r}")
    return value
