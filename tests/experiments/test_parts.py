"""The parts catalogue (experiments/parts.py): complete for the shipped configs, right defaults,
only what gin lets a config bind, and a clear error for an unknown name."""

import pathlib
import re
import subprocess
import sys

import gin
import pytest

from experiments import parts
from framework import config

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
GIN_FILES = sorted(
    str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "gin_configs").rglob("*.gin")
)


@pytest.fixture(scope="module")
def listing() -> str:
    return parts.catalogue()


def sections(text: str) -> dict[str, list[str]]:
    """Kind title -> the part names listed under it."""
    found: dict[str, list[str]] = {}
    title = None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            title = line
            found.setdefault(title, [])
        elif match := re.match(r"^  (\S+) - ", line):
            found[title].append(match.group(1))
    return found


def block(text: str, name: str) -> list[str]:
    """The lines of one part's entry in the listing: its name line and its parameter lines."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {name} - "))
    end = start + 1
    while end < len(lines) and lines[end].startswith("    "):
        end += 1
    return lines[start:end]


def referenced(value) -> set[str]:
    """Complete selectors of every `@reference` in a binding's value, nested ones included."""
    if isinstance(value, gin.config.ConfigurableReference):
        return {value.configurable.selector}
    if isinstance(value, list | tuple | set):
        return set().union(*(referenced(item) for item in value))
    if isinstance(value, dict):
        return set().union(*(referenced(item) for item in [*value, *value.values()]))
    return set()


def bound_selectors(gin_file: str) -> set[str]:
    """Every configurable a gin file binds or references (macros, gin's own, left out)."""
    gin.clear_config()
    config.parse([gin_file], [])  # registers nothing new, builds nothing
    selectors = set()
    for (_, selector), bindings in gin.config._CONFIG.items():  # no public listing exists
        selectors.add(selector)
        for value in bindings.values():
            selectors |= referenced(value)
    registry = gin.config._REGISTRY
    return {s for s in selectors if registry[s].module != "gin"}


def test_there_are_shipped_configs():
    assert "gin_configs/dqn/cartpole.gin" in GIN_FILES and len(GIN_FILES) >= 5


@pytest.mark.parametrize("gin_file", GIN_FILES)
def test_every_part_of_a_shipped_config_is_listed_under_its_kind(gin_file, listing):
    listed = sections(listing)
    selectors = bound_selectors(gin_file)
    assert selectors, f"{gin_file} binds nothing?"
    for selector in selectors:
        part = parts.find(selector)
        title = parts.kind_title(part.kind)
        assert part.name in listed.get(title, []), f"{selector} ({gin_file}) not under {title}"


@pytest.mark.parametrize(
    ("name", "title"),
    [
        ("DQNAgent", "Agents"),
        ("ReinforceAgent", "Agents"),
        ("networks.mlp", "Networks"),
        ("TDHuberLoss", "Losses"),
        ("DoubleQLearningTarget", "Targets"),
        ("HardUpdate", "Target updaters"),
        ("ClipByGlobalNorm", "Gradient processors"),
        ("optimizers.Adam", "Optimizers and schedules"),
        ("optimizers.ExponentialDecay", "Optimizers and schedules"),
        ("UniformReplay", "Replay"),
        ("LinearSchedule", "Exploration"),
        ("make_env", "Environments"),
        ("NormalizeObservation", "Environment wrappers (make_env.wrappers)"),
        ("wrappers.ClipAction", "Environment wrappers (make_env.wrappers)"),
        ("Runner", "Runner"),
        ("AsynchronousDriver", "Drivers (Runner.driver) and where asynchronous workers run"),
        ("RoundRobin", "Drivers (Runner.driver) and where asynchronous workers run"),
        ("Learner", "Other"),
    ],
)
def test_parts_are_grouped_by_kind(name, title, listing):
    assert parts.find(name).name in sections(listing)[title]


def test_every_registered_part_is_listed_once_and_gin_builtins_are_not(listing):
    names = [name for listed in sections(listing).values() for name in listed]
    assert len(names) == len(set(names))
    registry = gin.config._REGISTRY
    expected = {
        registry.minimal_selector(selector)
        for selector, configurable in registry._selector_map.items()
        if configurable.module != "gin"
    }
    assert set(names) == expected
    assert "macro" not in names and "constant" not in names


def test_listing_shows_defaults_and_first_doc_line_in_short_lines(listing):
    assert max(len(line) for line in listing.splitlines()) <= parts.WIDTH
    mlp = " ".join(block(listing, "mlp"))
    assert "A dense torso and a linear head" in mlp
    assert "hidden_units=(64, 64)" in mlp and "input_shape=REQUIRED" in mlp
    adam = " ".join(block(listing, "Adam"))  # Keras: every parameter, wrapped
    for shown in ("learning_rate=0.001", "beta_1=0.9", "epsilon=1e-07", "use_ema=False"):
        assert shown in adam
    runner = " ".join(block(listing, "Runner"))
    assert "agent=REQUIRED" in runner and "base_dir" not in runner


# DQNAgent's default schedule, as `describe` shows it.
DQN_SCHEDULE = "ReplaySchedule(learning_starts=1000, train_freq=4, gradient_steps=1, batch_size=64)"


def defaults(name: str) -> dict[str, str]:
    return {p.name: p.default for p in parts.find(name).parameters}


