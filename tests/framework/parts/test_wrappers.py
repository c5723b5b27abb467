"""Environments with arguments and wrappers: gymnasium's wrappers bound from gin, and the
normalisation wrappers whose statistics are one state for a run (shared by the training
sub-environments, frozen for evaluation, saved in checkpoints so that a resume is exact)."""

import gin
import gymnasium
import numpy as np
import pytest
from gymnasium.spaces import Discrete

import agents  # noqa: F401  (registers the agents the configs name)
from framework import config
from framework.drivers.driver import Seeds
from framework.drivers.synchronous import SynchronousDriver
from framework.loop import EnvironmentLoop, make_vector_env
from framework.parts import wrappers
from framework.parts.environments import make_env
from framework.parts.wrappers import NormalizeObservation, NormalizeReward, share_statistics
from framework.runner import Runner
from framework.storage.event_reader import read_scalars
from tests.runs import train

DQN = ["gin_configs/dqn/cartpole.gin"]
NORMALIZED = [
    "make_env.wrappers = [@NormalizeObservation, @NormalizeReward]",
    "Runner.eval_interval = 200",
    "Runner.eval_episodes = 2",
    "Runner.log_interval = 50",
    "Runner.num_envs = 3",
    "make_env.max_episode_steps = 30",
    "ReplaySchedule.learning_starts = 90",
    "ReplaySchedule.train_freq = 30",
    "ReplaySchedule.gradient_steps = 2",
]


def test_environment_arguments_and_wrappers_come_from_the_config():
    gin.clear_config()
    config.parse(
        DQN,
        [
            "make_env.env_id = 'Pendulum-v1'",
            "make_env.env_kwargs = {'g': 3.5}",
            "make_env.wrappers = [@wrappers.RescaleAction, @wrappers.ClipReward]",
            "wrappers.RescaleAction.min_action = -0.5",
            "wrappers.RescaleAction.max_action = 0.5",
            "wrappers.ClipReward.max_reward = 0.0",
        ],
    )
    env = make_env()
    assert env.unwrapped.g == 3.5
    assert isinstance(env, gymnasium.wrappers.ClipReward)  # the last wrapper is outermost
    assert isinstance(env.env, gymnasium.wrappers.RescaleAction)
    assert env.action_space.high.tolist() == [0.5]
    env.reset(seed=0)
    assert env.step(np.array([0.5], np.float32))[1] <= 0.0


def test_bad_environment_arguments_and_wrappers_are_one_paragraph():
    with pytest.raises(ValueError, match=r"make_env.env_kwargs must be a dict .* got 3"):
        make_env("CartPole-v1", env_kwargs=3)
    with pytest.raises(ValueError, match=r"sets max_episode_steps, .* make_env.max_episode"):
        make_env("CartPole-v1", env_kwargs={"max_episode_steps": 5})
    with pytest.raises(ValueError, match="gymnasium's own NormalizeObservation"):
        share_statistics([gymnasium.wrappers.NormalizeObservation(make_env("CartPole-v1"))])
    with pytest.raises(ValueError, match=r"wrappers must be wrapper classes .*(no parentheses)"):
        make_env("CartPole-v1", wrappers=[gymnasium.make("CartPole-v1")])


def _observation_normalizers(env) -> list[NormalizeObservation]:
    layers = []
    while isinstance(env, gymnasium.Wrapper):
        if isinstance(env, NormalizeObservation):
            layers.append(env)
        env = env.env
    return layers


def test_training_environments_share_one_set_of_statistics_and_evaluation_reads_it_frozen():
    gin.clear_config()
    factory = lambda: NormalizeObservation(make_env("CartPole-v1"))  # noqa: E731
    driver = SynchronousDriver(_RandomAgent, factory, 3, Seeds(1, 2, 3))
    evaluation = factory()
    driver.evaluate_with(evaluation)
    (shared,) = {
        id(layer.obs_rms)
        for env in driver.loop.envs.envs
        for layer in _observation_normalizers(env)
    }
    (frozen,) = _observation_normalizers(evaluation)
    assert id(frozen.obs_rms) == shared and not frozen.update_running_mean
    statistics = frozen.obs_rms
    count = statistics.count
    driver.advance(0, 30, lambda: False)  # 10 vector steps of 3: every observation counted
    assert count + 30 <= statistics.count <= count + 33  # and the first of any new episode
    before = (statistics.mean.copy(), statistics.count)
    evaluation.reset(seed=0)
    for _ in range(5):
        observation, *_ = evaluation.step(0)
    np.testing.assert_array_equal(statistics.mean, before[0])  # frozen: evaluation updates none
    assert statistics.count == before[1]
    assert np.all(np.abs(observation) <= frozen.clip)
    driver.close()


