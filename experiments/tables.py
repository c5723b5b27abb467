"""How the tables and summaries of runs, trials and evaluations print and order what they show.

Figures (returns, intervals, times) get four significant digits whatever the task's scale, so
that a bandit's mean of 0.9467 is not printed as 0.9 beside its minimum of 0.93, nor a MuJoCo
return of 12,345.6 as 1.235e+04. Values and names sort as a reader counts: numbers by value
(a learning rate of 0.0003 before 0.001 before 0.01), numbers inside names too (seed2 before
seed10, lr=3e-4 before lr=1e-3).
"""

import math
import numbers
import re
from collections.abc import Sequence

import numpy as np

SIGNIFICANT_DIGITS = 4
# A number inside a name: 3, 0.001, 1e-3, 2.5E+4; signed after "=", "[", "(" or ",".
_NUMBER = re.compile(r"(?:(?<=[=\[(,])-)?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")


def significant(value: float | None, digits: int = SIGNIFICANT_DIGITS) -> str:
    """`value` to `digits` significant digits in plain notation, without trailing zeros
    (0.9467, 187.4, 12346, 0.00001234, 30); "n/a" for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    value = float(value)
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def summary(values: Sequence[float]) -> str:
    """Episodes' returns or lengths as `mean 0.95, std 0.01633, min 0.93, max 0.97`."""
    figures = {"mean": np.mean(values), "std": np.std(values), "min": min(values)}
    figures["max"] = max(values)
    return ", ".join(f"{name} {significant(value)}" for name, value in figures.items())


def cell(value: object) -> str:
    """A table cell: a number (not a boolean) to four significant digits, anything else as
    its text."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return significant(value)
    return str(value)


def order(value: object) -> tuple:
    """A sort key: numbers (not booleans) first, by value; then anything else by its text, with
    the numbers inside it compared by value."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and value == value:
        return (0, float(value), ())
    return (1, 0.0, natural(str(value)))


def natural(text: str) -> tuple:
    """`text` as a sort key whose numbers compare by value: "seed2" before "seed10"."""
    key, position = [], 0
    for match in _NUMBER.finditer(text):
        key += [(0, text[position : match.start()], 0.0), (1, "", float(match.group()))]
        position = match.end()
    return (*key, (0, text[position:], 0.0))
