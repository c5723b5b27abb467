"""Figures to four significant digits at every scale, and values sorted as numbers."""

import math

import numpy as np
import pytest

from experiments import tables


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.9467, "0.9467"),  # a bandit's return: not 0.9
        (0.93, "0.93"),
        (187.36, "187.4"),  # CartPole's
        (-1234.567, "-1235"),  # Pendulum's
        (12345.6, "12346"),  # MuJoCo's: not 1.235e+04
        (150000.0, "150000"),  # steps: not 1.5e+05
        (0.00001234, "0.00001234"),
        (30.0, "30"),
        (np.int64(200), "200"),
        (0.0, "0"),
        (math.nan, "n/a"),
        (None, "n/a"),
        (math.inf, "inf"),
    ],
)
def test_figures_have_four_significant_digits_in_plain_notation(value, text):
    assert tables.significant(value) == text


def test_a_summary_of_small_returns_shows_the_mean_as_finely_as_the_minimum():
    # mean (0.93 + 0.97 + 0.95) / 3 = 0.95; std sqrt((0.02^2 + 0.02^2 + 0) / 3) = 0.016330
    assert tables.summary([0.93, 0.97, 0.95]) == "mean 0.95, std 0.01633, min 0.93, max 0.97"
    assert tables.summary([30, 30]) == "mean 30, std 0, min 30, max 30"


def test_values_sort_as_numbers_and_numbers_inside_names_by_value():
    rates = [0.001, 0.01, 0.0003]
    assert sorted(rates, key=tables.order) == [0.0003, 0.001, 0.01]
    # A boolean is not a number here: text, as True sorts among the other texts.
    assert sorted(["relu", 3, True, 1.5], key=tables.order) == [1.5, 3, True, "relu"]
    names = ["lr=1e-3_seed10", "lr=3e-4_seed2", "lr=1e-3_seed2", "lr=-1e-3"]
    assert sorted(names, key=tables.natural) == [
        "lr=-1e-3",
        "lr=3e-4_seed2",
        "lr=1e-3_seed2",
        "lr=1e-3_seed10",
    ]
    assert sorted(["b", "a10", "a9"], key=tables.natural) == ["a9", "a10", "b"]


def test_a_cell_prints_numbers_to_four_digits_and_the_rest_as_text():
    assert tables.cell(0.00030000000000000003) == "0.0003"
    assert tables.cell(64.0) == "64"  # an integer a missing value made a float
    assert tables.cell(True) == "True" and tables.cell("(64, 64)") == "(64, 64)"
