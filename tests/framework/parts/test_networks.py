"""Tests for framework/parts/networks.py: the builders' structure and their outputs by hand
(their acting copies: test_acting.py)."""

import keras
import numpy as np
import pytest

from framework.parts.networks import (
    actor_critic_cnn,
    actor_critic_mlp,
    actor_mlp,
    conv_q_network,
    critic_mlp,
    gaussian_actor_critic_mlp,
    gaussian_actor_mlp,
    mlp,
    nature_cnn,
)


def random_observations(batch: int, features: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(batch, features)).astype(np.float32)


def test_mlp_output_shape_and_hidden_layers():
    model = mlp((3,), 5, hidden_units=(8, 4), activation="tanh")
    assert model(random_observations(6, 3)).shape == (6, 5)
    hidden = [model.get_layer("hidden_0"), model.get_layer("hidden_1")]
    assert [tuple(layer.kernel.shape) for layer in hidden] == [(3, 8), (8, 4)]
    assert [layer.activation.__name__ for layer in hidden] == ["tanh", "tanh"]
    assert tuple(model.get_layer("output").kernel.shape) == (4, 5)


def test_mlp_flattens_multi_dimensional_input():
    model = mlp((2, 3), 4, hidden_units=(5,))
    assert tuple(model.get_layer("hidden_0").kernel.shape) == (6, 5)  # 2 * 3 inputs
    assert model(np.ones((7, 2, 3), np.float32)).shape == (7, 4)


@pytest.mark.parametrize("dueling", [False, True])
def test_uniform_initial_output_gives_equal_logits(dueling):
    model = mlp((3,), 4, hidden_units=(8,), dueling=dueling, uniform_initial_output=True)
    # Very different inputs: a zero output kernel and bias make every logit exactly 0.
    logits = model(np.array([[1.0, -2.0, 3.0], [100.0, 5.0, -7.0]], np.float32)).numpy()
    np.testing.assert_array_equal(logits, np.zeros((2, 4), np.float32))
    probs = keras.ops.softmax(logits).numpy()
    np.testing.assert_allclose(probs, np.full((2, 4), 0.25), rtol=1e-6)


def test_default_initialisation_is_not_uniform():
    model = mlp((3,), 4, hidden_units=(8,))
    logits = model(np.array([[1.0, -2.0, 3.0], [100.0, 5.0, -7.0]], np.float32)).numpy()
    assert not np.allclose(logits[0], logits[1])


def dueling_with_known_weights():
    # No hidden layer: V(x) = x @ [1, 0] + 0.5, A(x) = x @ [[1, 2, 3], [0, 0, 0]] + [0, 0, 3].
    model = mlp((2,), 3, hidden_units=(), dueling=True)
    model.get_layer("value").set_weights([np.array([[1.0], [0.0]]), np.array([0.5])])
    model.get_layer("advantage").set_weights(
        [np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]), np.array([0.0, 0.0, 3.0])]
    )
    return model


def test_dueling_head_is_value_plus_centred_advantage():
    model = dueling_with_known_weights()
    q = model(np.array([[2.0, 7.0]], np.float32)).numpy()
    # V = 2 + 0.5 = 2.5; A = [2, 4, 6] + [0, 0, 3] = [2, 4, 9], mean 5, centred [-3, -1, 4].
    # Q = [-0.5, 1.5, 6.5], and mean_a Q = V.
    np.testing.assert_allclose(q, [[-0.5, 1.5, 6.5]], rtol=1e-6)


@pytest.mark.parametrize("dueling", [False, True])
def test_nature_cnn_on_uint8_frames(dueling):
    model = nature_cnn((80, 80, 4), 6, dueling=dueling, hidden_units=16)
    assert model.inputs[0].dtype == "uint8"
    frames = np.random.default_rng(0).integers(0, 256, size=(2, 80, 80, 4), dtype=np.uint8)
    q = model(frames).numpy()
    assert q.shape == (2, 6)
    assert np.all(np.isfinite(q))
    # 80 -> (80 - 8) / 4 + 1 = 19 -> (19 - 4) / 2 + 1 = 8 -> 8 - 3 + 1 = 6: 6 * 6 * 64 features.
    dense = next(layer for layer in model.layers if isinstance(layer, keras.layers.Dense))
    assert tuple(dense.kernel.shape) == (6 * 6 * 64, 16)


@pytest.mark.parametrize("activation", ["gelu", "sigmoid", "Relu"])
def test_mlp_rejects_unsupported_activation(activation):
    with pytest.raises(ValueError, match=activation):
        mlp((3,), 2, activation=activation)


