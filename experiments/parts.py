"""The parts catalogue: every gin configurable a config can bind, by kind.

  python -m experiments.parts                 # every part: parameters, defaults, first sentence
  python -m experiments.parts DQNAgent        # one part in full (also networks.mlp, Adam, ...)
  python -m experiments.parts --gin_file=my_config.gin            # your parts first, then all
  python -m experiments.parts --gin_file=my_config.gin MyLoss     # one of yours in full

A part is listed with the parameters gin lets a config bind (a configurable's allowlist and
denylist are respected; an agent's observation_space, action_space and seed come from the
runner). REQUIRED marks a parameter without a default: a config binds it, unless the part's
caller passes it (an agent gives its network input_shape and num_outputs).
With `--gin_file`, the modules the gin files import (`import my_parts`, found beside the file
as when training) are imported first, and their parts are listed under "Your parts".
From Python: `catalogue()` and `describe(name)` return the same text; pass them
`yours=import_gin_files(gin_files)` for your parts.
"""

import ast
import dataclasses
import difflib
import inspect
import re
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from absl import app

from experiments import quiet

WIDTH = 100
# Kinds in the order they are listed. A new module under framework/parts gets its own kind
# (listed after these, before "other") without a change here.
KINDS = {
    "agents": "Agents",
    "networks": "Networks",
    "losses": "Losses",
    "policy_losses": "Policy losses (PPO's clipped surrogate, value and entropy terms)",
    "distributions": "Action distributions (stochastic policies)",
    "minibatches": "Minibatches (epochs over an on-policy rollout)",
    "targets": "Targets",
    "target_updaters": "Target updaters",
    "gradient_processors": "Gradient processors",
    "optimizers": "Optimizers and schedules",
    "replay": "Replay",
    "replay_schedule": "Replay schedules (when DQN, DDPG/TD3 and SAC train)",
    "exploration": "Exploration",
    "squashed_gaussian": "Action distributions: the squashed Gaussian (SAC's policy)",
    "environments": "Environments",
    "wrappers": "Environment wrappers (make_env.wrappers)",
    "runner": "Runner",
    "drivers": "Drivers (Runner.driver) and where asynchronous workers run",
}
OTHER = "other"
YOURS = "yours"  # parts of the modules a gin file imports
_GIN_BUILTINS = "gin"  # gin.constant, gin.macro, gin.singleton: gin's own, not parts


class UnknownPartError(LookupError):
    """No single part has the name asked for; the message is one paragraph with close matches."""


@dataclasses.dataclass
class Parameter:
    name: str
    default: str  # as a config would write it; "REQUIRED" for gin.REQUIRED or no default
    annotation: str  # as written in the source; "" when none
    literal: bool  # the default is a gin literal (a number, string, tuple, ...)


@dataclasses.dataclass
class Part:
    selector: str  # gin's complete selector, e.g. 'framework.parts.networks.mlp'
    name: str  # the shortest name that selects it, e.g. 'mlp'
    names: list[str]  # names a config may write, shortest first
    kind: str  # a key of KINDS, a framework/parts module name, or OTHER
    source: str  # where it is defined, e.g. 'keras.src.optimizers.adam.Adam'
    doc: str  # its full docstring; "" when it has none
    parameters: list[Parameter]
    from_caller: list[str]  # parameters its caller always passes (an agent's spaces and seed)

    @property
    def summary(self) -> str:
        return first_sentence(self.doc) if self.doc else "(no docstring)"


# A full stop that ends no sentence: an abbreviation's.
_ABBREVIATIONS = ("e.g.", "i.e.", "et al.", "cf.", "vs.", "etc.")


def first_sentence(doc: str) -> str:
    """The first sentence of a docstring's first paragraph, its lines joined (a colon that
    introduces a formula or a list ends it); the whole paragraph if no full stop ends one."""
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    for end in re.finditer(r"[.!?](?=\s|$)", paragraph):
        sentence = paragraph[: end.end()]
        if not sentence.endswith(_ABBREVIATIONS):
            return sentence
    return paragraph[:-1] + "." if paragraph.endswith(":") else paragraph


