"""What makes two runs one trial: the same operative config, but for the seed and the cadences
that only decide when things are looked at or written (logging, histograms, checkpoints,
evaluation). The run folder is not part of a config, so it never counts either.

Analysis groups runs by it, a run's HParams session group is its key (so the dashboard groups
the seeds of one trial and nothing else), and a sweep records it for each run. It is read from
the operative config as text, so a run written before it was recorded gets its key from its
config.gin. The text is made canonical first, so that the key means the config, not how gin
happened to print it: a binding equal to its parameter's current default is left out (a
parameter added to the code later does not split old runs from new ones), and configurables
and references are named by their full selector (`@NormalizeObservation` and
`@wrappers.NormalizeObservation` are one part). Configurables this process has not registered
keep their text.
"""

import dataclasses
import hashlib
import inspect
import os
import re

import gin

from framework import config_sources

# (configurable, parameter) pairs that never change what is learned: the seed, when things are
# looked at or saved, and how many threads compute it (the last bits of some sums, not the
# algorithm: runs of one config alone and side by side are seeds of one trial).
SEED_AND_CADENCES = frozenset(
    ("Runner", parameter)
    for parameter in (
        "seed",
        "eval_interval",
        "log_interval",
        "histogram_interval",
        "checkpoint_interval",
        "max_checkpoints_to_keep",
    )
) | {("tf_threads", "intra_op"), ("tf_threads", "inter_op")}
_REFERENCE = re.compile(r"@([\w.]+)")


@dataclasses.dataclass(frozen=True)
class Trial:
    """A config's trial: `key` names it; `bindings` are what it is made of."""

    key: str  # the first 12 hex digits of the sha256 of the canonical bindings, sorted
    bindings: dict[str, str]  # "scope/Name.parameter" as the config prints it -> value text


def trial_of(operative_config: str) -> Trial:
    """The trial of a run whose operative config (gin's text, e.g. config.gin) is given."""
    statements = config_sources.statements(operative_config, "an operative config")
    canonical, shown = {}, {}
    for (scope, selector, parameter), value in statements.items():
        configurable = _registered(selector)
        if (selector.rsplit(".", 1)[-1], parameter) in SEED_AND_CADENCES:
            continue
        if configurable is not None and _is_default(configurable, parameter, value):
            continue
        full = configurable.selector if configurable is not None else selector
        key = config_sources.binding_name((scope, full, parameter))
        canonical[key] = _REFERENCE.sub(_full_reference, value)
        shown[config_sources.binding_name((scope, selector, parameter))] = value
    text = "\n".join(f"{name} = {value}" for name, value in sorted(canonical.items()))
    return Trial(hashlib.sha256(text.encode()).hexdigest()[:12], dict(sorted(shown.items())))


def readable_name(folder: str) -> str:
    """A trial's name for people, from one of its run folders: the folder's name without its
    seed and the time stamp of a default folder (`runs/dqn_cartpole_seed3_20261125-120000-000001`
    -> `dqn_cartpole`; a sweep's `lr=0.01_seed2` -> `lr=0.01`). The key names the trial for the
    code: seeds of one trial in folders named otherwise share the key, not this."""
    name = os.path.basename(os.path.normpath(folder))
    name = re.sub(r"_\d{8}-\d{6}(-\d+)?$", "", name)
    return re.sub(r"_seed\d+(?=_|$)", "", name) or name


def is_seed_or_cadence(name: str) -> bool:
    """Whether a binding named as `config.gin` names it (`scope/Runner.eval_interval`) is the
    seed or a cadence: not part of what makes a trial."""
    configurable, _, parameter = name.rpartition("/")[2].rpartition(".")
    return (configurable.rsplit(".", 1)[-1], parameter) in SEED_AND_CADENCES


def differences(trials: list[Trial]) -> list[str]:
    """The binding names whose values differ between `trials` (what tells them apart)."""
    names = set().union(*(trial.bindings for trial in trials))
    return sorted(name for name in names if len({trial.bindings.get(name) for trial in trials}) > 1)


def _registered(selector: str):
    try:
        return gin.config._REGISTRY.get_match(selector)  # no public lookup exists
    except ValueError:  # ambiguous: keep the text
        return None


def _full_reference(match: re.Match) -> str:
    configurable = _registered(match.group(1))
    return f"@{configurable.selector}" if configurable is not None else match.group(0)


def _is_default(configurable, parameter: str, value: str) -> bool:
    """Whether `value` (gin text, as `config_sources` reads it) is the parameter's default."""
    function = configurable.wrapped
    function = function.__init__ if inspect.isclass(function) else function
    try:
        default = inspect.signature(function).parameters[parameter].default
    except (KeyError, ValueError, TypeError):
        return False
    return default is not inspect.Parameter.empty and repr(default) == value
