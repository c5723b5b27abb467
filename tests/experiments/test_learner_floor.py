"""The hand-written floor of `experiments/learner_floor.py` is the learner's step, minus its
machinery: from the same weights, on the same batches, both end at the same weights."""

import subprocess
import sys

import numpy as np
import pytest

from experiments import learner_floor


def test_the_floor_and_the_learner_take_the_same_steps():
    learner_call, floor_call, agent, floor_online = learner_floor.build(
        "gin_configs/dqn/cartpole_rlzoo.gin",
        ["ReplaySchedule.gradient_steps = 3", "networks.mlp.hidden_units = (16,)"],
    )
    before = agent.online.get_weights()
    learner_call()
    floor_call()
    after = agent.online.get_weights()
    for start, learned, floored in zip(before, after, floor_online.get_weights(), strict=True):
        assert not np.allclose(learned, start)  # the steps moved every weight...
        np.testing.assert_allclose(floored, learned, rtol=1e-4, atol=1e-6)  # ...alike


def test_the_sac_floor_and_the_learner_take_the_same_steps():
    # Three steps of the three groups, the policy's noise from copies of one generator state.
    learner_call, floor_call, agent, floor_networks = learner_floor.build(
        "gin_configs/sac/pendulum.gin",
        [
            "ReplaySchedule.gradient_steps = 3",
            "networks.gaussian_actor_mlp.hidden_units = (16,)",
            "networks.critic_mlp.hidden_units = (16, 16)",
            "ReplaySchedule.batch_size = 32",
        ],
    )
    models = [agent.actor, *agent.critics, *agent.target_critics]
    before = [w for model in models for w in model.get_weights()]
    learner_call()
    floor_call()
    floor_models = [floor_networks["actor"], *floor_networks["critics"], *floor_networks["targets"]]
    after = [w for model in models for w in model.get_weights()]
    floored = [w for model in floor_models for w in model.get_weights()]
    for start, learned, floor in zip(before, after, floored, strict=True):
        assert not np.allclose(learned, start)
        np.testing.assert_allclose(floor, learned, rtol=1e-4, atol=1e-6)
    assert agent.log_alpha.numpy() != 0.0  # moved from log 1...
    np.testing.assert_allclose(floor_networks["log_alpha"].numpy(), agent.log_alpha.numpy())


def test_the_command_runs_in_a_process_of_its_own():
    # In a fresh process: nothing else has registered the configurables its config binds.
    done = subprocess.run(
        [sys.executable, "-m", "experiments.learner_floor", "--calls=1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "learner / floor = " in done.stdout


def test_op_kinds_are_read_from_xla_and_tensorflow_op_names():
    from experiments.op_profile import kind_of

    assert kind_of("MatMul.61") == kind_of("maximum_dot_fusion.4") == "product"
    assert kind_of("Conv2DBackpropFilter") == kind_of("convolution.3") == "product"
    assert kind_of("convert_to_tensor") == "other"  # not a convolution
    assert kind_of("wrapped_reduce-window.4") == kind_of("L2Loss") == "reduction"
    assert kind_of("copy.72") == "copy" and kind_of("add_select_fusion.14") == "select"
    assert kind_of("divide_subtract_fusion.3") == "other"


def test_the_profile_counts_a_steps_products_once_a_step():
    from experiments import op_profile

    learner_call, _, _, _ = learner_floor.build(
        "gin_configs/dqn/cartpole_rlzoo.gin", ["ReplaySchedule.gradient_steps = 4"]
    )
    learner_call()  # traces and compiles
    profiled = op_profile.profile(learner_call, calls=3, steps_per_call=4)
    assert profiled.steps == 12
    products = {
        name: runs
        for name, runs in profiled.runs_by_op.items()
        if op_profile.kind_of(name) == "product"
    }
    # Each product of the step runs once a step (on the compute threads; XLA runs a few
    # thunks on the calling thread, which the profile leaves out): counted per call, or
    # twice, they would read 1/4 or 2 a step.
    assert len(products) >= 6  # the online and the target network's three layers, at least
    assert all(0.5 <= runs / profiled.steps <= 1.0 for runs in products.values()), products
    table = profiled.table(top=5)
    assert len(table.splitlines()) == 1 + 5 + 1 and "12 gradient steps" in table


def test_a_profile_without_any_op_says_so():
    from experiments import op_profile

    with pytest.raises(ValueError, match="no op on TensorFlow's compute threads"):
        op_profile.profile(lambda: None, calls=1, steps_per_call=1)
