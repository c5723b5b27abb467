"""One asynchronous worker: a local copy of the agent stepping its own vector environment,
computing gradients until its gradient processor releases a push."""

from collections.abc import Callable, Sequence

import gymnasium as gym
import keras
import tensorflow as tf

from framework.agent import Health
from framework.drivers.backends import WorkResult
from framework.drivers.driver import AgentFactory
from framework.drivers.gradient_halves import WorkerGradients
from framework.learner import copy_variables
from framework.loop import EnvironmentLoop, make_vector_env
from framework.seeding import derived_seeds


class Worker:
    """An agent (`A2CAgent`, `NStepQAgent`) as the local copy, with its own environments."""

    def __init__(
        self,
        index: int,
        seed: int,
        env_factory: Callable[[], gym.Env],
        num_envs: int,
        agent: AgentFactory,
    ):
        self.index = index
        agent_seed, env_seed, self._reset_seed = derived_seeds(seed, 3)
        envs = make_vector_env(env_factory, num_envs)
        # The local learner only computes gradients; the global optimizer applies them.
        self.agent = agent(
            envs.single_observation_space,
            envs.single_action_space,
            agent_seed,
            optimizer=keras.optimizers.SGD(1.0),  # never applied
        )
        self.gradients = WorkerGradients(self.agent.learner)
        self.loop = EnvironmentLoop(envs, self.agent)
        self.loop.reset(env_seed)
        local = self.agent.shared_variables
        self._copy_values = tf.function(lambda values: copy_variables(values, local))
        self._copy_variables = None  # compiled on the first pull from variables in this process

    def work(self) -> WorkResult:
        """Rollouts and their gradients until the gradient processor releases a push, or until
        a step is non-finite (nothing is pushed then: the driver's policy decides at once)."""
        steps, returns, lengths = 0, [], []
        sums, calls, health = {}, 0, Health()
        while True:
            while not self.agent.rollout.full:
                ended = self.loop.step()
                steps += self.loop.num_envs
                if ended is not None:
                    returns += ended.returns.tolist()
                    lengths += ended.lengths.tolist()
            batch = self.agent.learner_batch()
            gradients, push_now, metrics, step_health = self.gradients(batch)
            step_health = Health.from_tensor(step_health)
            health += step_health
            for name, value in metrics.items():
                sums[name] = sums.get(name, 0.0) + float(value)
            calls += 1
            pushed = bool(push_now)
            if pushed or step_health.nonfinite_steps or step_health.nonfinite_variables:
                break
        return WorkResult(
            gradients=[[g.numpy() for g in group] for group in gradients],
            env_steps=steps,
            metrics={name: total / calls for name, total in sums.items()},
            health=health,
            episode_returns=returns,
            episode_lengths=lengths,
            pushed=pushed,
        )

    def pull(self, source: Sequence[tf.Variable] | Sequence) -> None:
        """Copies the global parameters into the local copy: the global variables themselves
        (workers in the driver's process) or their values (sent to a remote worker)."""
        source = list(source)
        if isinstance(source[0], tf.Variable):
            if self._copy_variables is None:  # captured, not passed: many times cheaper per call
                local = self.agent.shared_variables
                self._copy_variables = tf.function(lambda: copy_variables(source, local))
            self._copy_variables()
        else:
            self._copy_values(source)
        self.agent.weights_changed()

    def describe(self) -> dict:
        """What this worker was built with (remote workers parse the config again, so this
        shows what they actually read)."""
        processor = self.agent.learner.groups[0].gradient_processor
        return {
            "worker": self.index,
            "num_envs": self.loop.num_envs,
            **self.agent.describe(),
            "gradient_processor": _describe_processor(processor),
        }

    def inexact_resume(self) -> str | None:
        problem = self.loop.inexact_resume()
        return problem and f"Worker {self.index}: {problem}"

    def state(self) -> dict:
        return {"agent": self.agent.state(), "loop": self.loop.state()}

    def load_state(self, state: dict, step: int) -> bool:
        """Takes back `state()` saved at `step`; whether the continuation is exact."""
        self.agent.load_state(state["agent"])
        return self.loop.load_state(state["loop"], reset_seed=self._reset_seed + step)

    def close(self) -> None:
        self.loop.close()


def _describe_processor(processor) -> str:
    inner = getattr(processor, "processors", None)
    if inner is not None:
        return f"Chain({', '.join(_describe_processor(p) for p in inner)})"
    fields = {
        k: v
        for k, v in vars(processor).items()
        if not k.startswith("_") and isinstance(v, int | float) and not isinstance(v, bool)
    }
    return f"{type(processor).__name__}({', '.join(f'{k}={v}' for k, v in fields.items())})"
