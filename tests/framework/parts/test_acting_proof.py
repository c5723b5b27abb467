"""Tests for framework/parts/acting_proof.py: the comparison of a copy's outputs with its
network's, at float32's rounding and no looser (the probe observations: test_acting.py)."""

import numpy as np

from framework.parts.acting_proof import disagreement


def test_outputs_equal_to_float32_rounding_agree():
    network = np.array([[100.0, -3.0], [0.5, 2.0]], np.float32)
    copy = network * (1 + 4e-6)  # 4e-6 relative: within 1e-5
    assert disagreement((copy, network[:, 0]), (network, network[:, 0])) is None


def test_an_output_near_zero_is_held_to_the_outputs_scale():
    """0 by cancellation of terms of ~100 carries their rounding: 1e-5 * 100 = 1e-3 absolute."""
    network = np.array([100.0, 0.0], np.float32)
    assert disagreement(np.array([100.0, 9e-4], np.float32), network) is None
    found = disagreement(np.array([100.0, 2e-3], np.float32), network)
    assert (
        found == "the numpy copy gives 0.002 where the network gives 0 (tolerance 1e-05 relative)"
    )


def test_the_largest_difference_is_named():
    network = np.array([1.0, 2.0, 3.0], np.float32)
    found = disagreement(np.array([1.1, 2.0, 2.5], np.float32), network)
    assert found.startswith("the numpy copy gives 2.5 where the network gives 3 ")


def test_outputs_of_another_shape_or_number_disagree():
    network = (np.zeros((4, 3)), np.zeros(4))
    assert disagreement((np.zeros((4, 2)), np.zeros(4)), network) == (
        "the numpy copy's output has shape (4, 2), the network's (4, 3)"
    )
    found = disagreement(np.zeros((4, 3)), network)
    assert found == "the numpy copy's outputs number 1, the network's 2"
