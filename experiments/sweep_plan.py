"""What a sweep runs: the `--sweep` grammar (a list of gin values, or a range to draw from) and
the trials of a grid or a random sweep, named readably and as the runs' HParams name them."""

import ast
import dataclasses
import hashlib
import itertools
import math
import re
from collections.abc import Sequence

import numpy as np

from experiments import RunError

_DISTRIBUTIONS = ("uniform", "loguniform", "randint")


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One `--sweep` flag: a gin binding key and its values (a list) or a range."""

    key: str  # e.g. 'optimizers.Adam.learning_rate' or 'actor/optimizers.Adam.learning_rate'
    values: tuple[str, ...] = ()  # gin texts, for a list
    distribution: str | None = None  # for a range: one of _DISTRIBUTIONS
    low: float = 0.0
    high: float = 0.0
    hparam: str = ""  # its name in the runs' HParams sessions (`hparam_names`)

    def sample(self, rng: np.random.Generator) -> str:
        """One value's gin text, drawn for a random sweep."""
        if self.distribution is None:
            return self.values[int(rng.integers(len(self.values)))]
        if self.distribution == "randint":
            return str(int(rng.integers(int(self.low), int(self.high))))
        if self.distribution == "loguniform":
            return repr(float(math.exp(rng.uniform(math.log(self.low), math.log(self.high)))))
        return repr(float(rng.uniform(self.low, self.high)))

    def search_space(self):
        """The Optuna distribution of the values: a list is a categorical choice of its gin
        texts; `randint(a, b)` the integers a..b-1."""
        from optuna import distributions

        if self.distribution is None:
            return distributions.CategoricalDistribution(self.values)
        if self.distribution == "randint":
            return distributions.IntDistribution(int(self.low), int(self.high) - 1)
        log = self.distribution == "loguniform"
        return distributions.FloatDistribution(self.low, self.high, log=log)

    def text(self, value: str | int | float) -> str:
        """The gin text of a value Optuna suggested from `search_space`."""
        if self.distribution is None:
            return str(value)
        if self.distribution == "randint":
            return str(int(value))
        return repr(float(value))

    def domain(self) -> dict:
        """The HParams domain of the values, as JSON: {"discrete": [...]} or {"interval": ...}."""
        if self.distribution == "randint":
            return {"type": "int", "min": int(self.low), "max": int(self.high) - 1}
        if self.distribution is not None:
            return {"type": "real", "min": float(self.low), "max": float(self.high)}
        return {"type": "discrete", "values": coerce_all([plain_value(v) for v in self.values])}


