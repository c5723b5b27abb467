"""Evaluation episodes recorded as MP4 files (`experiments.evaluate --video=DIR`; gymnasium's
RecordVideo, the `video` extra): the folder checked before anything is loaded or run, and one
file per episode, named so that a listing sorts in episode order (`step1200-episode-07.mp4`
before `step1200-episode-10.mp4`)."""

import os
import tempfile
import warnings
from typing import Any

import gymnasium as gym

from experiments.errors import RunError
from framework.parts import atari


def check_folder(folder: str) -> None:
    """Makes `folder` where missing and writes a scratch file in it; RunError, in one paragraph,
    where it cannot hold the videos (a file, a parent that is a file, no permission, a read-only
    disk): said at once, not after the episodes ran."""
    if os.path.exists(folder) and not os.path.isdir(folder):
        reason = "it is a file"
    else:
        try:
            os.makedirs(folder, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder):
                return
        except OSError as error:
            reason = f"{error.strerror or error} ({error.filename or folder})"
    raise RunError(
        f"--video={folder} cannot hold the videos: {reason}. Give a folder (made if missing) "
        "that this user may write; nothing was evaluated."
    )


class EpisodeVideos(gym.wrappers.RecordVideo):
    """RecordVideo with each file named by its episode, zero-padded to the number of episodes
    (`<prefix>-episode-01.mp4` ... `-10.mp4`). Episode 0 is the evaluation's seeding reset,
    which plays no step, and is not recorded. Where the environment records its games
    (`GameScore`, under the Atari protocol's life loss), an episode is a whole game, as the
    evaluation counts it: a reset after a lost life continues the game and its video."""

    def __init__(self, env: gym.Env, folder: str, prefix: str, episodes: int):
        try:
            with warnings.catch_warnings():  # `check_folder` made it: RecordVideo would warn
                warnings.filterwarnings("ignore", ".*Overwriting existing videos")
                super().__init__(
                    env,
                    folder,
                    episode_trigger=lambda episode: episode > 0,
                    name_prefix=prefix,
                    disable_logger=True,
                )
        except gym.error.DependencyNotInstalled as error:
            raise RunError(
                f"--video needs moviepy, which is not installed ({error}): install the video "
                "extra, `pip install -e '.[video]'` (moviepy, and pygame to draw classic "
                "control)."
            ) from None
        self._digits = len(str(episodes))
        self._records_games = atari.records_games(env)
        self._mid_game = False

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        observation, reward, terminated, truncated, info = super().step(action)
        ended = terminated or truncated
        self._mid_game = self._records_games and ended and atari.GAME_SCORE not in info
        return observation, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        if seed is not None or not self._mid_game:
            return super().reset(seed=seed, options=options)
        self._mid_game = False  # a lost life: the same game, the same file
        observation, info = self.env.reset(options=options)
        if self.recording:
            self._capture_frame()
        return observation, info

    def start_recording(self, video_name: str) -> None:
        """At each recorded episode's reset, in place of gymnasium's unpadded `video_name`."""
        super().start_recording(f"{self.name_prefix}-episode-{self.episode_id:0{self._digits}d}")
