"""Evaluate a trained run: `python -m experiments.evaluate RUN_DIR [--checkpoint=best]`.

Loads the run's own config.gin and a checkpoint (`latest`, the default; `best`, the best
evaluation's policy; or a step), runs `--episodes` episodes of its evaluation policy
(`--explore`: as in training) and prints the return's and episode length's mean, std, min and
max. Without `--seed` and `--episodes` it evaluates as the run did at that step: a checkpoint
written at an evaluation step gives that step's logged `eval/episode_return` exactly.
`--video=DIR` records every episode as MP4 (gymnasium's RecordVideo; the `video` extra),
`--render` shows them in a window. Nothing is written into the run folder unless `--log`
asks: then under `evaluations/`, with `evaluate/` tags, a TensorBoard run of its own.
"""

import os
import shlex
import sys

from experiments import quiet

quiet.import_tensorflow()

from absl import app, flags  # noqa: E402

import experiments  # noqa: E402
from experiments import tables  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("checkpoint", "latest", "latest, best, or the environment step of one.")
flags.DEFINE_integer("episodes", None, "Episodes to run (default: the run's eval_episodes).")
flags.DEFINE_bool("explore", False, "Act as in training (exploration on), not greedily.")
flags.DEFINE_integer(
    "seed", None, "Seed of the environment and the policy (default: the run's evaluation seed)."
)
flags.DEFINE_multi_string(
    "gin_bindings", [], "Change the environment, e.g. 'make_env.max_episode_steps = 1000'."
)
flags.DEFINE_string("video", None, "Record every episode as MP4 into this folder.")
flags.DEFINE_bool("render", False, "Show the episodes in a window (needs a display).")
flags.DEFINE_bool("log", False, "Log the result under RUN_DIR/evaluations/ for TensorBoard.")


def _render_mode() -> str | None:
    if FLAGS.video and FLAGS.render:
        raise experiments.RunError("--video and --render exclude each other: choose one.")
    if FLAGS.render:
        if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            raise experiments.RunError(
                "--render opens a window, and this session has no display (neither DISPLAY nor "
                "WAYLAND_DISPLAY is set): record the episodes with --video=DIR instead."
            )
        return "human"
    if FLAGS.video:  # drawn off screen: SDL (pygame) needs no display, nor sound
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
        return "rgb_array"
    return None


def _describe(policy, run_dir: str) -> str:
    what = (
        f"the best snapshot (eval return {tables.significant(policy.eval_return)} when kept)"
        if policy.source == "best"
        else "its checkpoint"
    )
    episodes = policy.eval_episodes if FLAGS.episodes is None else FLAGS.episodes
    seeded = (
        f"seed {FLAGS.seed}"
        if FLAGS.seed is not None
        else "seeded as the run's evaluation at that step"
    )
    mode = "exploring as in training" if FLAGS.explore else "the evaluation policy"
    plural = "episode" if episodes == 1 else "episodes"
    return f"{run_dir} at step {policy.step}, {what}: {episodes} {plural}, {mode}, {seeded}"


def _log(run_dir: str, policy, result) -> str:
    from framework.storage.run_directory import RunDirectory
    from framework.storage.summaries import SummaryWriters

    folder = RunDirectory(run_dir).evaluation_log_dir(str(FLAGS.checkpoint))
    writers = SummaryWriters(folder)
    writers.scalars(
        policy.step,
        {
            "evaluate/episode_return": result.mean_return,
            "evaluate/episode_return_std": result.std_return,
            "evaluate/episode_return_min": min(result.returns),
            "evaluate/episode_return_max": max(result.returns),
            "evaluate/episode_length": result.mean_length,
        },
    )
    writers.text(
        "command", shlex.join([sys.executable, "-m", "experiments.evaluate", *sys.argv[1:]])
    )
    writers.close()
    return folder


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise app.UsageError("Give one run folder: python -m experiments.evaluate RUN_DIR")
    import gymnasium as gym

    from experiments import videos

    run_dir = argv[1]
    try:
        render_mode = _render_mode()
        if FLAGS.video:
            videos.check_folder(FLAGS.video)
        policy = experiments.load(run_dir, FLAGS.checkpoint, FLAGS.gin_bindings, render_mode)
        try:
            if FLAGS.video:
                episodes = policy.eval_episodes if FLAGS.episodes is None else FLAGS.episodes
                prefix = f"step{policy.step}"
                policy.env = videos.EpisodeVideos(policy.env, FLAGS.video, prefix, episodes)
            result = policy.evaluate(FLAGS.episodes, FLAGS.seed, FLAGS.explore)
        finally:
            policy.close()  # a video is written out here
    except (ValueError, OSError, gym.error.Error) as error:  # a flag, a folder, a renderer
        print(f"experiments.evaluate: error: {' '.join(str(error).split())}", file=sys.stderr)
        sys.exit(1)
    except experiments.RunError as error:
        print(f"experiments.evaluate: error: {error}", file=sys.stderr)
        sys.exit(1)
    print(f"Evaluated {_describe(policy, run_dir)}.")
    print(f"return: {tables.summary(result.returns)}")
    print(f"length: {tables.summary(result.lengths)}")
    if FLAGS.video:
        print(f"Videos: {os.path.abspath(FLAGS.video)}")
    if FLAGS.log:
        print(f"Logged under {_log(run_dir, policy, result)} (evaluate/ tags).")


if __name__ == "__main__":
    app.run(main)
