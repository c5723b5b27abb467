"""A uniformly random policy's return on a config's evaluation environment, the yardstick of
"learnt anything" (and of normalised scores): `python -m experiments.random_baseline
--gin_file=gin_configs/a3c/minatar_breakout_nstep_q.gin --episodes=100`.

The environment is the one the config's runs evaluate on (`Runner.env_factory`, with its
protocol: an Atari game counted whole, MinAtar's episode cap), played as an evaluation is
(`framework.loop.evaluate`); the actions are drawn from its action space, seeded by `--seed`
like the environment, so the figure is reproducible. Prints the mean return with its 95%
bootstrap interval over the episodes, the std, and the mean length.
"""

import sys
from collections.abc import Sequence

from experiments import quiet

quiet.import_tensorflow()

from absl import app, flags  # noqa: E402

from experiments import RunError, statistics  # noqa: E402
from experiments.loading import built, runner_factories  # noqa: E402


def random_returns(gin_file: str, bindings: Sequence[str], episodes: int, seed: int):
    """The evaluation of a uniformly random policy on the config's evaluation environment
    (`framework.loop.Evaluation`)."""
    import gin

    import agents  # noqa: F401  (registers every configurable a config may name)
    from framework import config, runner  # noqa: F401  (the runner's parts, as a run parses)
    from framework.loop import evaluate

    gin.clear_config()
    built(lambda: config.parse([gin_file], list(bindings)), gin_file)
    env = built(runner_factories()["env_factory"], gin_file)
    try:
        env.action_space.seed(seed)
        return evaluate(env, lambda _: env.action_space.sample(), episodes, seed, step=0)
    finally:
        env.close()


def _define_flags() -> None:
    """The command's flags, defined only when it runs (tests import the module beside others
    that define `--gin_file`)."""
    flags.DEFINE_string("gin_file", None, "The config whose evaluation environment to play.")
    flags.DEFINE_multi_string("gin_bindings", [], "Change the environment, as for a run.")
    flags.DEFINE_integer("episodes", 100, "Episodes (Atari: whole games) to play.", lower_bound=1)
    flags.DEFINE_integer("seed", 0, "Seed of the environment and of the actions.")
    flags.mark_flag_as_required("gin_file")


def main(argv: list[str]) -> None:
    del argv
    flag = flags.FLAGS
    try:
        result = random_returns(flag.gin_file, flag.gin_bindings, flag.episodes, flag.seed)
    except RunError as error:
        print(f"experiments.random_baseline: error: {error}", file=sys.stderr)
        sys.exit(1)
    point, low, high = statistics.bootstrap_interval(result.returns, statistics.mean)
    print(
        f"{flag.gin_file}: a uniformly random policy over {len(result.returns)} episodes "
        f"(seed {flag.seed}): mean return {point:.4g} [95% CI {low:.4g}, {high:.4g}], std "
        f"{result.std_return:.4g}, mean length {result.mean_length:.1f}",
        flush=True,
    )


if __name__ == "__main__":
    _define_flags()
    app.run(main)