def test_a_part_in_full_shows_its_parameters_with_the_right_defaults():
    text = parts.describe("DQNAgent")
    assert f"\n  schedule: ReplaySchedule = {DQN_SCHEDULE}\n" in text
    assert re.search(r"^  network: .* = @mlp$", text, re.M)
    assert re.search(r"^  DQNAgent.\w+ = \S", text, re.M)  # the example binding
    assert "gin names: DQNAgent, agents.dqn.DQNAgent" in text
    assert defaults("DQNAgent")["schedule"] == DQN_SCHEDULE
    assert defaults("ReplaySchedule")["batch_size"] == "REQUIRED"
    assert defaults("DQNAgent")["gamma"] == "0.99"

    mlp = parts.describe("networks.mlp")
    assert re.search(r"^  hidden_units: Sequence\[int\] = \(64, 64\)$", mlp, re.M)
    assert "gin names: mlp, networks.mlp, framework.parts.networks.mlp" in mlp
    assert "`uniform_initial_output` zeroes the output kernel" in mlp  # the full docstring
    assert defaults("networks.mlp")["hidden_units"] == "(64, 64)"
    assert defaults("networks.mlp")["input_shape"] == "REQUIRED"

    assert defaults("Runner")["agent"] == "REQUIRED"  # gin.REQUIRED
    assert defaults("Runner")["env_factory"] == "@make_env"
    assert defaults("optimizers.ExponentialDecay")["decay_rate"] == "REQUIRED"  # no default
    assert defaults("optimizers.ExponentialDecay")["decay_steps"] == "None"  # the run's length
    assert defaults("Adam")["learning_rate"] == "0.001"
    assert "gin names: Adam, optimizers.Adam" in parts.describe("Adam")


def test_only_what_gin_lets_a_config_bind_is_shown():
    learner = parts.find("Learner").parameters  # the allowlist
    assert [p.name for p in learner] == ["jit_compile", "direct_call"]
    shown = parts.describe("Learner").split("\nParameters ")[1].split("\n\n")[0]
    assert re.findall(r"^  (\w+)(?::[^=\n]*)? = ", shown, re.M) == ["jit_compile", "direct_call"]
    assert "base_dir" not in defaults("Runner")  # denylist
    for agent in ("DQNAgent", "ReinforceAgent"):  # the runner passes these
        assert not {"observation_space", "action_space", "seed"} & set(defaults(agent))
        assert "Given by the runner, not by a config: observation_space, action_space, seed." in (
            parts.describe(agent)
        )


def test_names_resolve_as_in_a_config():
    assert parts.describe("@optimizers.Adam()") == parts.describe("Adam")
    assert parts.find("dqnagent").name == "DQNAgent"  # case-insensitive as a last resort
    assert parts.find("framework.parts.networks.mlp").name == "mlp"


def test_example_bindings_parse():
    for part in parts.all_parts():
        example = parts._example(part)
        if example and "<value>" not in example:
            gin.clear_config()
            gin.parse_config(example)


def test_an_unknown_name_fails_with_close_matches():
    with pytest.raises(parts.UnknownPartError, match=r"No part named 'DQNAgnet'\. Did you mean "):
        parts.find("DQNAgnet")
    with pytest.raises(parts.UnknownPartError, match="'mlp'"):
        parts.find("networks.mpl")


def test_command_line():
    def start(*args):
        return subprocess.Popen(
            [sys.executable, "-m", "experiments.parts", *args],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    known, unknown = start("DQNAgent"), start("DQNAgnet")  # both at once: ~4 s of imports each
    out, err = known.communicate(timeout=240)
    assert known.returncode == 0, err
    assert out.startswith("DQNAgent  (agents)\n")
    assert f"\n  schedule: ReplaySchedule = {DQN_SCHEDULE}\n" in out
    assert err == ""  # no TensorFlow start-up noise
    out, err = unknown.communicate(timeout=240)
    assert unknown.returncode == 1 and out == ""
    assert err.startswith("experiments.parts: error: No part named 'DQNAgnet'. Did you mean ")
    assert "'DQNAgent'" in err
    assert err.count("\n") == 1  # one paragraph


def summary_in(text: str, name: str) -> str:
    """A part's summary as the listing shows it: its name line and continuation lines joined."""
    lines = block(text, name)
    shown = [lines[0], *(line for line in lines[1:] if not line.startswith(" " * 6))]
    return " ".join(line.strip() for line in shown).split(" - ", 1)[1]


def test_every_part_is_summed_up_by_the_whole_first_sentence_of_its_docstring(listing):
    for part in parts.all_parts():
        if part.source.startswith("tests."):  # a test's own stand-in, registered on import
            continue
        assert part.doc, f"{part.name} ({part.source}) has no docstring"
        assert part.summary.endswith("."), f"{part.name}: {part.summary!r} is cut"
        assert summary_in(listing, part.name) == part.summary


def test_a_summary_is_the_first_sentence_of_the_first_paragraph():
    doc = "Does x (Smith et al., 2015) over\n    y, e.g. z. Then more.\n\nDetails."
    assert parts.first_sentence(doc) == "Does x (Smith et al., 2015) over y, e.g. z."
    assert parts.first_sentence("Returns, cut at dones:\n\n    G = r + g G'") == (
        "Returns, cut at dones."
    )
    assert parts.first_sentence("`f(x)` for\n  `x.y`") == "`f(x)` for `x.y`"