def register_parts() -> None:
    """Imports every module whose configurables a config can bind: the agents package (which
    imports each agent) and the runner (which imports the parts, Keras optimizers included)."""
    import agents  # noqa: F401
    import framework.runner  # noqa: F401


def kind_of(module: str) -> str:
    """The kind of a configurable registered under gin module `module`."""
    if module == "agents" or module.startswith("agents."):
        return "agents"
    if module == "framework.runner":
        return "runner"
    if module.startswith("framework.drivers."):
        return "drivers"
    if module == "optimizers":  # Keras optimizers and schedules, registered by hand
        return "optimizers"
    if module == "wrappers":  # gymnasium's wrappers, registered by hand
        return "wrappers"
    if module.startswith("framework.parts."):
        return module.split(".")[2]
    return OTHER


def kind_title(kind: str) -> str:
    if kind == YOURS:
        return "Your parts, from the modules your gin files import"
    return KINDS.get(kind) or kind.replace("_", " ").capitalize()


def import_gin_files(gin_files: Sequence[str]) -> list[str]:
    """Parses `gin_files` as training would (their `import` found beside each file), which
    imports the modules that define your parts; returns those modules. Raises
    `framework.config.ConfigError` for a file that does not parse, ImportError for an `import`
    that finds no module."""
    import gin

    from framework import config

    register_parts()
    gin.clear_config()
    config.parse(list(gin_files), [])
    return config.imported_modules()


def _is_yours(module: str, yours: Sequence[str]) -> bool:
    return any(module == own or module.startswith(own + ".") for own in yours)


def all_parts(yours: Sequence[str] = ()) -> list[Part]:
    """Every registered part, in listing order: yours (the parts of modules `yours`) first,
    then by kind, then by name."""
    import gin

    register_parts()
    every = gin.config._REGISTRY._selector_map.values()  # no public listing exists
    parts = _parts([c for c in every if c.module != _GIN_BUILTINS], yours)
    order = [YOURS, *KINDS, *sorted({p.kind for p in parts} - {*KINDS, OTHER, YOURS}), OTHER]
    return sorted(parts, key=lambda p: (order.index(p.kind), p.name.lower()))


def find(name: str, yours: Sequence[str] = ()) -> Part:
    """The part a config would select with `name` ('DQNAgent', 'networks.mlp', '@Adam()');
    failing that, the one part whose short name matches ignoring case."""
    import gin

    register_parts()
    registry = gin.config._REGISTRY
    cleaned = name.strip().removeprefix("@").removesuffix("()")
    try:
        configurable = registry.get_match(cleaned) if cleaned else None
    except ValueError:  # ambiguous: several parts end in this name
        matches = sorted(registry.minimal_selector(s) for s in registry.matching_selectors(cleaned))
        raise UnknownPartError(
            f"{name!r} names several parts: {', '.join(matches)}. Write one of these names."
        ) from None
    if configurable is not None and configurable.module != _GIN_BUILTINS:
        return _parts([configurable], yours)[0]
    parts = all_parts(yours)
    folded = [p for p in parts if cleaned.lower() in (n.lower() for n in p.names)]
    if len(folded) == 1:
        return folded[0]
    short_name = {n: p.name for p in parts for n in p.names}
    close = difflib.get_close_matches(cleaned, sorted(short_name), n=9, cutoff=0.5)
    close = list(dict.fromkeys(short_name[n] for n in close))[:3]
    hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
    raise UnknownPartError(
        f"No part named {name!r}.{hint} `python -m experiments.parts` lists every part a config "
        "can bind; a part of your own appears once its module is imported: give the gin file "
        "that imports it (`--gin_file=my_config.gin`, whose `import my_parts` line finds "
        "my_parts.py beside it)."
    )


