"""The argument checks: what each allows, and one sentence naming `Owner.name` otherwise."""

import numpy as np
import pytest

from framework.validation import (
    require_non_negative,
    require_non_negative_number,
    require_positive,
    require_positive_number,
    require_unit_interval,
)


class Part:
    pass


@pytest.mark.parametrize(
    ("check", "good", "bad", "allowed"),
    [
        (require_positive, [1, 7, np.int64(3)], [0, -1, 1.0, True, "2", None], "an integer >= 1"),
        (require_non_negative, [0, 5], [-1, 0.0, False], "an integer >= 0"),
        (
            require_positive_number,
            [1, 1e-9, 2.5, np.float32(0.1)],
            [0, -0.5, float("nan"), True, "1"],
            "a number > 0",
        ),
        (
            require_non_negative_number,
            [0, 0.0, 3.5],
            [-1e-9, float("nan"), None, False],
            "a number >= 0",
        ),
        (
            require_unit_interval,
            [0, 0.5, 1.0],
            [-0.1, 1.01, float("nan"), True],
            "a number in [0, 1]",
        ),
    ],
)
def test_each_check_allows_its_values_and_names_the_parameter_otherwise(check, good, bad, allowed):
    for value in good:
        check(Part(), value=value)
    for value in bad:
        with pytest.raises(ValueError) as raised:
            check(Part(), value=value)
        assert str(raised.value) == (
            f"Part.value must be {allowed}, got {value!r} ({type(value).__name__})."
        )


def test_the_first_bad_value_of_several_is_named():
    with pytest.raises(ValueError, match=r"^Part\.b must be a number > 0, got -2 \(int\)\.$"):
        require_positive_number(Part(), a=1.0, b=-2, c=-3)


def test_an_owner_given_by_name_is_named_as_a_config_writes_it():
    with pytest.raises(ValueError, match=r"^optimizers\.Adam\.learning_rate must be a number > 0"):
        require_positive_number("optimizers.Adam", learning_rate=-0.1)
