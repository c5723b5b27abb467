"""A learner's cost per gradient step beside the floor of the same step written by hand.

The floor is the config's step with none of the learner's guarantees: no non-finite guard, no
metrics, counters or published weights; `gradient_steps` of it fused in one XLA call. For DQN:
online and target networks, Q-learning target, Huber loss, clipping by global norm, Adam. For
SAC: the critics on the soft target, the actor against them, the temperature, the targets'
EMA (three Adams; the noise from a generator in the call, as the agent's). Both run on the same
random batches in this process, one after the other, so the difference is what the learner's
machinery costs (docs/speed.md). `--in_loop_steps` also trains the config that long and
reports the learner's time per gradient step inside the training loop (replay sampling and the
call's overhead included, its first call's tracing and compilation not).

  python -m experiments.learner_floor  # gin_configs/dqn/cartpole_rlzoo.gin
  python -m experiments.learner_floor --gin_file=gin_configs/sac/pendulum.gin --in_loop_steps=3000
  python -m experiments.learner_floor --profile_calls=10  # and the learner's step, op by op
"""

import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from absl import app, flags

from experiments import quiet

if TYPE_CHECKING:
    from experiments import op_timing

FLAGS = flags.FLAGS
flags.DEFINE_string("gin_file", "gin_configs/dqn/cartpole_rlzoo.gin", "A DQN or SAC config.")
flags.DEFINE_integer("calls", 40, "Timed calls of each, after one untimed first call.")
flags.DEFINE_integer(
    "profile_calls",
    0,
    "Also profile this many learner calls and print where a step's time goes, op by op "
    "(experiments/op_profile.py; 0: not).",
)
flags.DEFINE_integer(
    "in_loop_steps", 0, "Also train the config this many environment steps (0: not)."
)


def build(gin_file: str, bindings: Sequence[str] = ()) -> tuple[Callable, Callable, Any, Any]:
    """`(learner_call, floor_call, agent, floor_networks)`: each call runs the schedule's
    `gradient_steps` steps on the same batches, from the same initial weights (the floor's
    networks are copies of the agent's: DQN's online network; SAC's actor, critics, target
    critics and log alpha)."""
    tf = quiet.import_tensorflow()
    import gin
    import gymnasium as gym
    import numpy as np

    import agents  # noqa: F401  (registers every configurable the config may name)
    from agents.dqn import DQNAgent
    from agents.sac import SACAgent
    from framework import (
        config,
        runner,  # noqa: F401  (registers Runner, which the config binds)
    )

    config.parse([gin_file], list(bindings))
    env = gym.make(gin.query_parameter("make_env.env_id"))
    agent_class = gin.query_parameter("Runner.agent").configurable.wrapped
    floors = {DQNAgent: _dqn_floor, SACAgent: _sac_floor}
    if agent_class not in floors:
        raise ValueError(f"learner_floor has a hand-written step for {list(floors)} only.")
    agent = agent_class(env.observation_space, env.action_space, seed=0)
    steps, size = agent.schedule.gradient_steps, agent.schedule.batch_size
    rng = np.random.default_rng(0)
    obs_shape = env.observation_space.shape
    if agent_class is DQNAgent:
        action = rng.integers(0, agent.num_actions, (steps, size))
    else:
        action = rng.uniform(agent.low, agent.high, (steps, size, agent.action_size))
    batches = {
        "observation": rng.normal(size=(steps, size, *obs_shape)).astype(np.float32),
        "action": action.astype(np.int64 if agent_class is DQNAgent else np.float32),
        "reward": rng.normal(size=(steps, size)).astype(np.float32),
        "discount": np.full((steps, size), 0.99, np.float32),
        "next_observation": rng.normal(size=(steps, size, *obs_shape)).astype(np.float32),
    }
    floor, floor_networks = floors[agent_class](tf, agent, steps)
    floor_arguments = [batches[name] for name in ("observation", "action", "reward")]
    floor_arguments += [batches["discount"], batches["next_observation"]]
    return (
        lambda: agent.learner.run(batches)[1].numpy(),
        lambda: floor(*floor_arguments).numpy(),
        agent,
        floor_networks,
    )


def _copy(model):
    import keras

    copy = keras.models.clone_model(model)
    copy.set_weights(model.get_weights())
    return copy


def _fresh(optimizer):
    """A new optimizer of the group's class and settings (its epsilon placement included), at
    the group's current learning rate."""
    config = {**optimizer.get_config(), "learning_rate": float(optimizer.learning_rate.numpy())}
    return type(optimizer).from_config(config)


