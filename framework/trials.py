"""What makes two runs one trial: the same operative config, but for the seed and the cadences
that only decide when things are looked at or written (logging, histograms, checkpoints,
evaluation). The run folder is not part of a config, so it never counts either.

Analysis groups runs by it, a run's HParams session is named after it (so the dashboard groups
the seeds of one trial and nothing else), and a sweep records it for each run. It is read from
the operative config as text, so a run written before it was recorded gets the same key from
its config.gin.
"""

import dataclasses
import hashlib

from framework import config_sources

# Bindings that never change what is learned: the seed and when things are looked at or saved.
SEED_AND_CADENCES = frozenset(
    {
        "Runner.seed",
        "Runner.eval_interval",
        "Runner.log_interval",
        "Runner.histogram_interval",
        "Runner.checkpoint_interval",
        "Runner.max_checkpoints_to_keep",
    }
)


@dataclasses.dataclass(frozen=True)
class Trial:
    """A config's trial: `key` names it; `bindings` are what it is made of."""

    key: str  # the first 12 hex digits of the sha256 of the bindings, one per line, sorted
    bindings: dict[str, str]  # "scope/Name.parameter" -> its value as gin text


def trial_of(operative_config: str) -> Trial:
    """The trial of a run whose operative config (gin's text, e.g. config.gin) is given."""
    statements = config_sources.statements(operative_config, "an operative config")
    bindings = {
        name: value
        for name, value in sorted(
            (config_sources.binding_name(key), value) for key, value in statements.items()
        )
        if name not in SEED_AND_CADENCES
    }
    text = "\n".join(f"{name} = {value}" for name, value in bindings.items())
    return Trial(hashlib.sha256(text.encode()).hexdigest()[:12], bindings)


def differences(trials: list[Trial]) -> list[str]:
    """The binding names whose values differ between `trials` (what tells them apart)."""
    names = set().union(*(trial.bindings for trial in trials))
    return sorted(name for name in names if len({trial.bindings.get(name) for trial in trials}) > 1)
