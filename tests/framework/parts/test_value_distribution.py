"""C51's parts against distributions worked out by hand: the projection onto the support, the
categorical targets, the cross-entropy loss and the categorical head (Keras and numpy).

Support throughout: 5 atoms on [-2, 2], z = [-2, -1, 0, 1, 2], spacing 1.
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from framework.parts.acting import NumpyForward
from framework.parts.losses import CategoricalCrossEntropyLoss
from framework.parts.networks import mlp, q_values
from framework.parts.targets import CategoricalDoubleQLearningTarget, CategoricalQLearningTarget
from framework.parts.value_distribution import CategoricalSupport

SUPPORT = CategoricalSupport(num_atoms=5, v_min=-2.0, v_max=2.0)
UNIFORM = [0.2] * 5
ONE_HOT_0 = [0.0, 0.0, 1.0, 0.0, 0.0]  # all mass on z = 0


def _project(reward, discount, probabilities):
    return SUPPORT.project(
        tf.constant([reward], tf.float32),
        tf.constant([discount], tf.float32),
        tf.constant([probabilities], tf.float32),
    ).numpy()[0]


@pytest.mark.parametrize(
    ("reward", "discount", "probabilities", "expected"),
    [
        # Inside: Tz = 0.5 + 0 lies halfway between z = 0 and z = 1.
        (0.5, 1.0, ONE_HOT_0, [0, 0, 0.5, 0.5, 0]),
        # On an atom: Tz = 1 + 1 * z shifts every atom one up; z = 2 + 1 = 3 clips onto 2.
        (1.0, 1.0, UNIFORM, [0, 0.2, 0.2, 0.2, 0.4]),
        # Beyond the top edge: Tz = 3 + z = [1, 2, 3, 4, 5] clips to [1, 2, 2, 2, 2].
        (3.0, 1.0, UNIFORM, [0, 0, 0, 0.2, 0.8]),
        # Beyond the bottom edge: Tz = -3 + z = [-5, ..., -1] clips to [-2, -2, -2, -2, -1].
        (-3.0, 1.0, UNIFORM, [0.8, 0.2, 0, 0, 0]),
        # Terminal (discount 0): all mass at the reward 0.25, 3/4 to z = 0 and 1/4 to z = 1.
        (0.25, 0.0, UNIFORM, [0, 0, 0.75, 0.25, 0]),
        # A 3-step transition, as the replay stores it: R = 1 + 0.5 + 0.25 = 1.75 (gamma = 0.5
        # here) and discount gamma^3 = 0.125: Tz = 1.75 + 0.125 z = [1.5, 1.625, 1.75, 1.875,
        # 2]. z = 1 gets 0.2 * (0.5 + 0.375 + 0.25 + 0.125) = 0.25, z = 2 the other 0.75.
        (1.75, 0.125, UNIFORM, [0, 0, 0, 0.25, 0.75]),
        # Discount 0.5, no reward: Tz = [-1, -0.5, 0, 0.5, 1]: z = -1 gets 0.2 + 0.1, z = 0
        # gets 0.1 + 0.2 + 0.1, z = 1 gets 0.1 + 0.2.
        (0.0, 0.5, UNIFORM, [0, 0.3, 0.4, 0.3, 0]),
    ],
)
def test_projection_onto_the_support(reward, discount, probabilities, expected):
    projected = _project(reward, discount, probabilities)
    np.testing.assert_allclose(projected, expected, atol=1e-6)
    assert projected.sum() == pytest.approx(1.0, abs=1e-6)


def test_expected_values_in_tensorflow_and_numpy():
    probabilities = np.array([[0.1, 0.2, 0.3, 0.2, 0.2]])
    logits = np.log(probabilities).astype(np.float32)
    # -2 * 0.1 - 1 * 0.2 + 0 + 1 * 0.2 + 2 * 0.2 = 0.2
    np.testing.assert_allclose(
        SUPPORT.expected_values(tf.constant(logits)).numpy(), [0.2], rtol=1e-5
    )
    np.testing.assert_allclose(SUPPORT.expected_values_numpy(logits), [0.2], rtol=1e-5)


def test_a_bad_support_is_refused():
    with pytest.raises(ValueError, match="num_atoms must be an integer >= 2"):
        CategoricalSupport(num_atoms=1)
    with pytest.raises(ValueError, match="v_min < v_max"):
        CategoricalSupport(v_min=1.0, v_max=1.0)


def _next_logits():
    """One transition, 2 actions: the target network's next distributions are a one-hot at
    z = 1 (action 0, E = 1) and at z = -1 (action 1, E = -1); the online network prefers
    action 1 (E = 2 against -2)."""
    big = 30.0  # a softmax of [0, ..., 30, ..., 0] is one-hot to float32 precision
    target = np.zeros((1, 2, 5), np.float32)
    target[0, 0, 3] = target[0, 1, 1] = big
    online = np.zeros((1, 2, 5), np.float32)
    online[0, 0, 0] = online[0, 1, 4] = big
    return tf.constant(online), tf.constant(target)


def test_the_categorical_target_takes_the_target_networks_greedy_action():
    online, target = _next_logits()
    # Action 0 (E = 1 under the target network): r + 0.5 * 1 = 0.5 -> half at z = 0 and z = 1.
    projected = CategoricalQLearningTarget(SUPPORT)(
        tf.constant([0.0]), tf.constant([0.5]), online, target
    )
    np.testing.assert_allclose(projected.numpy(), [[0, 0, 0.5, 0.5, 0]], atol=1e-6)


def test_the_double_categorical_target_takes_the_online_networks_action():
    online, target = _next_logits()
    # Online picks action 1, evaluated by the target network: one-hot at z = -1, r + 0.5 * -1.
    projected = CategoricalDoubleQLearningTarget(SUPPORT)(
        tf.constant([0.0]), tf.constant([0.5]), online, target
    )
    np.testing.assert_allclose(projected.numpy(), [[0, 0.5, 0.5, 0, 0]], atol=1e-6)


def test_cross_entropy_loss_weighs_samples_and_returns_each_ones_error():
    # Two atoms: logits [0, ln 3] give p = [1/4, 3/4]; target [1/2, 1/2]:
    # CE = -(1/2 ln 1/4 + 1/2 ln 3/4) = ln 4 - 1/2 ln 3. Second row: target [0, 1]: CE = ln 4/3.
    logits = tf.constant([[0.0, math.log(3.0)]] * 2)
    targets = tf.constant([[0.5, 0.5], [0.0, 1.0]])
    first, second = math.log(4.0) - 0.5 * math.log(3.0), math.log(4.0 / 3.0)
    loss, extras = CategoricalCrossEntropyLoss()(logits, targets)
    assert loss.numpy() == pytest.approx((first + second) / 2, rel=1e-6)
    np.testing.assert_allclose(extras["per_sample/error"].numpy(), [first, second], rtol=1e-6)
    loss, _ = CategoricalCrossEntropyLoss()(logits, targets, tf.constant([1.0, 0.5]))
    assert loss.numpy() == pytest.approx((first + 0.5 * second) / 2, rel=1e-6)


def _known_dueling_categorical():
    """No hidden layer, input x, 2 actions on 2 atoms at [-1, 1]. Value logits [0, x];
    advantage logits: action 0 [x, 0], action 1 [0, 0]."""
    model = mlp((1,), 2, hidden_units=(), dueling=True, support=CategoricalSupport(2, -1.0, 1.0))
    model.get_layer("value").set_weights([np.array([[0.0, 1.0]]), np.zeros(2)])
    model.get_layer("advantage").set_weights([np.array([[1.0, 0.0, 0.0, 0.0]]), np.zeros(4)])
    return model


def test_dueling_categorical_head_adds_the_value_to_the_centred_advantages_per_atom():
    model = _known_dueling_categorical()
    x = np.array([[2.0 * math.log(3.0)]], np.float32)
    # Advantages' mean over actions [x/2, 0]: centred, action 0 [x/2, 0], action 1 [-x/2, 0].
    # Plus the value [0, x]: action 0 [ln 3, 2 ln 3] -> p = [3, 9] / 12 = [1/4, 3/4], E = 1/2;
    # action 1 [-ln 3, 2 ln 3] -> p = [1/3, 9] / (28/3) = [1/28, 27/28], E = 26/28.
    logits = model(x).numpy()
    assert logits.shape == (1, 2, 2)
    np.testing.assert_allclose(
        logits[0], [[math.log(3.0), 2 * math.log(3.0)], [-math.log(3.0), 2 * math.log(3.0)]]
    )
    expected = [[0.5, 26.0 / 28.0]]
    np.testing.assert_allclose(q_values(model, model(x)).numpy(), expected, rtol=1e-5)
    np.testing.assert_allclose(NumpyForward(model)(x), expected, rtol=1e-5)


@pytest.mark.parametrize("dueling", [False, True])
def test_numpy_acting_copy_of_a_categorical_mlp_gives_its_expected_values(dueling):
    model = mlp((4,), 3, hidden_units=(8,), dueling=dueling, support=SUPPORT)
    observations = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    assert model(observations).shape == (6, 3, 5)
    np.testing.assert_allclose(
        NumpyForward(model)(observations),
        q_values(model, model(observations)).numpy(),
        rtol=1e-5,
        atol=1e-6,
    )