# ----- the deterministic actor and the critic Q(s, a) ----------------------------------------


def constant_actor(bias) -> keras.Model:
    """Zero output kernel: mu(s) = low + (tanh(bias) + 1) / 2 * (high - low) for every s."""
    model = actor_mlp((3,), low=[-1.0, 0.0], high=[3.0, 10.0], hidden_units=(4,))
    model.get_layer("output").set_weights([np.zeros((4, 2)), np.asarray(bias, np.float64)])
    return model


CONSTANT_ACTOR_CASES = [  # (output bias, action for every observation)
    ([0.0, 0.0], [1.0, 5.0]),  # tanh 0 = 0: the middle of [-1, 3] and [0, 10]
    ([50.0, -50.0], [3.0, 0.0]),  # tanh = +-1: the upper bound, the lower bound
    ([np.arctanh(0.5), np.arctanh(-0.5)], [2.0, 2.5]),  # -1 + 1.5 * 2, 0 + 0.5 * 5
]


@pytest.mark.parametrize(("bias", "expected"), CONSTANT_ACTOR_CASES)
def test_actor_scales_tanh_to_the_bounds(bias, expected):
    model = constant_actor(bias)
    np.testing.assert_allclose(
        model(random_observations(2, 3)).numpy(), [expected] * 2, rtol=1e-6, atol=1e-6
    )


def test_actor_output_init_range_starts_near_the_middle_of_the_bounds():
    model = actor_mlp((3,), low=[-2.0], high=[2.0], output_init_range=3e-3)
    kernel = model.get_layer("output").kernel.numpy()
    assert np.all(np.abs(kernel) <= 3e-3) and np.any(kernel != 0.0)


def test_critic_takes_the_action_at_the_second_layer():
    model = critic_mlp((3,), 2, hidden_units=(4, 5))
    # hidden_0 sees the 3 observation features; hidden_1 its 4 features and the 2 actions.
    assert tuple(model.get_layer("hidden_0").kernel.shape) == (3, 4)
    assert tuple(model.get_layer("hidden_1").kernel.shape) == (4 + 2, 5)
    assert tuple(model.get_layer("output").kernel.shape) == (5, 1)
    q = model([random_observations(7, 3), random_observations(7, 2, seed=1)])
    assert q.shape == (7,)


def test_critic_by_hand():
    # One unit per layer, unit kernels, zero biases: Q(s, a) = 2 * relu(relu(s1 + s2) - a).
    model = critic_mlp((2,), 1, hidden_units=(1, 1))
    model.get_layer("hidden_0").set_weights([np.ones((2, 1)), np.zeros(1)])
    model.get_layer("hidden_1").set_weights([np.array([[1.0], [-1.0]]), np.zeros(1)])
    model.get_layer("output").set_weights([np.array([[2.0]]), np.zeros(1)])
    observations = np.array([[1.0, 2.0], [-1.0, -2.0], [1.0, 1.0]], np.float32)
    actions = np.array([[1.0], [-1.0], [5.0]], np.float32)
    # relu(3) - 1 = 2 -> 4; relu(-3) + 1 = 1 -> 2; relu(2) - 5 < 0 -> 0.
    np.testing.assert_allclose(model([observations, actions]).numpy(), [4.0, 2.0, 0.0])


def test_actor_and_critic_reject_bad_arguments():
    with pytest.raises(ValueError, match="bounds"):
        actor_mlp((3,), low=[-np.inf], high=[1.0])
    with pytest.raises(ValueError, match="activation"):
        actor_mlp((3,), low=[-1.0], high=[1.0], activation="gelu")
    with pytest.raises(ValueError, match="hidden layer"):
        critic_mlp((3,), 1, hidden_units=())


def test_critic_can_take_the_action_at_its_input():
    model = critic_mlp((3,), 2, hidden_units=(4, 5), action_at_input=True)
    # hidden_0 sees the 3 observation features and the 2 actions; hidden_1 its 4 features.
    assert tuple(model.get_layer("hidden_0").kernel.shape) == (3 + 2, 4)
    assert tuple(model.get_layer("hidden_1").kernel.shape) == (4, 5)
    assert model([random_observations(7, 3), random_observations(7, 2, seed=1)]).shape == (7,)