def test_evaluation_rewards_are_not_scaled():
    training, evaluation = (NormalizeReward(make_env("CartPole-v1")) for _ in range(2))
    driver = SynchronousDriver(_RandomAgent, lambda: training, 1, Seeds(1, 2, 3))
    driver.evaluate_with(evaluation)
    driver.advance(0, 50, lambda: False)
    assert training.return_rms.var > 1.0  # rewards of 1 add up: the scale is not 1
    evaluation.reset(seed=0)
    assert evaluation.step(0)[1] == 1.0  # CartPole's own reward
    driver.close()


@pytest.mark.parametrize("num_envs", [1, 3])  # 1: every episode's end resets every sub-env
def test_training_returns_are_the_envs_own_rewards_not_the_scaled_ones(num_envs):
    # CartPole pays 1 a step: an episode's own return is its length, the scaled one is not.
    def factory():
        return NormalizeReward(make_env("CartPole-v1", max_episode_steps=15))

    loop = EnvironmentLoop(make_vector_env(factory, num_envs), _RandomAgent(None, Discrete(2), 0))
    loop.reset(seed=0)
    ended = [episodes for _ in range(60) if (episodes := loop.step()) is not None]
    returns = np.concatenate([episodes.returns for episodes in ended])
    lengths = np.concatenate([episodes.lengths for episodes in ended])
    assert len(returns) >= 4 and 15 in lengths  # time limits' cuts and falls
    np.testing.assert_array_equal(returns, lengths)
    scale = np.sqrt(loop.envs.envs[0].return_rms.var)
    assert scale > 2.0  # the agent's rewards are 1 / scale: a sum of them would not be a length
    loop.close()


@pytest.mark.parametrize(
    "outer",
    [
        lambda env: gymnasium.wrappers.ClipReward(env, -0.5, 0.5),
        lambda env: gymnasium.wrappers.MaxAndSkipObservation(env, skip=4),
    ],
)
def test_a_wrapper_that_changes_rewards_above_the_scaling_is_refused(outer):
    # Its rewards are not NormalizeReward's: training returns would not be the episode's.
    env = outer(NormalizeReward(make_env("CartPole-v1")))
    with pytest.raises(ValueError, match=r"wraps NormalizeReward and changes the rewards"):
        wrappers.scales_rewards(env)
    assert wrappers.scales_rewards(NormalizeReward(outer(make_env("CartPole-v1"))))


