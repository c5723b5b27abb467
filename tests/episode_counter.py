"""A stateful callback of a user's own, for runs in another process: a gin file imports it
(`import tests.episode_counter`), as a user's file imports theirs."""

import gin

from framework.callbacks import Callback


@gin.configurable
class EpisodeCounter(Callback):
    """Counts the training episodes and sums their returns every 100 steps, logging both, and
    stops the run once it counted `stop_at`; a later start of the run it stopped stops again."""

    every_steps = 100

    def __init__(self, stop_at: int):
        self.stop_at = stop_at
        self.episodes, self.returns, self.stopped_at = 0, 0.0, None

    def on_start(self, run):
        if self.stopped_at is not None:
            run.stop(f"it stopped the run at step {self.stopped_at}")

    def on_step(self, run):
        ended = run.ended_episodes
        self.episodes += len(ended.returns)
        self.returns += float(ended.returns.sum())
        run.log({"custom/episodes": self.episodes, "custom/returns": self.returns})
        if self.episodes >= self.stop_at:
            self.stopped_at = run.env_steps
            run.stop(f"{self.episodes} episodes counted")

    def state(self):
        return {"episodes": self.episodes, "returns": self.returns, "stopped_at": self.stopped_at}

    def load_state(self, state):
        self.episodes, self.returns = state["episodes"], state["returns"]
        self.stopped_at = state["stopped_at"]