def gaussian_actor_by_hand() -> keras.Model:
    """One hidden unit relu(s1 + s2); mean = 2 h - 1, log_std = -h + 0.5 (zero where not said)."""
    model = gaussian_actor_mlp((2,), 1, hidden_units=(1,))
    model.get_layer("hidden_0").set_weights([np.ones((2, 1)), np.zeros(1)])
    model.get_layer("mean").set_weights([np.array([[2.0]]), np.array([-1.0])])
    model.get_layer("log_std").set_weights([np.array([[-1.0]]), np.array([0.5])])
    return model


GAUSSIAN_ACTOR_OBSERVATIONS = np.array([[1.0, 2.0], [-1.0, -2.0]], np.float32)


def test_gaussian_actor_by_hand():
    # h = [3, 0]: mean = [5, -1], log_std = [-2.5, 0.5].
    mean, log_std = gaussian_actor_by_hand()(GAUSSIAN_ACTOR_OBSERVATIONS)
    np.testing.assert_allclose(mean.numpy(), [[5.0], [-1.0]])
    np.testing.assert_allclose(log_std.numpy(), [[-2.5], [0.5]])


def test_torch_init_draws_kernels_and_biases_as_torch_linear_does():
    # torch.nn.Linear: kernel and bias uniform in +-1/sqrt(fan_in): 1/sqrt(17) = 0.2425 at the
    # input, 1/sqrt(256) = 0.0625 after a 256-wide layer.
    model = gaussian_actor_critic_mlp(
        (17,), 6, hidden_units=(256, 256), orthogonal_init=False, torch_init=True
    )
    bounds = {"policy_0": 17, "value_0": 17, "policy_1": 256, "mean": 256, "value": 256}
    for name, fan_in in bounds.items():
        kernel, bias = model.get_layer(name).get_weights()
        for weights in (kernel, bias):
            assert np.abs(weights).max() <= 1.0 / np.sqrt(fan_in), name
            if weights.size >= 256:  # the largest of 256 draws comes near the bound
                assert np.abs(weights).max() > 0.95 / np.sqrt(fan_in), name
        assert np.all(bias != 0.0) and not np.array_equal(kernel[0, : bias.size], bias), name
    np.testing.assert_array_equal(model.get_layer("log_std").get_weights()[0], np.zeros(6))


def test_orthogonal_and_torch_init_together_are_refused():
    with pytest.raises(ValueError, match="both True: choose one"):
        actor_critic_mlp((3,), 2, orthogonal_init=True, torch_init=True)


# ----- conv nets on frames or planes ----------------------------------------------------------


def test_conv_q_network_is_nature_cnn_by_default_and_minatar_s_by_its_bindings():
    nature = conv_q_network((84, 84, 4), 6)
    # 84 -> (84 - 8) / 4 + 1 = 20 -> (20 - 4) / 2 + 1 = 9 -> 9 - 3 + 1 = 7: 7 * 7 * 64 features.
    assert tuple(nature.get_layer("hidden_0").kernel.shape) == (7 * 7 * 64, 512)
    minatar = conv_q_network(
        (10, 10, 4), 6, conv_layers=((16, 3, 1),), hidden_units=(128,), input_max=1.0
    )
    # MinAtar's DQN: 10 -> 8 with a valid 3x3 conv: 8 * 8 * 16 = 1024 features, 128 units.
    assert tuple(minatar.get_layer("conv_0").kernel.shape) == (3, 3, 4, 16)
    assert tuple(minatar.get_layer("hidden_0").kernel.shape) == (1024, 128)
    assert minatar(np.zeros((2, 10, 10, 4), bool)).shape == (2, 6)


@pytest.mark.parametrize("build", [nature_cnn, conv_q_network, actor_critic_cnn])
def test_a_bfloat16_torso_keeps_float32_weights_and_outputs_and_rounds_like_bfloat16(build):
    full = build((36, 36, 4), 3, hidden_units=64 if build is nature_cnn else (64,))
    half = build(
        (36, 36, 4), 3, hidden_units=64 if build is nature_cnn else (64,), compute_dtype="bfloat16"
    )
    half.set_weights(full.get_weights())
    assert all(layer.dtype_policy.name == "float32" for layer in full.layers)  # off by default
    assert all(v.dtype == "float32" for v in half.weights)  # the checkpoint's and optimizer's
    convs = [layer for layer in half.layers if isinstance(layer, keras.layers.Conv2D)]
    assert convs and all(layer.compute_dtype == "bfloat16" for layer in convs)
    frames = np.random.default_rng(0).integers(0, 256, (8, 36, 36, 4)).astype(np.uint8)
    exact, rounded = (np.concatenate(_flat(model(frames))) for model in (full, half))
    head = half.get_layer("logits" if build is actor_critic_cnn else "output")
    assert head.input.dtype == "float32"  # the torso hands float32 features to the heads
    # bfloat16 keeps 8 bits of mantissa (a relative step of 2^-8 = 0.4%) at each product's
    # inputs: the outputs move by about that, not by float32's 1e-7 nor by more than a percent.
    error = np.abs(rounded - exact).max() / np.abs(exact).max()
    assert 1e-5 < error < 0.03