def catalogue(yours: Sequence[str] = ()) -> str:
    """Every part, grouped by kind (the parts of modules `yours` first): name, the first
    sentence of its docstring, parameters with defaults."""
    lines = textwrap.wrap(
        "Parts a gin config can bind, by kind: name, first sentence of its docstring, and the "
        "parameters a config may bind with their defaults. REQUIRED: no default (the config "
        "binds it, unless the part's caller passes it). `python -m experiments.parts NAME` "
        "shows one part in full.",
        WIDTH,
    )
    parts = all_parts(yours)
    if yours and not any(part.kind == YOURS for part in parts):
        lines += ["", kind_title(YOURS)]
        lines += textwrap.wrap(
            f"(none: {', '.join(yours)} register no gin configurable)",
            WIDTH,
            initial_indent="  ",
            subsequent_indent="  ",
        )
    kind = None
    for part in parts:
        if part.kind != kind:
            kind = part.kind
            lines += ["", kind_title(kind)]
        lines += textwrap.wrap(
            f"{part.name} - {part.summary}", WIDTH, initial_indent="  ", subsequent_indent=" " * 4
        )
        shown = [f"{p.name}={_shorten(p.default)}" for p in part.parameters]
        if shown:
            lines += textwrap.wrap(
                ", ".join(shown),
                WIDTH,
                initial_indent=" " * 6,
                subsequent_indent=" " * 6,
                break_long_words=False,
                break_on_hyphens=False,
            )
        else:
            lines.append(" " * 6 + "(no parameters to bind)")
    return "\n".join(lines) + "\n"


def describe(name: str, yours: Sequence[str] = ()) -> str:
    """One part in full: gin names, docstring, every bindable parameter, an example binding."""
    part = find(name, yours)
    lines = [
        f"{part.name}  ({kind_title(part.kind).lower()})",
        f"  gin names: {', '.join(part.names)}",
        f"  defined in: {part.source}",
        "",
        *(part.doc.splitlines() or ["(no docstring)"]),
        "",
    ]
    if part.parameters:
        lines.append(f"Parameters (a config binds them as {part.name}.<parameter>):")
        for parameter in part.parameters:
            annotation = f": {parameter.annotation}" if parameter.annotation else ""
            lines.append(f"  {parameter.name}{annotation} = {parameter.default}")
    else:
        lines.append("Parameters: none to bind.")
    if part.from_caller:
        lines.append(f"  Given by the runner, not by a config: {', '.join(part.from_caller)}.")
    example = _example(part)
    lines += ["", "Example:", f"  {example}"] if example else ["", "Example:"]
    what = "class" if _is_class(part) else "function"
    lines += textwrap.wrap(
        f"Refer to it as @{part.name} (passes the {what} itself) or @{part.name}() (passes "
        "what calling it with its bindings returns).",
        WIDTH,
        initial_indent="  ",
        subsequent_indent="  ",
    )
    return "\n".join(lines) + "\n"


def _parts(configurables: list, yours: Sequence[str] = ()) -> list[Part]:
    import gin

    registry = gin.config._REGISTRY
    by_object = {}  # a default that is a registered part shows as its @reference
    for configurable in registry._selector_map.values():
        by_object[id(configurable.wrapper)] = configurable
        by_object[id(configurable.wrapped)] = configurable
    return [_part(configurable, registry, by_object, yours) for configurable in configurables]


def _part(configurable, registry, by_object: dict[int, Any], yours: Sequence[str]) -> Part:
    from framework.agent import Agent

    wrapped = configurable.wrapped
    signature = inspect.signature(wrapped)
    from_caller = []
    if inspect.isclass(wrapped) and issubclass(wrapped, Agent):
        from_caller = [n for n in inspect.signature(Agent).parameters if n in signature.parameters]
    annotations = _source_annotations(wrapped)
    parameters = []
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if parameter.name in from_caller or not _bindable(configurable, parameter.name):
            continue
        annotation = annotations.get(parameter.name)
        if annotation is None and parameter.annotation is not parameter.empty:
            annotation = inspect.formatannotation(parameter.annotation)
        default, literal = _default(parameter.default, registry, by_object)
        parameters.append(Parameter(parameter.name, default, annotation or "", literal))
    doc = wrapped.__doc__  # not inspect.getdoc: a part without one must not show its base's
    return Part(
        selector=configurable.selector,
        name=registry.minimal_selector(configurable.selector),
        names=_names(configurable, registry),
        kind=YOURS if _is_yours(wrapped.__module__, yours) else kind_of(configurable.module),
        source=f"{wrapped.__module__}.{wrapped.__qualname__}",
        doc=inspect.cleandoc(doc) if doc else "",
        parameters=parameters,
        from_caller=from_caller,
    )


