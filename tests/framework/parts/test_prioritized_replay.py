"""SumTree and PrioritizedReplay against priorities, probabilities and weights worked out by hand.

Observations are filled with a transition's id, as in test_replay.py, so a sample names the
transitions it drew.
"""

import numpy as np
import pytest

from framework.parts.exploration import LinearSchedule
from framework.parts.prioritized_replay import PrioritizedReplay, SumTree
from framework.parts.replay import ReplayCheckpointError
from tests.framework.parts.test_replay import add_step

DRAWS = 200_000
# A proportion p estimated from DRAWS draws has a standard deviation of at most
# sqrt(0.25 / 200_000) ~ 0.0011: 0.006 is over five of them.
TOLERANCE = 0.006


def test_sum_tree_finds_the_leaf_whose_running_sum_passes_each_mass():
    tree = SumTree(5)  # 8 leaves, 3 levels
    tree.set(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    # Running sums 1, 3, 6, 10: [0, 1) -> 0, [1, 3) -> 1, [3, 6) -> 2, [6, 10) -> 3.
    masses = np.array([0.0, 0.999, 1.0, 2.999, 3.0, 5.999, 6.0, 9.999])
    np.testing.assert_array_equal(tree.find(masses), [0, 0, 1, 1, 2, 2, 3, 3])
    assert tree.total == 10.0
    # Rounding that carries a mass to the total itself stays on the last leaf, not an empty one.
    assert tree.find(np.array([10.0]))[0] == 4


def test_sum_tree_draws_in_proportion_to_the_values_and_follows_updates():
    tree = SumTree(4)
    tree.set(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    rng = np.random.default_rng(0)
    counts = np.bincount(tree.find(rng.random(DRAWS) * tree.total), minlength=4)
    np.testing.assert_allclose(counts / DRAWS, [0.1, 0.2, 0.3, 0.4], atol=TOLERANCE)

    # Leaf 1 twice in one batch: its last value counts. Values 1, 6, 3, 0: total 10.
    tree.set(np.array([1, 3, 1]), np.array([5.0, 0.0, 6.0]))
    assert tree.total == 10.0
    counts = np.bincount(tree.find(rng.random(DRAWS) * tree.total), minlength=4)
    np.testing.assert_allclose(counts / DRAWS, [0.1, 0.6, 0.3, 0.0], atol=TOLERANCE)


def test_a_sum_tree_read_after_only_empty_writes_keeps_its_sums():
    # A resumed Rainbow run's first step may write no n-step transition before it samples:
    # the read summed an empty list of leaves and failed (IndexError).
    tree = SumTree(5)
    tree.set(np.arange(3), np.array([1.0, 2.0, 4.0]))
    assert tree.total == 7.0
    tree.set(np.array([], np.int64), np.array([]))
    assert tree.total == 7.0
    np.testing.assert_array_equal(tree.find(np.array([0.5, 6.5])), [0, 2])


def test_a_rebuilt_sum_tree_is_bitwise_the_updated_one():
    rng = np.random.default_rng(1)
    updated = SumTree(37)
    for _ in range(20):
        indices = rng.integers(0, 37, size=9)
        updated.set(indices, rng.random(9) ** 3)
        assert updated.total > 0  # sums brought up to date between batches, as sampling does
    rebuilt = SumTree(37)
    rebuilt.rebuild(updated.leaves(np.arange(37)))
    assert rebuilt.total == updated.total
    masses = rng.random(1000) * updated.total
    np.testing.assert_array_equal(rebuilt.find(masses), updated.find(masses))


def _replay(**kwargs) -> PrioritizedReplay:
    options = dict(observation_shape=(2,), observation_dtype=np.float32, capacity=8, alpha=0.5)
    return PrioritizedReplay(**{**options, **kwargs})


def test_new_transitions_enter_at_the_largest_priority_seen():
    replay = _replay(epsilon=0.0 + 1e-6, beta=LinearSchedule(1.0, 1.0, 1))
    for step_id in range(4):
        add_step(replay, step_id, 1.0)
    # Before any error, every priority is 1 (1^0.5 = 1): uniform.
    np.testing.assert_array_equal(replay.priorities(np.arange(4)), [1.0] * 4)
    batch = replay.sample_stack(1, 4, np.random.default_rng(0))
    drawn = batch["observation"][0, :, 0].astype(int)
    # Errors 3, 0, 1, 8 for the transitions drawn: priorities (|e| + 1e-6)^0.5.
    errors = np.array([[3.0, 0.0, 1.0, 8.0]])
    replay.update_priorities(errors)
    expected = dict(zip(drawn, np.sqrt(errors[0] + 1e-6), strict=False))  # a repeat: the last
    for index, priority in expected.items():
        assert replay.priorities(np.array([index]))[0] == pytest.approx(priority, rel=1e-12)
    add_step(replay, 4, 1.0)  # the largest |error| + epsilon seen: 8 + 1e-6
    assert replay.priorities(np.array([4]))[0] == pytest.approx(np.sqrt(8.0 + 1e-6), rel=1e-12)


def test_sampling_follows_priorities_to_the_power_alpha():
    replay = _replay(alpha=0.5)
    for step_id in range(4):
        add_step(replay, step_id, 1.0)
    replay._sampled = np.arange(4)  # as if a sample had drawn each transition once
    replay.update_priorities(np.array([1.0, 4.0, 9.0, 16.0]) - 1e-6)
    # p^alpha = 1, 2, 3, 4 of 10.
    rng = np.random.default_rng(2)
    drawn = replay.sample_stack(DRAWS // 50, 50, rng)["observation"][..., 0].astype(int)
    replay.update_priorities(np.zeros(drawn.shape) + np.nan)  # non-finite: nothing changes
    counts = np.bincount(drawn.ravel(), minlength=4)
    np.testing.assert_allclose(counts / drawn.size, [0.1, 0.2, 0.3, 0.4], atol=TOLERANCE)
    np.testing.assert_allclose(replay.priorities(np.arange(4)), [1, 2, 3, 4], rtol=1e-12)


def test_importance_weights_are_normalised_by_the_batch_maximum_and_anneal_with_steps():
    replay = _replay(alpha=1.0, beta=LinearSchedule(0.5, 1.0, 8))
    for step_id in range(4):
        add_step(replay, step_id, 1.0)  # 4 environment steps: beta = 0.5 + 0.5 * 4/8 = 0.75
    replay._sampled = np.arange(4)
    replay.update_priorities(np.array([1.0, 2.0, 3.0, 4.0]) - 1e-6)
    # P = 0.1, 0.2, 0.3, 0.4 and N = 4: w = (N P)^-0.75 = 0.4^-0.75, ..., 1.6^-0.75; the
    # largest is the rarest's, so w_i / w_max = (P_min / P_i)^0.75 = (1 / i)^0.75.
    weights = replay.importance_weights(np.array([[0, 1, 2, 3], [3, 3, 2, 1]]))
    np.testing.assert_allclose(weights[0], [1.0, 0.5**0.75, (1 / 3) ** 0.75, 0.25**0.75])
    # Each batch by its own maximum: the second's rarest is transition 1 (P = 0.2).
    np.testing.assert_allclose(weights[1], [0.5**0.75, 0.5**0.75, (2 / 3) ** 0.75, 1.0])
    for step_id in range(4, 8):
        add_step(replay, step_id, 1.0)  # 8 steps: beta = 1
    np.testing.assert_allclose(replay.importance_weights(np.array([0, 1])), [1.0, 0.5])


def test_the_state_restores_the_priorities_and_the_samples_that_follow_bitwise():
    replay = _replay(capacity=6, n_step=2)
    rng = np.random.default_rng(3)
    for step_id in range(9):  # wraps the ring; one window pending
        add_step(replay, step_id, float(step_id))
        if not len(replay):  # the first 2-step window closes at the second step
            continue
        replay.sample_stack(2, 3, rng)
        replay.update_priorities(rng.normal(size=(2, 3)))
    restored = _replay(capacity=6, n_step=2)
    restored.load_state(replay.state())
    for buffer in (replay, restored):
        add_step(buffer, 9, 1.0)
    first, second = (
        buffer.sample_stack(4, 3, np.random.default_rng(4)) for buffer in (replay, restored)
    )
    for name in first:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)
    np.testing.assert_array_equal(restored._tree._nodes, replay._tree._nodes)


def test_bad_use_and_bad_state_are_said():
    replay = _replay()
    with pytest.raises(ValueError, match="empty buffer"):
        replay.sample(2, np.random.default_rng(0))
    add_step(replay, 0, 1.0)
    with pytest.raises(ValueError, match="no sample is waiting"):
        replay.update_priorities(np.zeros(2))
    replay.sample_stack(2, 3, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"errors of shape \(3,\) for a sample of shape \(2, 3\)"):
        replay.update_priorities(np.zeros(3))
    with pytest.raises(ValueError, match=r"PrioritizedReplay\.alpha must be a number >= 0"):
        _replay(alpha=-1.0)
    with pytest.raises(ValueError, match="must stay in \\[0, 1\\]"):
        _replay(beta=LinearSchedule(0.4, 2.0, 10))
    state = replay.state()
    state["priority_leaves"] = np.zeros(1)
    with pytest.raises(ReplayCheckpointError, match="positive float64 priorities"):
        _replay().load_state(state)
    del state["priority_leaves"]
    with pytest.raises(ReplayCheckpointError, match="a uniform replay's checkpoint"):
        _replay().load_state(state)