def _flat(outputs) -> list[np.ndarray]:
    outputs = outputs if isinstance(outputs, tuple | list) else [outputs]
    return [np.asarray(output).ravel() for output in outputs]


def test_an_unknown_compute_dtype_is_one_paragraph_naming_what_is_allowed():
    with pytest.raises(ValueError, match=r"conv_q_network.compute_dtype must be one of "):
        conv_q_network((10, 10, 4), 3, compute_dtype="float16")


def _one_weight_conv(input_max: float) -> keras.Model:
    """A 1x1 conv of one filter summing the channels (weight 1, bias 0) and an output layer of
    one unit with weight 1 on each position: the output is the sum of the inputs / input_max."""
    model = conv_q_network((2, 2, 3), 1, ((1, 1, 1),), (), input_max)
    model.get_layer("conv_0").set_weights([np.ones((1, 1, 3, 1)), np.zeros(1)])
    model.get_layer("output").set_weights([np.ones((4, 1)), np.zeros(1)])
    return model


def test_input_max_scales_frames_by_255_and_leaves_boolean_planes_as_they_are():
    planes = np.zeros((1, 2, 2, 3), bool)
    planes[0, 0, 0, :] = True  # three planes on at one position
    planes[0, 1, 1, 2] = True
    # Four True values: 4 with input_max 1 (MinAtar), 4 / 255 had they been divided by 255.
    assert _one_weight_conv(1.0)(planes).numpy()[0, 0] == 4.0
    frames = np.full((1, 2, 2, 3), 255, np.uint8)
    frames[0, 0, 0, 0] = 51  # 11 pixels at 255 and one at 51: (11 * 255 + 51) / 255 = 11.2
    np.testing.assert_allclose(_one_weight_conv(255.0)(frames).numpy()[0, 0], 11.2, rtol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"conv_layers": ()}, "conv_layers"),
        ({"conv_layers": ((16, 3),)}, "conv_layers"),
        ({"conv_layers": ((16, 3, 0),)}, "conv_layers"),
        ({"input_max": 0.0}, "input_max"),
        ({"input_max": True}, "input_max"),
        ({"hidden_units": (0,)}, "hidden_units"),
    ],
)
def test_conv_networks_refuse_bad_layers_naming_the_binding(kwargs, named):
    for builder in (conv_q_network, actor_critic_cnn):
        with pytest.raises(ValueError, match=f"{builder.__name__}.{named}"):
            builder((10, 10, 4), 6, **kwargs)


def _gain(kernel: np.ndarray) -> np.ndarray:
    """The singular values of a kernel as a matrix of (inputs, outputs): all equal to the
    orthogonal initializer's gain where the matrix is (semi-)orthogonal."""
    return np.linalg.svd(kernel.reshape(-1, kernel.shape[-1]), compute_uv=False)


def test_actor_critic_cnn_shares_one_torso_initialised_as_sb3_s_cnn_policy():
    model = actor_critic_cnn((84, 84, 4), 6)
    frames = np.random.default_rng(0).integers(0, 256, size=(3, 84, 84, 4), dtype=np.uint8)
    logits, value = model(frames)
    assert logits.shape == (3, 6) and value.shape == (3,)
    names = [layer.name for layer in model.layers if layer.weights]
    assert sorted(names) == ["conv_0", "conv_1", "conv_2", "hidden_0", "logits", "value"]
    gains = {"conv_0": np.sqrt(2), "conv_1": np.sqrt(2), "conv_2": np.sqrt(2)}
    gains |= {"hidden_0": np.sqrt(2), "logits": 0.01, "value": 1.0}
    for name, gain in gains.items():
        kernel, bias = (w.numpy() for w in model.get_layer(name).weights)
        np.testing.assert_allclose(_gain(kernel), gain, rtol=1e-4, err_msg=name)
        assert not bias.any(), name
    # Gain 0.01 on 512 features of order 1: logits near 0, a near-uniform first policy.
    assert np.abs(logits.numpy()).max() < 0.1
