"""Train and evaluate an agent from gin configs: `python -m experiments.run --gin_file=...`.

With no flags it trains the default config (DQN on CartPole) into a fresh folder under runs/.
Starting it again on the same --base_dir resumes from the newest complete checkpoint.
"""

# Importing this module is cheap (TensorFlow is imported in `main`): a worker process the run
# spawns imports it again, as its main module, before its first line runs, and must be able to
# die with a run killed meanwhile (`framework.processes.start_child`).

import sys
from typing import TYPE_CHECKING

from experiments.stopping import REQUESTS

REQUESTS.install()  # first: a Ctrl-C while TensorFlow loads or the agent builds stops the run

from absl import app, flags  # noqa: E402

import experiments  # noqa: E402

if TYPE_CHECKING:
    import keras

    from framework.agent import Agent

FLAGS = flags.FLAGS
flags.DEFINE_multi_string(
    "gin_file",
    [experiments.DEFAULT_GIN_FILE],
    "Gin config file(s); later ones win. `python -m experiments.configs` lists the shipped ones.",
)
flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings, e.g. 'Runner.num_steps = 1000'.")
flags.DEFINE_string("base_dir", None, "The run's folder (default: a fresh one under runs/).")
flags.DEFINE_integer("seed", None, "Seed for everything; overrides Runner.seed.")
flags.DEFINE_bool("dry_run", False, "Parse, build env and agent, print the config, and exit.")
flags.DEFINE_bool("strict", False, "Fail, instead of warning, on bindings that nothing used.")
flags.DEFINE_bool(
    "start_afresh",
    False,
    "Train from step 0 in a --base_dir whose records show checkpoints it no longer has, or "
    "whose run had another seed, agent or environment (its checkpoints are set aside in "
    "discarded/).",
)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    from experiments import quiet

    quiet.import_tensorflow()  # before anything else imports it: no start-up banners
    import gin

    try:
        prepared = experiments.build(
            FLAGS.gin_file,
            FLAGS.gin_bindings,
            FLAGS.base_dir,
            FLAGS.seed,
            FLAGS.strict,
            start_afresh=FLAGS.start_afresh,
        )
        if FLAGS.dry_run:
            print(gin.operative_config_str())
            print(built_parts(prepared.runner.agent))
            prepared.runner.close()
            return
        experiments.train_prepared(prepared)
    except experiments.RunError as error:
        print(f"experiments.run: error: {error}", file=sys.stderr)
        sys.exit(1)
    except experiments.RunStopped as stop:
        print(f"experiments.run: {stop}", file=sys.stderr)
        sys.exit(stop.exit_code)


def built_parts(agent: "Agent") -> str:
    """What a dry run built, as gin comments after its config (the output stays a config):
    the spaces the agent was built for, and each of its networks' parameter counts."""
    lines = [
        f"# Observation space: {agent.observation_space}",
        f"# Action space: {agent.action_space}",
    ]
    for name, network in _networks(agent):
        lines.append(f"# Network agent.{name}: {network.count_params():,} parameters")
    return "\n".join(lines)


def _networks(agent: "Agent") -> list[tuple[str, "keras.Model"]]:
    """The agent's Keras models by attribute (a list of them, e.g. twin critics, by index)."""
    import keras

    found = []
    for name, value in vars(agent).items():
        if isinstance(value, keras.Model):
            found.append((name, value))
        elif value and isinstance(value, list | tuple):
            models = [item for item in value if isinstance(item, keras.Model)]
            found += [(f"{name}[{index}]", model) for index, model in enumerate(models)]
    return found


def run_main() -> None:
    app.run(main)


if __name__ == "__main__":
    run_main()
