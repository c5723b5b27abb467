"""One contract over every agent: what the loop, the drivers and the checkpoint store rely on.

Each agent is built from its defaults with small sizes, on a vector environment of N = 3
sub-environments (1 for acting alone): actions of the space's shape and dtype, explore and
greedy; `update(env_steps)` returns metrics and `Health`; `state()` round-trips through the
checkpoint store bitwise and the restored agent continues as the saved one; after
`interrupt_episodes()` training goes on; a NaN reward is reported as non-finite and applies
nothing. Every agent added later joins `AGENTS`.
"""

import functools

import gymnasium as gym
import numpy as np
import pytest

from agents.a2c import A2CAgent
from agents.ddpg import DDPGAgent
from agents.dqn import DQNAgent
from agents.nstep_q import NStepQAgent
from agents.ppo import PPOAgent
from agents.reinforce import ReinforceAgent
from agents.sac import SACAgent
from framework.agent import Agent, Health
from framework.loop import EnvironmentLoop, make_vector_env
from framework.parts import networks
from framework.parts.environments import make_env
from framework.parts.losses import CategoricalCrossEntropyLoss
from framework.parts.minibatches import ShuffledMinibatches
from framework.parts.prioritized_replay import PrioritizedReplay
from framework.parts.replay import UniformReplay
from framework.parts.replay_schedule import ReplaySchedule
from framework.parts.targets import CategoricalDoubleQLearningTarget
from framework.parts.value_distribution import CategoricalSupport
from framework.storage.checkpointing import CheckpointStore
from tests.checkpoint_contents import assert_same_contents, saved_contents

CARTPOLE = functools.partial(make_env, "CartPole-v1", max_episode_steps=20)
PENDULUM = functools.partial(make_env, "Pendulum-v1", max_episode_steps=20)
SMALL_REPLAY = functools.partial(UniformReplay, capacity=500)
# Batches of 8 from the 12th transition on: DQN's every 2nd transition, DDPG's and SAC's every one.
EVERY_2ND = ReplaySchedule(learning_starts=12, train_freq=2, gradient_steps=1, batch_size=8)
EVERY_STEP = ReplaySchedule(learning_starts=12, train_freq=1, gradient_steps=1, batch_size=8)
# Rollouts of 5 vector steps in minibatches of 5 samples, 2 epochs: 2 or 6 steps a call.
SMALL_PPO = dict(n_steps=5, minibatches=ShuffledMinibatches(n_epochs=2, batch_size=5))

# name -> (environment, agent factory taking (observation_space, action_space, seed))
AGENTS = {
    "reinforce": (CARTPOLE, ReinforceAgent),
    "dqn": (CARTPOLE, functools.partial(DQNAgent, schedule=EVERY_2ND, replay=SMALL_REPLAY)),
    "dqn_rainbow": (  # a categorical dueling head, 3-step double-Q targets, prioritized replay
        CARTPOLE,
        functools.partial(
            DQNAgent,
            network=functools.partial(
                networks.mlp, hidden_units=(16,), dueling=True, support=CategoricalSupport(11)
            ),
            td_target=CategoricalDoubleQLearningTarget(CategoricalSupport(11)),
            loss=CategoricalCrossEntropyLoss(),
            n_step=3,
            schedule=EVERY_2ND,
            replay=functools.partial(PrioritizedReplay, capacity=500),
        ),
    ),
    "ddpg": (PENDULUM, functools.partial(DDPGAgent, schedule=EVERY_STEP, replay=SMALL_REPLAY)),
    "td3": (
        PENDULUM,
        functools.partial(
            DDPGAgent,
            num_critics=2,
            target_noise=0.2,
            actor_every=2,
            schedule=EVERY_STEP,
            replay=SMALL_REPLAY,
        ),
    ),
    "a2c": (CARTPOLE, A2CAgent),
    "nstep_q": (CARTPOLE, NStepQAgent),
    "ppo": (CARTPOLE, functools.partial(PPOAgent, **SMALL_PPO)),
    "ppo_gaussian": (PENDULUM, functools.partial(PPOAgent, **SMALL_PPO)),
    "sac": (PENDULUM, functools.partial(SACAgent, schedule=EVERY_STEP, replay=SMALL_REPLAY)),
}
STEPS = 45  # vector steps of 3: every agent updates several times (REINFORCE after episodes)