def _bindable(configurable, name: str) -> bool:
    """Whether gin lets a config bind `name` (the checks of gin's ParsedBindingKey.parse)."""
    if configurable.allowlist and name not in configurable.allowlist:
        return False
    return not (configurable.denylist and name in configurable.denylist)


def _names(configurable, registry) -> list[str]:
    """The shortest name, for a framework part the kind-qualified one configs often write
    ('networks.mlp', 'optimizers.Adam'), and the complete selector; the shortest first."""
    selector = configurable.selector
    components = selector.split(".")
    candidates = [registry.minimal_selector(selector)]
    if kind_of(configurable.module) not in ("agents", "runner", OTHER):
        candidates.append(".".join(components[-2:]))
    candidates.append(selector)
    return [n for n in dict.fromkeys(candidates) if _selects(n, selector)]


def _selects(name: str, selector: str) -> bool:
    return selector == name or selector.endswith("." + name)


def _default(value: Any, registry, by_object: dict[int, Any]) -> tuple[str, bool]:
    """`value` as a config would write it, and whether it is a gin literal."""
    import gin

    if value is inspect.Parameter.empty or value is gin.REQUIRED:
        return "REQUIRED", False
    if id(value) in by_object:
        return f"@{registry.minimal_selector(by_object[id(value)].selector)}", False
    if inspect.isclass(value) or inspect.isroutine(value):
        return f"{value.__module__}.{value.__qualname__}", False
    return repr(value), _is_literal(value)


def _is_literal(value: Any) -> bool:
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, list | tuple):
        return all(_is_literal(item) for item in value)
    return False


def _source_annotations(wrapped: Any) -> dict[str, str]:
    """Each parameter's annotation as written in its source ('npt.DTypeLike', not the Union it
    stands for); empty where the source cannot be read."""
    if dataclasses.is_dataclass(wrapped):
        return _field_annotations(wrapped)
    function = inspect.unwrap(wrapped.__init__ if inspect.isclass(wrapped) else wrapped)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return {}
    node = next(
        (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)),
        None,
    )
    if node is None:
        return {}
    arguments = node.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    return {a.arg: ast.unparse(a.annotation) for a in every if a.annotation is not None}


def _field_annotations(cls: type) -> dict[str, str]:
    """A dataclass's field annotations as written in the class bodies, base classes first (its
    generated __init__ has no source)."""
    annotations = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in tree.body[0].body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                annotations[node.target.id] = ast.unparse(node.annotation)
    return annotations


def _shorten(text: str, limit: int = 28) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_class(part: Part) -> bool:
    import gin

    return inspect.isclass(gin.config._REGISTRY[part.selector].wrapped)


def _example(part: Part) -> str | None:
    """A binding a config could copy: the first parameter with a number, string or sequence for
    default (else any literal, else the first REQUIRED one with a placeholder); None when the
    part has no parameter to bind."""
    literals = [p for p in part.parameters if p.literal]
    for parameter in [p for p in literals if p.default not in ("None", "True", "False")] + literals:
        return f"{part.name}.{parameter.name} = {parameter.default}"
    for parameter in part.parameters:
        if parameter.default == "REQUIRED":
            return f"{part.name}.{parameter.name} = <value>"
    return None


def _define_flags() -> None:
    from absl import flags

    flags.DEFINE_multi_string(
        "gin_file", [], "Gin file(s) whose imported modules' parts to list first, as yours."
    )


def main(argv: list[str]) -> None:
    from absl import flags

    from framework.config import ConfigError

    if len(argv) > 2:
        raise app.UsageError(f"Give at most one part name, got {argv[1:]}.")
    quiet.import_tensorflow()  # before anything else imports it: no start-up banners
    register_parts()
    try:
        yours = import_gin_files(flags.FLAGS.gin_file) if flags.FLAGS.gin_file else []
        text = describe(argv[1], yours) if len(argv) == 2 else catalogue(yours)
    except (UnknownPartError, ConfigError, ImportError) as error:  # ImportError: a gin `import`
        print(f"experiments.parts: error: {' '.join(str(error).split())}", file=sys.stderr)
        sys.exit(1)
    sys.stdout.write(text)


def run_main() -> None:
    _define_flags()
    app.run(main)


if __name__ == "__main__":
    run_main()
