"""A policy as a TensorFlow SavedModel that TensorFlow alone can load and call.

The SavedModel has one serving signature, `action`: `observation [N, *obs_shape]` (the
environment's own observations, as `Policy.act` takes them) to `action [N, *action_shape]`
and what else the agent's policy has (`q_values`, `logits`, `value`), the observation
normalisation included with the run's statistics. `assets.extra/policy.json` says what the
observation is (the environment, its wrappers), which checkpoint it came from, and how to call
it. Written with Keras's `ExportArchive`, which tracks a Keras 3 model's variables.
"""

import json
import os
import shutil
import tempfile
import time
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from framework import env_state
from framework.policy import Policy
from framework.storage import file_names

SIGNATURE = "action"
DESCRIPTION = os.path.join("assets.extra", "policy.json")


class ExportError(ValueError):
    """The policy cannot be exported there; the message says why and what to do."""


def _networks(state: Any) -> list[keras.Model]:
    """The Keras models in a (nested) policy state."""
    if isinstance(state, keras.Model):
        return [state]
    if isinstance(state, dict):
        return [model for value in state.values() for model in _networks(value)]
    if isinstance(state, list | tuple):
        return [model for value in state for model in _networks(value)]
    return []


def _normalized(policy: Policy, observations: tf.Tensor) -> tf.Tensor:
    """What `Policy.act` does first, as TensorFlow ops in the dtype numpy computes it in (the
    statistics' and the observations'), then float32 and the clip: the network sees the same
    numbers."""
    normalize = policy.normalize
    if normalize is None:
        return observations
    mean, var = np.asarray(normalize.statistics.mean), np.asarray(normalize.statistics.var)
    dtype = np.result_type(policy.observation_space.dtype, mean.dtype, var.dtype)
    std = np.sqrt(var + normalize.epsilon)  # as numpy computes it, in var's dtype
    scaled = (tf.cast(observations, dtype) - tf.constant(mean, dtype)) / tf.constant(std, dtype)
    return tf.clip_by_value(tf.cast(scaled, tf.float32), -normalize.clip, normalize.clip)


def describe(policy: Policy, run_dir: str) -> dict[str, Any]:
    """What the export's signature takes and gives, and where it came from."""
    space, action_space = policy.observation_space, policy.action_space
    chain = env_state.wrapper_chain(policy.env)
    if policy.normalize is not None:  # what it takes: the observations before normalisation
        chain = env_state.wrapper_chain(policy.normalize.raw_env)
    layers = [type(layer).__name__ for layer in chain]
    return {
        "signature": SIGNATURE,
        "call": "tf.saved_model.load(path).signatures['action'](observation=batch)",
        "observation": {
            "shape": [None, *space.shape],
            "dtype": str(space.dtype),
            "what": "the environment's observations, as these layers (outermost first) "
            f"give them: {' > '.join(layers)}"
            + ("; normalised inside, with the run's statistics" if policy.normalize else ""),
        },
        "action": {"space": str(action_space), "dtype": str(_action_dtype(action_space))},
        "agent": type(policy.agent).__name__,
        "run": os.path.abspath(run_dir),
        "checkpoint": f"the best evaluation's snapshot, of step {policy.step}"
        if policy.source == "best"
        else f"the checkpoint of step {policy.step}",
        "step": policy.step,
        "eval_return": policy.eval_return,
        "deterministic": "the evaluation policy without exploration (DQN's eval_epsilon not "
        "included)",
    }


def _action_dtype(space: Any) -> np.dtype:
    return np.dtype(np.int64) if np.issubdtype(space.dtype, np.integer) else np.dtype(space.dtype)


def export(policy: Policy, run_dir: str, directory: str) -> dict[str, Any]:
    """Writes `policy` as a SavedModel into `directory`, which must not exist or be empty;
    returns its description. Written beside it first and renamed into place once complete."""
    if os.path.exists(directory) and (not os.path.isdir(directory) or os.listdir(directory)):
        raise ExportError(
            f"--out {directory!r} already exists and is not an empty folder; nothing was "
            "written. Choose a new folder (an export never overwrites one)."
        )
    space = policy.observation_space
    archive = keras.export.ExportArchive()
    for network in _networks(policy.agent.policy_state()):
        archive.track(network)

    def action(observation: tf.Tensor) -> dict[str, tf.Tensor]:
        return policy.agent.policy_outputs(_normalized(policy, observation))

    spec = tf.TensorSpec([None, *space.shape], tf.as_dtype(space.dtype), name="observation")
    archive.add_endpoint(SIGNATURE, action, input_signature=[spec])
    parent = os.path.dirname(os.path.abspath(directory))
    os.makedirs(parent, exist_ok=True)
    temporary = tempfile.mkdtemp(prefix=".export-", dir=parent)
    try:
        archive.write_out(temporary, verbose=False)
        description = describe(policy, run_dir)
        os.makedirs(os.path.join(temporary, os.path.dirname(DESCRIPTION)))
        with open(os.path.join(temporary, DESCRIPTION), "w") as f:
            json.dump(description, f, indent=2)
        if os.path.isdir(directory):
            os.rmdir(directory)  # empty, checked above
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o777 & ~umask)  # mkdtemp's 0700 would hide it from a server
        os.replace(temporary, directory)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return description


def call_latency(directory: str, space: Any, batches: tuple[int, ...] = (1, 1000)) -> dict:
    """Loads the export back, as a user would, and times its signature: the median of 20
    calls at each batch size of observations drawn from `space`, in seconds."""
    with file_names.tensorflow_readable_folder(directory) as readable:
        signature = tf.saved_model.load(readable).signatures[SIGNATURE]
    space.seed(0)
    latency = {}
    for batch in batches:
        observations = tf.constant(np.stack([space.sample() for _ in range(batch)]))
        signature(observation=observations)  # the first call builds what later ones reuse
        times = []
        for _ in range(20):
            start = time.perf_counter()
            signature(observation=observations)["action"].numpy()
            times.append(time.perf_counter() - start)
        latency[batch] = float(np.median(times))
    return latency
