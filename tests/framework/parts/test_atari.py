"""The Atari protocol's layers (framework/parts/atari.py) on a scripted game whose numbers are
known, then on ALE itself: FIRE after every reset, a lost life the learner's episode end while
the game goes on, clipped rewards for the learner and the game's own score for the logs and
evaluation."""

import gymnasium as gym
import numpy as np
import pytest

from framework import env_state
from framework.agent import Agent
from framework.loop import EnvironmentLoop, evaluate, make_vector_env
from framework.parts import atari
from framework.parts.environments import make_atari_env


class _Lives:
    def __init__(self, game):
        self.game = game

    def lives(self) -> int:
        return self.game.lives


class _ScriptedGame(gym.Env):
    """A game of 2 lives: every step scores `rewards[t % 4]` (t counts the game's steps), and
    a life is lost at each 5th step; the game is over when none is left. Observations are the
    step count. It records the actions it was given and how many games it started."""

    observation_space = gym.spaces.Box(0, 10_000, (1,), np.int64)
    action_space = gym.spaces.Discrete(4)
    rewards = (0.0, 4.0, -3.0, 0.0)

    def __init__(self):
        self.ale = _Lives(self)
        self.actions, self.games, self.t, self.lives = [], 0, 0, 2

    def get_action_meanings(self) -> list[str]:
        return ["NOOP", "FIRE", "RIGHT", "LEFT"]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.games, self.t, self.lives = self.games + 1, 0, 2
        return np.array([0]), {}

    def step(self, action):
        self.actions.append(int(action))
        reward = self.rewards[self.t % 4]
        self.t += 1
        if self.t % 5 == 0:
            self.lives -= 1
        return np.array([self.t]), reward, self.lives == 0, False, {}


def _protocol(game: gym.Env) -> gym.Env:
    """The layers in make_atari_env's order, without the preprocessing."""
    env = atari.FireOnReset(atari.EpisodicLife(atari.GameScore(game)))
    return gym.wrappers.ClipReward(env, -1.0, 1.0)


def test_fire_and_action_2_follow_every_reset():
    game = _ScriptedGame()
    env = _protocol(game)
    observation, _ = env.reset(seed=0)
    assert game.actions == [1, 2] and observation[0] == 2  # two steps into the game


def test_a_lost_life_ends_the_learners_episode_and_the_game_goes_on_with_clipped_rewards():
    game = _ScriptedGame()
    env = _protocol(game)
    env.reset(seed=0)  # steps 1 and 2 of the game: FIRE, 2
    rewards, dones = [], []
    for _ in range(3):  # steps 3, 4, 5: the life is lost at step 5
        _, reward, terminated, _, info = env.step(3)
        rewards.append(reward)
        dones.append(terminated)
    # The game's rewards at steps 3, 4, 5 are rewards[2], [3], [0] = -3, 0, 0: -3 clipped to -1.
    assert rewards == [-1.0, 0.0, 0.0] and dones == [False, False, True]
    assert atari.GAME_SCORE not in info  # a life, not the game
    observation, _ = env.reset()  # no new game: a no-op, then FIRE and 2
    assert game.games == 1 and game.actions[-3:] == [0, 1, 2] and observation[0] == 8
    for _ in range(2):  # steps 9 and 10: the last life is lost at step 10, the game is over
        _, reward, terminated, _, info = env.step(3)
    assert terminated
    # The game's own score, unclipped, over its 10 steps (those inside the resets included):
    # rewards[t % 4] for t = 0..9: 0 + 4 - 3 + 0 + 0 + 4 - 3 + 0 + 0 + 4 = 6.
    assert info[atari.GAME_SCORE] == 6.0 and info[atari.GAME_LENGTH] == 10
    env.reset()
    assert game.games == 2  # after the game is over, a new one


def test_a_seeded_reset_starts_a_new_game_even_mid_game():
    game = _ScriptedGame()
    env = _protocol(game)
    env.reset(seed=0)
    for _ in range(3):
        env.step(0)  # a life lost at step 5
    env.reset(seed=1)
    assert game.games == 2


class _FirstAction(Agent):
    def act(self, observations, explore):
        return np.zeros(len(observations), np.int64)

    def observe(self, step):
        del step

    def update(self, env_steps):
        raise NotImplementedError

    def interrupt_episodes(self):
        raise NotImplementedError

    def policy_state(self):
        return {}

    def load_policy_state(self, state):
        del state