def plain_value(text: str) -> bool | int | float | str:
    """A gin value's text as a plain HParams value: numbers, booleans and strings as themselves,
    anything else (a tuple, a reference, a macro) as its text."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text.strip()
    if isinstance(value, bool | int | float | str):
        return value
    return str(value)


def coerce_all(values: list) -> list:
    """One type for a whole domain (HParams requires it): ints with floats become floats; any
    other mix becomes strings."""
    kinds = {type(v) for v in values}
    if kinds <= {int, float} and len(kinds) == 2:
        return [float(v) for v in values]
    if len(kinds) > 1:
        return [str(v) for v in values]
    return list(values)


def usage_error(message: str) -> RunError:
    """A bad flag of the sweep, as one paragraph."""
    return RunError(" ".join(message.split()))


def parse_parameter(spec: str) -> Parameter:
    """`key=[v1, v2, ...]`, `key=uniform(a, b)`, `key=loguniform(a, b)` or `key=randint(a, b)`."""
    key, equals, text = spec.partition("=")
    key, text = key.strip(), text.strip()
    if not equals or not re.fullmatch(r"[\w./]+", key) or not text:
        raise usage_error(
            f"--sweep={spec!r} is not 'binding=values'. Write a gin binding key and a list or a "
            "range, e.g. --sweep='optimizers.Adam.learning_rate=[1e-3, 3e-4]' or "
            "--sweep='optimizers.Adam.learning_rate=loguniform(1e-4, 1e-2)'."
        )
    match = re.fullmatch(r"(\w+)\((.*)\)", text)
    if match and match.group(1) not in _DISTRIBUTIONS:
        raise usage_error(
            f"--sweep={spec!r}: {match.group(1)!r} is not a distribution this sweep knows; "
            f"give one of {', '.join(d + '(low, high)' for d in _DISTRIBUTIONS)}, or a list "
            "[a, b, ...] of choices."
        )
    if match:
        name = match.group(1)
        try:
            low, high = (float(ast.literal_eval(part)) for part in match.group(2).split(","))
        except (ValueError, SyntaxError, TypeError):
            low = high = float("nan")
        valid = low < high and (name != "loguniform" or low > 0)
        if name == "randint":
            valid = valid and low == int(low) and high == int(high)
        if not valid:
            raise usage_error(
                f"--sweep={spec!r}: {name} needs two numbers low < high"
                f"{' (both > 0)' if name == 'loguniform' else ''}"
                f"{' (integers; high is excluded)' if name == 'randint' else ''}."
            )
        return Parameter(key, distribution=name, low=low, high=high)
    if not (text.startswith("[") and text.endswith("]")):
        raise usage_error(
            f"--sweep={spec!r}: the values must be a list [a, b, ...] or one of "
            f"{', '.join(d + '(low, high)' for d in _DISTRIBUTIONS)}."
        )
    values = tuple(_split_top_level(text[1:-1]))
    if not values or len(set(values)) != len(values):
        raise usage_error(f"--sweep={spec!r}: the list must hold distinct values, at least one.")
    return Parameter(key, values=values)


def _split_top_level(text: str) -> list[str]:
    """Splits at the commas outside brackets and quotes: '(5, 5), (8, 8)' -> two values."""
    parts, depth, quote, current = [], 0, None, ""
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        current += char
    if current.strip():
        parts.append(current.strip())
    return parts


@dataclasses.dataclass(frozen=True)
class Trial:
    name: str  # readable, from the bindings; the seeds of a trial share it
    texts: tuple[str, ...]  # the gin text of each parameter's value, in parameter order


def plan(
    parameters: Sequence[Parameter], num_trials: int | None, sweep_seed: int, config_name: str
) -> list[Trial]:
    """The grid (the product of the lists), or `num_trials` random draws."""
    if num_trials is None:
        ranges = [p.key for p in parameters if p.distribution is not None]
        if ranges:
            raise usage_error(
                f"{', '.join(ranges)} {'is a range' if len(ranges) == 1 else 'are ranges'}: a "
                "range is sampled, so give --num_trials=N for a random sweep, or a list."
            )
        combos = list(itertools.product(*(p.values for p in parameters)))
        prefix = ""
    else:
        rng = np.random.default_rng(sweep_seed)
        combos = [tuple(p.sample(rng) for p in parameters) for _ in range(num_trials)]
        prefix = _numbered(num_trials)
    trials, seen = [], set()
    for index, texts in enumerate(combos):
        name = _trial_name(parameters, texts, prefix.format(index)) or _safe_name(config_name)
        if name in seen:
            name = _safe_name(f"trial{index},{name}")
        seen.add(name)
        trials.append(Trial(name, texts))
    return trials


def search_trial_name(parameters: Sequence[Parameter], number: int, num_trials: int, texts) -> str:
    """An adaptive search's trial `number`, named as a random sweep's: 'trial03,lr=0.0012'."""
    return _trial_name(parameters, texts, _numbered(num_trials).format(number))


def values_name(parameters: Sequence[Parameter], texts: Sequence[str]) -> str:
    """A trial named by its values alone: 'lr=0.0012,period=128'."""
    return _trial_name(parameters, texts, "")


def _numbered(num_trials: int) -> str:
    return f"trial{{:0{len(str(num_trials - 1))}d}}"


def _trial_name(parameters: Sequence[Parameter], texts: Sequence[str], prefix: str) -> str:
    parts = [prefix] if prefix else []
    labels = _short_labels([p.key for p in parameters])
    for label, parameter, text in zip(labels, parameters, texts, strict=True):
        parts.append(f"{label}={_value_label(parameter, text)}")
    return _safe_name(",".join(parts)) if parts else ""


def _short_labels(keys: Sequence[str]) -> list[str]:
    """The shortest unique tail of each key: 'learning_rate', else 'Adam.learning_rate', ..."""
    pieces = [re.split(r"[./]", key) for key in keys]
    for length in range(1, max((len(p) for p in pieces), default=1) + 1):
        labels = [".".join(p[-length:]) for p in pieces]
        if len(set(labels)) == len(labels):
            return labels
    return [key.replace("/", ".") for key in keys]


def _value_label(parameter: Parameter, text: str) -> str:
    if parameter.distribution in ("uniform", "loguniform"):
        return f"{float(text):.4g}"
    return text.replace(" ", "").strip("'\"")


def _safe_name(name: str) -> str:
    """A folder name: no separators, spaces or quotes; long names end in a short hash."""
    name = re.sub(r"[^\w.=,+\-@()]", "_", name.replace("/", "-"))
    if len(name) > 150:
        name = name[:140] + "-" + hashlib.sha1(name.encode()).hexdigest()[:8]
    return name


def hparam_names(gin_files: Sequence[str], keys: Sequence[str]) -> dict[str, str]:
    """The name each swept binding has in the runs' own HParams sessions, asked of the code that
    names them (`framework.config.bound_hyperparameters`): the config is parsed with a probe value
    bound to the key, and the entry holding the probe is its name. A key that does not parse
    (a typo: every run then fails with gin's message) keeps its own text. The parse logs
    nothing: the driver's first line named the probe ("... = '__sweep_probe__' (--gin_bindings)
    overrides 0.001"), a value no run has."""
    import gin
    from absl import logging

    import agents  # noqa: F401  (registers the agents' configurables)
    import framework.runner  # noqa: F401  (and the Runner's)
    from framework import config

    probe = "__sweep_probe__"
    names = {}
    absl_logger = logging.get_absl_logger()
    level = absl_logger.level  # NOTSET stays NOTSET: the process's own logging decides
    for key in keys:
        gin.clear_config()
        logging.set_verbosity(logging.WARNING)  # an override of the key's value is the probe's
        try:
            config.parse(gin_files, [f"{key} = {probe!r}"])
            found = [n for n, v in config.bound_hyperparameters().items() if v == probe]
        except (ValueError, ImportError, TypeError):
            found = []
        finally:
            absl_logger.setLevel(level)
        names[key] = found[0] if len(found) == 1 else key
    gin.clear_config()
    return names


def spec_text(parameter: Parameter) -> str:
    if parameter.distribution is None:
        return f"{parameter.key}=[{', '.join(parameter.values)}]"
    low, high = parameter.low, parameter.high
    if parameter.distribution == "randint":
        low, high = int(low), int(high)
    return f"{parameter.key}={parameter.distribution}({low!r}, {high!r})"
