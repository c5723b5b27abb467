"""Export a trained policy: `python -m experiments.export RUN_DIR --out DIR [--checkpoint=best]`.

Writes a TensorFlow SavedModel that TensorFlow alone loads and calls:

    policy = tf.saved_model.load(DIR)
    outputs = policy.signatures["action"](observation=tf.constant(batch))  # outputs["action"]

`observation [N, *obs_shape]` is what the run's environment gives (for Atari: the
preprocessed, stacked frames), normalised inside where the run normalises; the outputs are the
greedy `action` and what else the agent has (`q_values`, `logits`, `value`).
`DIR/assets.extra/policy.json` describes both. Nothing is written into the run folder.
"""

import os
import sys

from experiments import quiet

quiet.import_tensorflow()

from absl import app, flags  # noqa: E402

import experiments  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "The SavedModel's folder (new, or empty).")
flags.DEFINE_string("checkpoint", "latest", "latest, best, or the environment step of one.")
flags.DEFINE_bool(
    "latency", False, "Load the export back and time a call at batch 1 and 1,000 (median of 20)."
)
flags.mark_flag_as_required("out")


def _size(folder: str) -> int:
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(folder)
        for name in names
    )


def main(argv: list[str]) -> None:
    import tensorflow as tf

    from framework.export import SIGNATURE, call_latency, export

    if len(argv) != 2:
        raise app.UsageError("Give one run folder: python -m experiments.export RUN_DIR --out DIR")
    try:
        policy = experiments.load(argv[1], FLAGS.checkpoint)
        try:
            description = export(policy, argv[1], FLAGS.out)
            space = policy.observation_space
            latency = call_latency(FLAGS.out, space) if FLAGS.latency else None
        except (ValueError, TypeError, NotImplementedError, OSError, tf.errors.OpError) as error:
            raise experiments.RunError(
                f"Could not export {argv[1]} to {FLAGS.out}: {' '.join(str(error).split())}"
            ) from None
        finally:
            policy.close()
    except experiments.RunError as error:
        print(f"experiments.export: error: {error}", file=sys.stderr)
        sys.exit(1)
    observation, action = description["observation"], description["action"]
    print(
        f"Exported {description['agent']} ({description['checkpoint']}) to {FLAGS.out} "
        f"({_size(FLAGS.out) / 1e6:.2f} MB).\n"
        f"Signature {SIGNATURE!r}: observation {observation['shape']} {observation['dtype']} "
        f"-> action {action['space']}; {observation['what']}."
    )
    if latency:
        print(
            f"Loaded back with TensorFlow: a call takes {1e3 * latency[1]:.2f} ms for 1 "
            f"observation, {1e3 * latency[1000]:.2f} ms for 1,000 (median of 20)."
        )


if __name__ == "__main__":
    app.run(main)