def test_the_loop_reports_games_with_their_own_scores_and_evaluation_plays_whole_games():
    envs = make_vector_env(lambda: _protocol(_ScriptedGame()), 2)
    loop = EnvironmentLoop(
        envs, _FirstAction(envs.single_observation_space, envs.single_action_space, 0)
    )
    assert loop.counts_games
    loop.reset(seed=0)  # the game's steps 1, 2: FIRE, 2
    # The loop's steps are the game's 3, 4, 5 (a life lost; the autoreset plays 6, 7, 8 inside
    # the vector step), 9 and 10 (the game over): only the last ends an episode, the game.
    ended = [loop.step() for _ in range(5)]
    assert ended[:4] == [None] * 4
    np.testing.assert_array_equal(ended[4].returns, [6.0, 6.0])  # clipped, they sum to 1
    np.testing.assert_array_equal(ended[4].lengths, [10, 10])

    result = evaluate(_protocol(_ScriptedGame()), lambda observation: 3, 3, seed=0, step=0)
    assert result.returns == (6.0, 6.0, 6.0) and result.lengths == (10, 10, 10)


def test_an_environment_without_the_protocol_keeps_the_loops_own_tallies():
    envs = make_vector_env(lambda: gym.make("CartPole-v1"), 1)
    assert not EnvironmentLoop(
        envs, _FirstAction(envs.single_observation_space, envs.single_action_space, 0)
    ).counts_games


# ----- on ALE --------------------------------------------------------------------------------


def _breakout(**protocol) -> gym.Env:
    return make_atari_env(
        "ALE/Breakout-v5", screen_size=84, repeat_action_probability=0.0, **protocol
    )


def test_make_atari_env_builds_the_protocol_in_sb3_s_order():
    env = _breakout(fire_on_reset=True, terminal_on_life_loss=True, clip_rewards=True)
    layers = [type(layer).__name__ for layer in env_state.wrapper_chain(env)]
    assert layers[:7] == [
        "TransformObservation",
        "FrameStackObservation",
        "ClipReward",
        "FireOnReset",
        "EpisodicLife",
        "GameScore",
        "AtariPreprocessing",
    ]
    assert env.observation_space.shape == (84, 84, 4)
    # Without FIRE in the game (Freeway: NOOP, UP, DOWN), no FireOnReset, as SB3.
    freeway = make_atari_env("ALE/Freeway-v5", fire_on_reset=True)
    assert not any(
        isinstance(layer, atari.FireOnReset) for layer in env_state.wrapper_chain(freeway)
    )


def test_on_breakout_each_lost_life_ends_a_learner_episode_and_five_make_a_game():
    env = _breakout(fire_on_reset=True, terminal_on_life_loss=True, clip_rewards=True)
    env.reset(seed=0)
    ends, lives = 0, []
    for _ in range(5000):
        _, _, terminated, truncated, info = env.step(env.action_space.sample())
        if terminated or truncated:
            ends += 1
            lives.append(env.unwrapped.ale.lives())
            if atari.GAME_SCORE in info:
                break
            env.reset()
    assert ends == 5 and lives == [4, 3, 2, 1, 0]  # Breakout's 5 lives, one game


def test_max_episode_frames_caps_a_game_in_emulator_frames_and_time_limits_are_refused():
    env = _breakout(terminal_on_life_loss=True, max_episode_frames=400, noop_max=0)
    env.reset(seed=0)
    steps = 0
    while True:
        steps += 1
        _, _, _, truncated, info = env.step(0)  # NOOP: Breakout never starts, no life lost
        if truncated:
            break
    assert steps == 100 and info[atari.GAME_LENGTH] == 100  # 400 frames, 4 a step
    with pytest.raises(ValueError, match="max_episode_frames"):
        _breakout(terminal_on_life_loss=True, max_episode_steps=100)


def test_the_protocol_resumes_exactly_mid_game(tmp_path):
    def build():
        return _breakout(fire_on_reset=True, terminal_on_life_loss=True, clip_rewards=True)

    env = build()
    env.reset(seed=3)
    actions = np.random.default_rng(0).integers(0, 4, 600)
    for action in actions[:300]:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    state = env_state.unpack(env_state.pack(env_state.capture(env)))
    fresh = build()
    fresh.reset(seed=7)
    env_state.restore(fresh, state)
    for action in actions[300:]:
        expected, got = env.step(action), fresh.step(action)
        np.testing.assert_array_equal(expected[0], got[0])
        assert expected[1:4] == got[1:4] and expected[4] == got[4]
        if expected[2] or expected[3]:
            np.testing.assert_array_equal(env.reset()[0], fresh.reset()[0])