def _dqn_floor(tf, agent, steps: int):
    import keras

    from framework.parts.gradient_processors import ClipByGlobalNorm, global_norm

    group = agent.learner.groups[0]
    processor = group.gradient_processor
    max_norm = processor.max_norm if isinstance(processor, ClipByGlobalNorm) else float("inf")
    online, target = _copy(agent.online), _copy(agent.target)
    optimizer = _fresh(group.optimizer)
    optimizer.build(online.trainable_variables)

    @tf.function(jit_compile=True)
    def floor(observation, action, reward, discount, next_observation):
        def step(index, total):
            with tf.GradientTape() as tape:
                q = tf.gather(online(observation[index]), action[index], batch_dims=1)
                best_next = tf.reduce_max(target(next_observation[index]), axis=-1)
                y = tf.stop_gradient(reward[index] + discount[index] * best_next)
                loss = tf.reduce_mean(keras.losses.huber(y[:, None], q[:, None]))
            grads = tape.gradient(loss, online.trainable_variables)
            norm = global_norm(grads)  # the learner's, so that both sum the same way
            grads, _ = tf.clip_by_global_norm(grads, max_norm, use_norm=norm)
            optimizer.apply(grads, online.trainable_variables)
            return index + 1, total + loss

        return tf.while_loop(lambda index, _: index < steps, step, (0, 0.0))[1]

    return floor, online


def _sac_floor(tf, agent, steps: int):
    """SAC's step as SB3 writes it, the sample on s shared by the actor and the temperature."""

    actor = _copy(agent.actor)
    critics = [_copy(critic) for critic in agent.critics]
    targets = [_copy(critic) for critic in agent.target_critics]
    log_alpha = tf.Variable(agent.log_alpha.numpy())
    generator = tf.random.Generator.from_state(agent.tf_rng.state.numpy(), agent.tf_rng.algorithm)
    critic_optimizer, actor_optimizer, temperature_optimizer = (
        _fresh(group.optimizer) for group in agent.learner.groups
    )
    critic_variables = [v for c in critics for v in c.trainable_variables]
    critic_optimizer.build(critic_variables)
    actor_optimizer.build(actor.trainable_variables)
    temperature_optimizer.build([log_alpha])
    online = [w for c in critics for w in c.weights]
    target = [w for c in targets for w in c.weights]
    tau = agent.learner.groups[1].target_updater.tau
    low, half_range, sample = agent.low, agent.half_range, agent.distribution.sample

    def policy(observation):
        mean, log_std = actor(observation)
        return sample(mean, log_std, generator.normal(tf.shape(mean)))

    @tf.function(jit_compile=True)
    def floor(observation, action, reward, discount, next_observation):
        def step(index, total):
            s, s_next = observation[index], next_observation[index]
            unit_action = (action[index] - low) / half_range - 1.0
            alpha = tf.exp(log_alpha)
            with tf.GradientTape() as tape:
                next_action, next_log_prob = policy(s_next)
                next_q = tf.reduce_min([t([s_next, next_action]) for t in targets], axis=0)
                y = reward[index] + discount[index] * (next_q - alpha * next_log_prob)
                y = tf.stop_gradient(y)
                errors = [tf.reduce_mean(tf.square(c([s, unit_action]) - y)) for c in critics]
                critic_loss = 0.5 * tf.add_n(errors)
            grads = tape.gradient(critic_loss, critic_variables)
            critic_optimizer.apply(grads, critic_variables)
            with tf.GradientTape() as tape:
                policy_action, log_prob = policy(s)
                q = tf.reduce_min([c([s, policy_action]) for c in critics], axis=0)
                actor_loss = tf.reduce_mean(alpha * log_prob - q)
            grads = tape.gradient(actor_loss, actor.trainable_variables)
            actor_optimizer.apply(grads, actor.trainable_variables)
            # d/dlog_alpha of -log_alpha * (mean log pi + target entropy)
            gap = tf.reduce_mean(tf.stop_gradient(log_prob)) + agent.target_entropy
            temperature_optimizer.apply([-gap], [log_alpha])
            for source, copy in zip(online, target, strict=True):
                copy.assign((1.0 - tau) * copy + tau * source)
            return index + 1, total + critic_loss

        return tf.while_loop(lambda index, _: index < steps, step, (0, 0.0))[1]

    return floor, {"actor": actor, "critics": critics, "targets": targets, "log_alpha": log_alpha}


