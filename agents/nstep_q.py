"""n-step Q-learning over on-policy rollouts (Mnih et al., 2016, Algorithm S2): the agent of
asynchronous n-step Q-learning (`Runner.agent = @NStepQAgent` on `Runner.driver =
@AsynchronousDriver`), and a synchronous one over a vector environment.

Acting: epsilon-greedy on the online network, from numpy for small nets. Each agent (each A3C
worker) draws its own final epsilon from `final_epsilons` with `final_epsilon_probs` (the
paper's 0.1, 0.01, 0.5 with 0.4, 0.3, 0.3) and anneals to it linearly from 1 over
`epsilon_duration` of its own transitions (an asynchronous run resumes with fresh workers,
whose epsilon anneals again).
Learning: every `n_steps` vector steps the rollout `[T, N]` goes to the learner in one call:

    G_t = r_t + gamma r_{t+1} + ... + gamma^k max_a Q_target(s'_{t+k-1}, a),

cut at every termination and bootstrapped from the target network where an episode was
truncated or the rollout ends (`NStepReturns`), and `loss(Q(s_t, a_t), G_t)` is minimised. The
target network follows `target_updater`: under A3C that is the global learner's, counting
applied pushes.
"""

from collections.abc import Callable, Sequence

import gin
import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from agents.on_policy import RolloutAgent
from framework.agent import Metrics, State, VectorStep
from framework.learner import Batch, Learner, UpdateGroup
from framework.parts import acting, networks
from framework.parts.exploration import (
    LinearSchedule,
    check_probability_schedule,
    epsilon_greedy,
    q_value_diagnostics,
)
from framework.parts.gradient_processors import GradientProcessor
from framework.parts.losses import TDHuberLoss
from framework.parts.network_fit import Output, check_network
from framework.parts.returns import NStepReturns, Rollout, merge_time_and_envs
from framework.parts.target_updaters import HardUpdate, TargetUpdater
from framework.validation import (
    require_box_observations,
    require_discrete,
    require_positive,
    require_unit_interval,
)