class Trainee:
    """An agent on its own vector environment, stepped and updated as the synchronous driver
    does; every update's health is kept."""

    def __init__(self, name: str, num_envs: int = 3, env_factory=None, seed: int = 0):
        env, agent = AGENTS[name]
        self.envs = make_vector_env(env_factory or env, num_envs)
        self.agent: Agent = agent(
            self.envs.single_observation_space, self.envs.single_action_space, seed
        )
        self.loop = EnvironmentLoop(self.envs, self.agent)
        self.loop.reset(seed)
        self.env_steps = 0
        self.updates: list[Health] = []

    def train(self, vector_steps: int) -> Health:
        total = Health()
        for _ in range(vector_steps):
            self.loop.step()
            self.env_steps += self.loop.num_envs
            metrics, health = self.agent.update(self.env_steps)
            assert isinstance(health, Health)
            if health.gradient_steps:
                assert "loss" in metrics or any(key.endswith("/loss") for key in metrics)
            total += health
        return total


@pytest.fixture(params=list(AGENTS))
def name(request) -> str:
    return request.param


@pytest.mark.parametrize("num_envs", [1, 3])
def test_actions_have_the_space_shape_and_dtype(name, num_envs):
    trainee = Trainee(name, num_envs)
    space = trainee.envs.single_action_space
    trainee.train(STEPS // num_envs)  # past any warm-up: the policy's own actions
    observations = trainee.loop.observations
    for explore in (True, False):
        actions = trainee.agent.act(observations, explore=explore)
        assert actions.shape == (num_envs, *space.shape)
        discrete = isinstance(space, gym.spaces.Discrete)
        assert np.issubdtype(actions.dtype, np.integer) if discrete else actions.dtype == np.float32
        assert all(space.contains(action.astype(space.dtype)) for action in actions)
    greedy = [trainee.agent.act(observations, explore=False) for _ in range(2)]
    np.testing.assert_array_equal(*greedy)  # the greedy policy draws nothing


def test_acting_in_training_hands_back_per_step_extras_for_each_sub_environment(name):
    trainee = Trainee(name)
    trainee.train(STEPS)
    observations = trainee.loop.observations
    actions, extras = trainee.agent.act_with_extras(observations)
    explored = trainee.agent.act(observations, explore=True)
    assert actions.shape == explored.shape and actions.dtype == explored.dtype
    assert all(len(values) == len(observations) for values in extras.values())
    assert ("log_prob" in extras) == name.startswith("ppo")  # only PPO learns from extras


def test_updates_apply_and_report_healthy_steps(name):
    health = Trainee(name).train(STEPS)
    assert health.gradient_steps > 0 and health.applied_updates > 0
    assert health.nonfinite_steps == health.nonfinite_variables == 0


def test_state_round_trips_bitwise_and_the_restored_agent_continues_the_same(name, tmp_path):
    saved = Trainee(name)
    saved.train(STEPS)
    store = CheckpointStore(str(tmp_path / "store"), str(tmp_path / "store" / "damaged"))
    store.save(saved.env_steps, saved.agent.state())
    expected = saved_contents(saved.agent.state(), tmp_path / "saved")

    restored = Trainee(name, seed=1)  # other weights, generators and replay or rollout
    restored.train(STEPS // 3)
    step, state = store.restore_latest(restored.agent.state())
    restored.agent.load_state(state)
    assert step == saved.env_steps
    assert_same_contents(saved_contents(restored.agent.state(), tmp_path / "restored"), expected)

    restored.env_steps = saved.env_steps
    observations = saved.loop.observations
    assert np.array_equal(
        saved.agent.act(observations, explore=True), restored.agent.act(observations, True)
    )
    for trainee in (saved, restored):  # the same transitions from here on
        trainee.loop = EnvironmentLoop(make_vector_env(AGENTS[name][0], 3), trainee.agent)
        trainee.loop.reset(7)
    assert saved.train(STEPS) == restored.train(STEPS)
    assert_same_contents(
        saved_contents(restored.agent.state(), tmp_path / "restored_later"),
        saved_contents(saved.agent.state(), tmp_path / "saved_later"),
    )


def _flat_keys(state, prefix=""):
    """Key paths of a nested state, and the object at each leaf."""
    leaves = {}
    for key, value in state.items():
        path = f"{prefix}/{key}"
        leaves.update(_flat_keys(value, path) if isinstance(value, dict) else {path: value})
    return leaves


def _weights(agent: Agent) -> list[np.ndarray]:
    """The weights of the agent's policy networks, in order."""
    networks = [v for v in _flat_keys(agent.policy_state()).values() if hasattr(v, "weights")]
    return [weight.numpy() for network in networks for weight in network.weights]


def test_the_policy_state_is_a_part_of_the_state_and_alone_acts_as_the_whole(name, tmp_path):
    saved = Trainee(name)
    saved.train(STEPS)
    whole, policy = _flat_keys(saved.agent.state()), _flat_keys(saved.agent.policy_state())
    assert policy and policy.keys() <= whole.keys()
    for path, value in policy.items():
        assert value is whole[path] or value == whole[path], path
    store = CheckpointStore(str(tmp_path / "store"), str(tmp_path / "store" / "damaged"))
    store.save(saved.env_steps, {"agent": saved.agent.state()})

    fresh = Trainee(name, seed=1)  # other weights
    assert any(
        not np.array_equal(a, b)
        for a, b in zip(_weights(fresh.agent), _weights(saved.agent), strict=True)
    )
    loaded = store.read(saved.env_steps, {"agent": fresh.agent.policy_state()})
    fresh.agent.load_policy_state(loaded["agent"])
    for mine, theirs in zip(_weights(fresh.agent), _weights(saved.agent), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    space = saved.envs.single_observation_space
    space.seed(0)
    observations = np.stack([space.sample() for _ in range(200)])
    np.testing.assert_array_equal(  # acting reads the loaded weights, not a stale copy
        fresh.agent.act(observations, False), saved.agent.act(observations, False)
    )


def test_training_goes_on_after_episodes_are_interrupted(name, tmp_path):
    trainee = Trainee(name)
    trainee.train(STEPS // 2 + 1)  # mid-episode, mid-rollout
    trainee.agent.interrupt_episodes()
    trainee.loop.reset(5)  # as a resume without the environments' state does
    health = trainee.train(STEPS)
    assert health.applied_updates > 0 and health.nonfinite_steps == 0
    store = CheckpointStore(str(tmp_path), str(tmp_path / "damaged"))
    store.save(trainee.env_steps, trainee.agent.state())
    assert store.restore_latest(trainee.agent.state())[0] == trainee.env_steps


class NaNRewards(gym.Wrapper):
    def step(self, action):
        observation, _, terminated, truncated, info = self.env.step(action)
        return observation, float("nan"), terminated, truncated, info


def test_a_nan_reward_is_reported_and_reaches_no_weight_it_flows_into(name):
    trainee = Trainee(name, env_factory=lambda: NaNRewards(AGENTS[name][0]()))
    learner = trainee.agent.learner
    first = learner.groups[0]  # the loss that reads the reward (DDPG: the critic's)
    before = [v.numpy() for v in first.variables]
    health = trainee.train(STEPS)
    assert health.gradient_steps > 0
    assert health.nonfinite_steps == health.nonfinite_losses == health.gradient_steps
    # Only groups whose loss never reads a reward apply (DDPG's actor, against the old critic).
    assert health.applied_updates <= health.gradient_steps * (len(learner.groups) - 1)
    for old, variable in zip(before, first.variables, strict=True):
        np.testing.assert_array_equal(old, variable.numpy())