def measure(gin_file: str, calls: int, in_loop_steps: int = 0, rounds: int = 5) -> dict[str, float]:
    """Microseconds per gradient step: the learner's, the floor's, their first calls, and with
    `in_loop_steps` the learner's inside a training run of that many environment steps. The
    timed calls alternate in `rounds` (learner, floor, learner, ...), so that a machine whose
    load changes meanwhile weighs on both alike."""
    learner_call, floor_call, agent, _ = build(gin_file)
    steps = agent.schedule.gradient_steps
    runs = {"learner": learner_call, "floor": floor_call}
    figures, seconds = {}, dict.fromkeys(runs, 0.0)
    for name, run in runs.items():
        start = time.perf_counter()
        run()
        figures[f"{name}_first_call_s"] = time.perf_counter() - start
    per_round = max(calls // rounds, 1)
    for _ in range(rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            for _ in range(per_round):
                run()
            seconds[name] += time.perf_counter() - start
    for name in runs:
        figures[f"{name}_us_per_step"] = seconds[name] / (rounds * per_round * steps) * 1e6
    hardware = hardware_floor_of(agent, max(2, min(calls, 20)))
    figures["hardware_floor_us_per_step"] = 1e6 * hardware.seconds
    figures["step_mflop"] = hardware.flops / 1e6
    if in_loop_steps:
        figures.update(in_loop(gin_file, in_loop_steps))
    return figures


def hardware_floor_of(agent, calls: int) -> "op_timing.Floor":
    """The learner's step at this machine's rates for its own products (`op_timing.py`)."""
    from experiments import op_census, op_timing

    census, weights, steps_per_call = op_census.of_learner(agent.learner)
    return op_timing.floor_of(census, weights, steps_per_call, calls)


def in_loop(gin_file: str, num_steps: int) -> dict[str, float]:
    """The learner's wall-clock microseconds per gradient step in a training run (replay
    sampling and the acting copy's refresh included; its first call, which traces and compiles,
    left out), and the run's in-loop environment steps per second."""
    from experiments.learner_report import learner_in_loop

    measured = learner_in_loop(gin_file, [], num_steps)
    return {
        "in_loop_learner_us_per_step": 1e6 * measured["seconds_per_step"],
        "in_loop_steps_per_second": measured["steps_per_second"],
    }


def main(argv: list[str]) -> None:
    del argv
    try:
        figures = measure(FLAGS.gin_file, FLAGS.calls, FLAGS.in_loop_steps)
    except ValueError as error:  # a run too short to make a gradient step after its first
        sys.exit(f"learner_floor: {error}")
    floor = figures["floor_us_per_step"]
    print(
        f"{FLAGS.gin_file}: learner {figures['learner_us_per_step']:.0f} us per gradient step "
        f"(first call {figures['learner_first_call_s']:.2f} s), hand-written fused floor "
        f"{floor:.0f} us (first call {figures['floor_first_call_s']:.2f} s); learner / floor = "
        f"{figures['learner_us_per_step'] / floor:.2f}"
    )
    hardware = figures["hardware_floor_us_per_step"]
    print(
        f"hardware floor ({figures['step_mflop']:.1f} MFLOP of products a step, each at this "
        f"machine's rate for its shape: experiments.hardware_floor) {hardware:.0f} us; hardware "
        f"floor / learner = {hardware / figures['learner_us_per_step']:.0%}"
    )
    if "in_loop_learner_us_per_step" in figures:
        learner = figures["in_loop_learner_us_per_step"]
        print(
            f"in a training run of {FLAGS.in_loop_steps} steps: learner {learner:.0f} us per "
            f"gradient step, in-loop learner / floor = {learner / floor:.2f}; "
            f"{figures['in_loop_steps_per_second']:.0f} environment steps/s in the loop"
        )
    if FLAGS.profile_calls:
        print(profile_table(FLAGS.gin_file, FLAGS.profile_calls))


def profile_table(gin_file: str, calls: int, top: int = 25) -> str:
    """The learner's ops over `calls` calls (after two, which trace and compile), the costliest
    `top` first."""
    from experiments import op_profile

    learner_call, _, agent, _ = build(gin_file)
    for _ in range(2):
        learner_call()
    profiled = op_profile.profile(learner_call, calls, agent.schedule.gradient_steps)
    return f"where the learner's step goes, {calls} calls:\n{profiled.table(top)}"


if __name__ == "__main__":
    app.run(main)
