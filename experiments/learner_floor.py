"""A DQN learner's cost per gradient step beside the floor of the same step written by hand.

The floor is the config's step (online and target networks, Q-learning target, Huber loss,
clipping by global norm, Adam) with none of the learner's guarantees: no non-finite guard, no
metrics, counters, target updates or published weights; `gradient_steps` of it fused in one
XLA call. Both run on the same random batches in this process, one after the other, so the
difference is what the learner's machinery costs (see README, Figures).

  python -m experiments.learner_floor  # gin_configs/dqn/cartpole_rlzoo.gin
"""

import time
from collections.abc import Callable, Sequence
from typing import Any

from absl import app, flags

from experiments import quiet

FLAGS = flags.FLAGS
flags.DEFINE_string("gin_file", "gin_configs/dqn/cartpole_rlzoo.gin", "A DQN config.")
flags.DEFINE_integer("calls", 40, "Timed calls of each, after one untimed first call.")


def build(gin_file: str, bindings: Sequence[str] = ()) -> tuple[Callable, Callable, Any, Any]:
    """`(learner_call, floor_call, agent, floor_online)`: each call runs `gradient_steps` steps
    on the same batches, from the same initial weights (the floor's online network is a copy
    of the agent's)."""
    tf = quiet.import_tensorflow()
    import gymnasium as gym
    import keras
    import numpy as np

    import agents  # noqa: F401  (registers every configurable the config may name)
    from agents.dqn import DQNAgent
    from framework import (
        config,
        runner,  # noqa: F401  (registers Runner, which the config binds)
    )
    from framework.parts.gradient_processors import ClipByGlobalNorm

    config.parse([gin_file], list(bindings))
    env = gym.make("CartPole-v1")
    agent = DQNAgent(env.observation_space, env.action_space, seed=0)
    steps, size = agent.gradient_steps, agent.batch_size
    rng = np.random.default_rng(0)
    obs_shape = env.observation_space.shape
    batches = {
        "observation": rng.normal(size=(steps, size, *obs_shape)).astype(np.float32),
        "action": rng.integers(0, agent.num_actions, (steps, size)),
        "reward": rng.normal(size=(steps, size)).astype(np.float32),
        "discount": np.full((steps, size), 0.99, np.float32),
        "next_observation": rng.normal(size=(steps, size, *obs_shape)).astype(np.float32),
    }
    group = agent.learner.groups[0]
    processor = group.gradient_processor
    max_norm = processor.max_norm if isinstance(processor, ClipByGlobalNorm) else float("inf")
    online = keras.models.clone_model(agent.online)
    online.set_weights(agent.online.get_weights())
    target = keras.models.clone_model(agent.target)
    target.set_weights(agent.target.get_weights())
    optimizer = keras.optimizers.Adam(float(group.optimizer.learning_rate.numpy()))
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
            grads, _ = tf.clip_by_global_norm(grads, max_norm)
            optimizer.apply(grads, online.trainable_variables)
            return index + 1, total + loss

        return tf.while_loop(lambda index, _: index < steps, step, (0, 0.0))[1]

    floor_arguments = [batches[name] for name in ("observation", "action", "reward")]
    floor_arguments += [batches["discount"], batches["next_observation"]]
    return (
        lambda: agent.learner.run(batches)[1].numpy(),
        lambda: floor(*floor_arguments).numpy(),
        agent,
        online,
    )


def measure(gin_file: str, calls: int) -> dict[str, float]:
    """Microseconds per gradient step: the learner's, the floor's, and their first calls."""
    learner_call, floor_call, agent, _ = build(gin_file)
    steps = agent.gradient_steps
    figures = {}
    for name, run in {"learner": learner_call, "floor": floor_call}.items():
        start = time.perf_counter()
        run()
        figures[f"{name}_first_call_s"] = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(calls):
            run()
        figures[f"{name}_us_per_step"] = (time.perf_counter() - start) / (calls * steps) * 1e6
    return figures


def main(argv: list[str]) -> None:
    del argv
    figures = measure(FLAGS.gin_file, FLAGS.calls)
    print(
        f"{FLAGS.gin_file}: learner {figures['learner_us_per_step']:.0f} us per gradient step "
        f"(first call {figures['learner_first_call_s']:.2f} s), hand-written fused floor "
        f"{figures['floor_us_per_step']:.0f} us (first call {figures['floor_first_call_s']:.2f} "
        f"s); learner / floor = "
        f"{figures['learner_us_per_step'] / figures['floor_us_per_step']:.2f}"
    )


if __name__ == "__main__":
    app.run(main)
