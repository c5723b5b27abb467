"""One short trained run per agent and test process, for the tests that need a run folder: each
is trained the first time a test asks for it, then shared. A test that changes a run folder
works on a copy (`TrainedRuns.copy`).
"""

import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

import experiments

SHORT = ["Runner.eval_episodes = 2", "Runner.log_interval = 100"]
PONG = [
    "make_atari_env.max_episode_steps = 60",
    "ReplaySchedule.learning_starts = 100",
    "FrameReplay.capacity = 1000",
    "DQNAgent.eval_epsilon = 0.0",  # the export is the greedy policy
]
SMALL_PPO = [
    "ShuffledMinibatches.n_epochs = 2",
    "ShuffledMinibatches.batch_size = 64",
    "Learner.jit_compile = False",
]
PONG_PPO = [  # 2 emulators, rollouts of 32 steps, games of 100 steps (400 frames)
    "Runner.num_envs = 2",
    "PPOAgent.n_steps = 32",
    "ShuffledMinibatches.n_epochs = 1",
    "ShuffledMinibatches.batch_size = 32",
    "make_atari_env.max_episode_frames = 400",
]
MINATAR = [
    "ReplaySchedule.learning_starts = 100",
    "UniformReplay.capacity = 1000",
    "make_env.max_episode_steps = 200",
]
# name -> (gin file, bindings, environment steps, evaluation and checkpoint interval)
AGENT_RUNS = {  # every agent's
    "reinforce": ("reinforce/cartpole.gin", [], 800, 200),
    "dqn": ("dqn/cartpole.gin", ["ReplaySchedule.learning_starts = 300"], 1200, 300),
    # C51's export differs: expected values from a categorical dueling head (PER besides).
    "dqn_rainbow": (
        "dqn/cartpole_rainbow.gin",
        ["ReplaySchedule.learning_starts = 300"],
        1200,
        300,
    ),
    "dqn_pixels": ("dqn/pong.gin", PONG, 200, 100),
    "td3_normalized": (  # DDPG/TD3, with observation statistics in the snapshot and export
        "td3/pendulum.gin",
        ["ReplaySchedule.learning_starts = 100", "make_env.wrappers = [@NormalizeObservation]"],
        400,
        200,
    ),
    "sac": (  # the export acts with the scaled tanh(mean)
        "sac/pendulum.gin",
        [
            "networks.gaussian_actor_mlp.hidden_units = (32, 32)",
            "networks.critic_mlp.hidden_units = (32, 32)",
            "ReplaySchedule.batch_size = 32",
        ],
        400,
        200,
    ),
    "a2c": ("a2c/cartpole.gin", [], 1600, 400),
    "ppo": ("ppo/cartpole.gin", [*SMALL_PPO, "PPOAgent.n_steps = 16"], 1024, 256),
    "ppo_gaussian_normalized": (  # PPO's Gaussian policy, with observation statistics
        "ppo/pendulum.gin",
        [*SMALL_PPO, "PPOAgent.n_steps = 32", "make_env.wrappers = [@NormalizeObservation]"],
        512,
        256,
    ),
    "nstep_q": ("a3c/cartpole_nstep_q.gin", [], 800, 400),
    # Pixels: PPO on Pong under the peers' protocol (whole games evaluated, the export takes
    # uint8 frames), and MinAtar's boolean planes for DQN, Rainbow's parts and n-step Q.
    "ppo_pixels": ("ppo/pong.gin", PONG_PPO, 256, 128),
    "dqn_minatar": ("dqn/minatar_breakout.gin", MINATAR, 400, 200),
    "dqn_minatar_rainbow": (
        "dqn/minatar_breakout_rainbow.gin",
        [*MINATAR, "PrioritizedReplay.capacity = 1000"],
        400,
        200,
    ),
    "nstep_q_minatar": (
        "a3c/minatar_breakout_nstep_q.gin",
        ["make_env.max_episode_steps = 200", "AsynchronousDriver.backend = @RoundRobin"],
        800,
        400,
    ),
    "a3c": ("a3c/cartpole.gin", [], 800, 400),
}
# The bandit's 300 pulls, for the tests of what a run folder goes through: the cheapest run
# with three checkpoints and a best-policy snapshot.
RUNS = {
    **AGENT_RUNS,
    "bandit": ("reinforce/bandit.gin", [], 300, 100),
    # The pixel PPO with its torso in bfloat16, for the export: uint8 frames in, float32 out.
    "ppo_pixels_bfloat16": (
        "ppo/pong.gin",
        [*PONG_PPO, "networks.actor_critic_cnn.compute_dtype = 'bfloat16'"],
        256,
        128,
    ),
}


class TrainedRuns(Mapping[str, str]):
    """Each run's folder by name (`RUNS`): evaluations and checkpoints at the same steps, the
    last three checkpoints kept (an earlier one pruned). The folders are the session's: read
    them, or change a copy."""

    def __init__(self, root: Path):
        self._root = root
        self._folders: dict[str, str] = {}
        self._curves: dict[str, dict[int, float]] = {}

    def __getitem__(self, name: str) -> str:
        if name not in self._folders:
            self._train(name)
        return self._folders[name]

    def __iter__(self) -> Iterator[str]:
        return iter(RUNS)

    def __len__(self) -> int:
        return len(RUNS)

    def curve(self, name: str) -> dict[int, float]:
        """The run's evaluation returns by step, as training computed them."""
        self[name]
        return self._curves[name]

    def copy(self, name: str, destination: Path) -> str:
        """A copy of the run's folder at `destination` (which may exist, empty)."""
        shutil.copytree(self[name], destination, dirs_exist_ok=True)
        return str(destination)

    def _train(self, name: str) -> None:
        gin_file, bindings, steps, interval = RUNS[name]
        folder = str(self._root / name)
        cadence = [
            f"Runner.num_steps = {steps}",
            f"Runner.eval_interval = {interval}",
            f"Runner.checkpoint_interval = {interval}",
            "Runner.max_checkpoints_to_keep = 3",
        ]
        result = experiments.train(
            [f"gin_configs/{gin_file}"], [*SHORT, *cadence, *bindings], folder
        )
        self._curves[name] = dict(result.eval_returns)
        self._folders[name] = folder


def rollout_observations(policy, count: int) -> np.ndarray:
    """`count` observations of episodes the exploring policy plays, as `act` takes them (from
    gymnasium's own environment where the run normalises), in the space's dtype."""
    env = policy.normalize.raw_env if policy.normalize else policy.env
    observation, _ = env.reset(seed=3)
    observations = []
    while len(observations) < count:
        observations.append(observation)
        action = policy.act(observation[None], explore=True)[0]
        observation, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            observation, _ = env.reset()
    return np.stack(observations)
