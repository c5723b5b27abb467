"""The hardware-floor report trains a config, finds its learner's products and sets the
learner's in-loop time beside their floor."""

import re

from experiments import learner_report


def test_the_report_puts_the_learner_beside_the_floor_of_its_own_products():
    bindings = [
        "ReplaySchedule.learning_starts = 100",
        "ReplaySchedule.train_freq = 50",
        "ReplaySchedule.gradient_steps = 4",
    ]
    text = learner_report.report("gin_configs/dqn/cartpole_rlzoo.gin", bindings, 400, calls=2)
    # The 256x256 MLP at batch 64: x W for the online and the target network, and its gradients.
    assert "MatMul [64, 256] x [256, 256]" in text
    found = re.search(r"step: ([\d.]+) MFLOP; floor ([\d.]+) ms .* = (\d+)% of the floor", text)
    assert found, text
    # Multiply-adds a sample: the online and the target network forward (2 x 67,072 for the
    # 4-256-256-2 layers), every kernel's gradient (67,072) and the inputs' gradients of the
    # upper two layers (65,536 + 512); times 2 FLOPs, times 64 samples.
    assert found[1] == f"{2 * 64 * (3 * 67_072 + 65_536 + 512) / 1e6:.1f}"
    assert float(found[2]) > 0 and int(found[3]) > 0
    assert "intra-op" in text and "peak memory" in text


def test_a_call_over_a_rollout_counts_the_gradient_steps_it_ran_not_the_rollouts():
    # PPO's call takes one rollout of 2 x 64 = 128 samples and runs 3 epochs of 2 minibatches
    # of 64 inside: 6 gradient steps, the count the run's health gives, not 1 rollout. (The
    # seconds and FLOPs per gradient step divide by it: counted as 1, a step's value pass over
    # the rollout weighed 6 times what it does, and a Pong step read 254% of the floor.)
    bindings = [
        "Runner.num_envs = 2",
        "PPOAgent.n_steps = 64",
        "ShuffledMinibatches.n_epochs = 3",
        "ShuffledMinibatches.batch_size = 64",
    ]
    measured = learner_report.learner_in_loop("gin_configs/ppo/cartpole.gin", bindings, 384)
    assert measured["learner"].first_call_steps == 6
    assert measured["seconds_per_step"] > 0