def test_a_normalised_dqn_run_resumes_bitwise_statistics_included(tmp_path):
    whole = train(tmp_path / "whole", DQN, [*NORMALIZED, "Runner.num_steps = 600"])
    train(tmp_path / "resumed", DQN, [*NORMALIZED, "Runner.num_steps = 300"])  # mid-episode
    resumed = train(tmp_path / "resumed", DQN, [*NORMALIZED, "Runner.num_steps = 600"])
    assert resumed.restored_step == 300
    for a, b in zip(
        whole.driver._statistics.state().values(),
        resumed.driver._statistics.state().values(),
        strict=True,
    ):
        np.testing.assert_array_equal(a["mean"], b["mean"])
        np.testing.assert_array_equal(a["var"], b["var"])
        assert a["count"] == b["count"] > 600
    for a, b in zip(
        whole.agent.online.get_weights(), resumed.agent.online.get_weights(), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    expected, got = read_scalars(tmp_path / "whole"), read_scalars(tmp_path / "resumed")
    for tag in ("train/episode_return", "train/loss"):
        assert got[tag] == expected[tag], tag
    # The first start also evaluated at 300, where it stopped; after that, the same evaluations
    # through the restored statistics.
    after = [(step, value) for step, value in got["eval/episode_return"] if step > 300]
    assert after == [(s, v) for s, v in expected["eval/episode_return"] if s > 300]
    assert len(after) == 2
    # Evaluation's rewards are not scaled: two episodes' returns are CartPole's whole steps.
    assert all(2 * value == int(2 * value) for _, value in expected["eval/episode_return"])


def test_the_asynchronous_driver_refuses_normalisation(tmp_path):
    gin.clear_config()
    config.parse(
        ["gin_configs/a3c/cartpole.gin"],
        ["make_env.wrappers = [@NormalizeObservation]", "AsynchronousDriver.backend = @RoundRobin"],
    )
    from framework.storage.run_directory import RunDirectory

    with pytest.raises(ValueError, match="asynchronous driver's workers would each keep"):
        Runner(RunDirectory(str(tmp_path)))


class _RandomAgent:
    """Acts uniformly at random and learns nothing: only the environments matter here."""

    def __init__(self, observation_space, action_space, seed):
        self.rng = np.random.default_rng(seed)
        self.action_space = action_space

    def act(self, observations, explore):
        return self.rng.integers(self.action_space.n, size=len(observations))

    def act_with_extras(self, observations):
        return self.act(observations, explore=True), {}

    def observe(self, step):
        pass

    def update(self, env_steps):
        from framework.agent import Health

        return {}, Health()


def test_the_running_mean_and_variance_update_by_hand():
    # gymnasium's RunningMeanStd starts at mean 0, variance 1, count 1e-4 and merges each
    # observation in (Chan et al.'s parallel update): after x_1..x_k it is the weighted merge
    # of that prior with the sample's mean m and population variance v.
    env = NormalizeObservation(make_env("Pendulum-v1"), clip=1e6)
    env.reset(seed=0)
    raw = [env.unwrapped._get_obs()]
    for action in np.linspace(-2, 2, 9):
        normalised, *_ = env.step(np.array([action], np.float32))
        raw.append(env.unwrapped._get_obs())
    x = np.array(raw, np.float64)
    k, prior = len(x), 1e-4
    mean = x.mean(axis=0) * k / (prior + k)
    m2 = 1.0 * prior + x.var(axis=0) * k + x.mean(axis=0) ** 2 * prior * k / (prior + k)
    statistics = env.obs_rms
    np.testing.assert_allclose(statistics.count, prior + k)
    np.testing.assert_allclose(statistics.mean, mean, rtol=1e-6)  # kept in float32
    np.testing.assert_allclose(statistics.var, m2 / (prior + k), rtol=1e-6)
    # The last observation given is the raw one standardised by the statistics that include it.
    expected = (x[-1] - mean) / np.sqrt(m2 / (prior + k) + env.epsilon)
    np.testing.assert_allclose(normalised, expected, rtol=1e-5)


class _Scripted(gymnasium.Env):
    """Gives the scripted `(reward, terminated, truncated)` one step at a time."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(1)

    def __init__(self, script):
        self.script = iter(script)

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        reward, terminated, truncated = next(self.script)
        return np.zeros(1, np.float32), reward, terminated, truncated, {}


def _scaled_by_hand(returns, rewards):
    """Each reward over the std of the returns so far, merged into RunningMeanStd's prior
    (mean 0, variance 1, count 1e-4; as in the test above)."""
    scaled, prior = [], 1e-4
    for k in range(1, len(returns) + 1):
        g = np.array(returns[:k])
        m2 = prior + g.var() * k + g.mean() ** 2 * prior * k / (prior + k)
        scaled.append(rewards[k - 1] / np.sqrt(m2 / (prior + k) + 1e-8))
    return scaled


def test_the_discounted_return_restarts_after_any_episode_end_as_sb3s_vecnormalize():
    # gamma 0.5; rewards 1, 2 (a time limit's cut), 3, 4 (terminated), 5. SB3's return G:
    # 1, 0.5 * 1 + 2 = 2.5, then from 0: 3, 0.5 * 3 + 4 = 5.5, then from 0: 5. (gymnasium's own
    # wrapper: 1, 2.5, 0.5 * 2.5 + 3 = 4.25 across the cut, 4 dropping the episode's sum, 7.)
    script = [(1.0, False, False), (2.0, False, True), (3.0, False, False)]
    script += [(4.0, True, False), (5.0, False, False)]
    env = NormalizeReward(_Scripted(script), gamma=0.5, clip=1e6)
    env.reset()
    scaled = [env.step(0)[1] for _ in script]
    np.testing.assert_allclose(env.return_rms.mean, np.mean([1, 2.5, 3, 5.5, 5]) * 5 / (5 + 1e-4))
    np.testing.assert_allclose(scaled, _scaled_by_hand([1, 2.5, 3, 5.5, 5], [1, 2, 3, 4, 5]))


def test_a_reset_restarts_the_discounted_return():
    env = NormalizeReward(_Scripted([(1.0, False, False), (2.0, False, False)]), gamma=0.5)
    env.reset()
    env.step(0)
    env.reset()  # mid-episode: SB3's VecNormalize.reset zeroes its returns too
    second = env.step(0)[1]
    np.testing.assert_allclose(env.return_rms.mean, (1 + 2) / 2 * 2 / (2 + 1e-4))
    np.testing.assert_allclose(second, _scaled_by_hand([1, 2], [1, 2])[1])
