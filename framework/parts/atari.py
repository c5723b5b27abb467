"""The Atari training protocol's wrappers, as Stable-Baselines3's `AtariWrapper` and CleanRL's
`ppo_atari.py` wrap `<Game>NoFrameskip-v4`: FIRE pressed at every reset, a lost life the end of
the learner's episode (the game goes on), and the game's own score recorded beneath the layers
that change what the learner sees.

`make_atari_env` puts them in SB3's order, innermost first: gymnasium's `AtariPreprocessing`
(no-op starts, frame skip with max-pooling, 84x84 grayscale), `GameScore`, `EpisodicLife`,
`FireOnReset` (in the games that have FIRE), gymnasium's `ClipReward` (to [-1, 1]: SB3 takes
the sign, the same for Atari's integer rewards), then the frame stack. Every attribute is data, so a
run resumes exactly mid-game (`framework/env_state.py`).
"""

from typing import Any

import gymnasium
import numpy as np

from framework import env_state

# The info keys of a game's last step (`GameScore`): its unclipped score and its length.
GAME_SCORE = "game_score"
GAME_LENGTH = "game_length"


class GameScore(gymnasium.Wrapper):
    """Adds the game's score and length (agent steps, those played inside the outer layers'
    resets included) to the info of the step that ends the game: `info["game_score"]` and
    `info["game_length"]`, as SB3's `Monitor` and gymnasium's `RecordEpisodeStatistics` do
    beneath the Atari wrappers. The training loop and evaluation then count games, not the
    learner's episodes (a life), and their unclipped scores (`records_games`)."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self.score = 0.0
        self.length = 0

    def reset(self, **kwargs) -> tuple[Any, dict[str, Any]]:
        self.score, self.length = 0.0, 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.score += float(reward)
        self.length += 1
        if terminated or truncated:
            info = {**info, GAME_SCORE: self.score, GAME_LENGTH: self.length}
        return observation, reward, terminated, truncated, info


def records_games(env: gymnasium.Env) -> bool:
    """Whether `env` reports its games' scores (`GameScore` is one of its layers)."""
    return any(isinstance(layer, GameScore) for layer in env_state.wrapper_chain(env))


class EpisodicLife(gymnasium.Wrapper):
    """A lost life ends the learner's episode (terminated), while the game goes on: the reset
    that follows takes a no-op step instead of starting a new game, unless the game is over
    (SB3's `EpisodicLifeEnv`, Mnih et al., 2015). A reset given a seed always starts a new
    game. Only steps say whether the game is over, `FireOnReset`'s among them (as in SB3): a
    reset continues any game they did not end. A game that ends in that no-op step starts
    again at once; its `GameScore` info is lost with the step, as in SB3."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return observation, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        if self.game_over or seed is not None:
            observation, info = self.env.reset(seed=seed, options=options)
        else:
            observation, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                observation, info = self.env.reset(options=options)
        self.lives = self.env.unwrapped.ale.lives()
        return observation, info


class FireOnReset(gymnasium.Wrapper):
    """Presses FIRE (action 1), then action 2, after every reset, for the games that wait for
    FIRE to start (SB3's `FireResetEnv`); a game that ends in them is reset again."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        if not has_fire(env):
            raise ValueError(
                "FireOnReset presses FIRE as action 1 and then action 2, but this game's "
                f"actions are {env.unwrapped.get_action_meanings()}."
            )

    def reset(self, **kwargs) -> tuple[Any, dict[str, Any]]:
        self.env.reset(**kwargs)
        for action in (1, 2):
            observation, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                observation, info = self.env.reset(**kwargs)
        return observation, info


def has_fire(env: gymnasium.Env) -> bool:
    """Whether the game takes FIRE as its action 1 (the games FIRE starts)."""
    meanings = env.unwrapped.get_action_meanings()
    return len(meanings) >= 3 and meanings[1] == "FIRE"


def channels_last(env: gymnasium.Env) -> gymnasium.Env:
    """Stacked frames `(stack, height, width)` as `(height, width, stack)`, as a Keras conv
    net takes them."""
    stack, height, width = env.observation_space.shape
    return gymnasium.wrappers.TransformObservation(
        env,
        lambda observation: np.moveaxis(observation, 0, -1),
        observation_space=gymnasium.spaces.Box(
            low=0, high=255, shape=(height, width, stack), dtype=np.uint8
        ),
    )