@gin.configurable
class NStepQAgent(RolloutAgent):
    """n-step Q-learning from on-policy rollouts (Mnih et al., 2016): asynchronous n-step Q's
    agent under `AsynchronousDriver`, or a synchronous one over a vector environment.

    Parts left None: `TDHuberLoss`, RMSprop(7e-4, rho=0.99, epsilon=1e-5) and `HardUpdate()`.
    Epsilon anneals from 1 to a final epsilon drawn from `final_epsilons` (with
    `final_epsilon_probs`) over `epsilon_duration` of the agent's own transitions.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        seed: int,
        network: Callable[..., keras.Model] = networks.mlp,
        loss: Callable | None = None,
        optimizer: keras.optimizers.Optimizer | None = None,
        gradient_processor: GradientProcessor | None = None,
        target_updater: TargetUpdater | None = None,
        gamma: float = 0.99,
        n_steps: int = 5,
        epsilon_duration: int = 10_000,
        final_epsilons: Sequence[float] = (0.1, 0.01, 0.5),
        final_epsilon_probs: Sequence[float] = (0.4, 0.3, 0.3),
    ):
        super().__init__(observation_space, action_space, seed)
        require_positive(self, n_steps=n_steps, epsilon_duration=epsilon_duration)
        require_unit_interval(self, gamma=gamma)
        if len(final_epsilons) != len(final_epsilon_probs) or not np.isclose(
            sum(final_epsilon_probs), 1.0
        ):
            raise ValueError(
                f"NStepQAgent.final_epsilon_probs {tuple(final_epsilon_probs)} must give one "
                f"probability per final epsilon {tuple(final_epsilons)}, summing to 1."
            )
        self.num_actions = require_discrete(self, action_space)
        require_box_observations(self, observation_space)
        self.gamma = gamma
        self.loss = loss or TDHuberLoss()
        shape = observation_space.shape
        self.online = network(shape, self.num_actions)
        self.target = network(shape, self.num_actions)
        self.target.set_weights(self.online.get_weights())
        check_network(
            self, "network", self.online, Output("Q-values", (self.num_actions,)), "networks.mlp"
        )
        final_epsilon = float(self.rng.choice(final_epsilons, p=final_epsilon_probs))
        self.epsilon = LinearSchedule(1.0, final_epsilon, epsilon_duration)
        check_probability_schedule("NStepQAgent.final_epsilon", self.epsilon)
        self.rollout = Rollout(n_steps, observation_space)
        self.acting = acting.forward(self.online, observation_space)
        self.learner = Learner(
            UpdateGroup(
                self._loss,
                self.online.trainable_variables,
                optimizer or keras.optimizers.RMSprop(7e-4, rho=0.99, epsilon=1e-5),
                gradient_processor,
                target_updater or HardUpdate(),
                online_variables=self.online.weights,
                target_variables=self.target.weights,
            ),
            batch_spec=self.rollout.spec(),  # one trace for the whole run
            publish=self.acting.variables,
        )
        self.steps = 0  # transitions observed: drives epsilon

    def _loss(self, batch: Batch) -> tuple[tf.Tensor, Metrics]:
        rows = tf.shape(batch["reward"])  # [T, N]
        flat = merge_time_and_envs
        q_values = self.online(flat(batch["observation"]))  # [TN, A]
        actions = tf.cast(flat(batch["action"]), tf.int32)
        q_selected = tf.gather(q_values, actions, axis=-1, batch_dims=1)  # [TN]
        next_q = tf.reduce_max(self.target(flat(batch["next_observation"])), axis=-1)  # [TN]
        returns, _ = NStepReturns()(
            batch["reward"],
            tf.reshape(q_selected, rows),
            tf.reshape(next_q, rows),
            batch["terminated"],
            batch["truncated"],
            self.gamma,
        )  # [T, N], no gradient
        return self.loss(q_selected, tf.reshape(returns, [-1]))

    def act(self, observations: np.ndarray, explore: bool) -> np.ndarray:
        def greedy() -> np.ndarray:
            return np.argmax(self.acting(observations), axis=-1)  # [N]

        epsilon = self.epsilon(self.steps) if explore else 0.0  # evaluation acts greedily
        return epsilon_greedy(greedy, len(observations), epsilon, self.num_actions, self.rng)

    def observe(self, step: VectorStep) -> None:
        super().observe(step)
        self.steps += step.num_envs

    def rollout_metrics(self) -> dict[str, float]:
        return {"epsilon": self.epsilon(self.steps)}

    def networks(self) -> dict[str, keras.Model]:
        """An A3C worker pulls both: the global learner moves the target."""
        return {"online": self.online, "target": self.target}

    def policy_networks(self) -> dict[str, keras.Model]:
        return {"online": self.online}

    def policy_outputs(self, observations: tf.Tensor) -> dict[str, tf.Tensor]:
        q_values = self.online(observations)  # [N, A]
        return {"action": tf.argmax(q_values, axis=-1), "q_values": q_values}

    def describe(self) -> dict:
        return {
            "n_steps": self.rollout.n_steps,
            "gamma": self.gamma,
            "final_epsilon": self.epsilon.end,
        }

    # ----- checkpoints and logs -------------------------------------------------------------

    def state(self) -> State:
        return {**super().state(), "steps": self.steps}

    def load_state(self, state: State) -> None:
        self.steps = state["steps"]
        super().load_state(state)

    def policy_state(self) -> State:
        return {**super().policy_state(), "steps": self.steps}  # epsilon, when exploring

    def load_policy_state(self, state: State) -> None:
        self.steps = state["steps"]
        super().load_policy_state(state)

    def diagnostics(self, observation: np.ndarray) -> dict[str, float]:
        return q_value_diagnostics(self.acting(observation[None])[0])

    def histogram_variables(self) -> dict[str, tf.Variable]:
        return {v.path: v for v in self.online.weights}
