"""argparse types for the skb command's numbers: a bad value is a usage error (exit 2) that names the
option and what it takes, never an internal error or a value that makes a loop spin or a kill come at once."""
import argparse
import math


def _number(text, kind):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def positive_seconds(text):
    """Seconds, a finite number above 0 (nan, inf, 0 and negatives are refused)."""
    value = _number(text, float)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds above 0, e.g. 30")
    return value


def seconds(text):
    """Seconds, a finite number, 0 or more."""
    value = _number(text, float)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds, 0 or more, e.g. 300")
    return value


def record_number(text):
    """A record's number: 1-based, or negative counting from the end; never 0."""
    value = _number(text, int)
    if value == 0:
        raise argparse.ArgumentTypeError("'0': records are numbered from 1 (or from the end: -1 is the last)")
    return value


def count(text):
    """How many: 0 or more."""
    value = _number(text, int)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a count, 0 or more")
    return value
