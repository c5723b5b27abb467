"""Imports form layers (docs/design.md#layout): framework/ below agents/ below experiments/; inside
framework/, the helpers (with the compiled crossing), the run folder's storage, the Agent
interface, the parts, the learner and the loop, the drivers, and the runner on top; no circle
anywhere; and agents know no files, no seeding and no scheduler. Read from the source, so a new
import is checked too."""

import ast
import pathlib
from collections.abc import Callable

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("framework", "agents", "experiments")

# framework/'s layers, lowest first; a module may import its own layer or the ones below. A
# sub-package sits within one layer, so the folders show the layers.
FRAMEWORK_LAYERS = [
    {  # helpers that know nothing of agents or runs
        "framework",
        "framework.compiled",  # the crossing into TensorFlow, and the XLA cache
        "framework.config",
        "framework.config_sources",
        "framework.console",
        "framework.env_state",
        "framework.processes",
        "framework.seeding",
        "framework.validation",
    },
    {"framework.storage"},  # the run folder: stands on the helpers alone
    {"framework.agent"},
    {"framework.parts"},  # and every framework.parts.* module
    {"framework.learner", "framework.loop", "framework.policy", "framework.export"},
    {"framework.drivers"},  # what the runner drives: they know no files
    {"framework.runner", "framework.callbacks"},  # the scheduler, and the hooks it calls
]
# What an agent may not know: files, configs, seeding, processes, the drivers and the scheduler.
NOT_FOR_AGENTS = {
    "framework.storage.atomic_files",
    "framework.storage.checkpointing",
    "framework.config",
    "framework.drivers",
    "framework.storage.event_reader",
    "framework.processes",
    "framework.storage.progress_csv",
    "framework.storage.run_directory",
    "framework.runner",
    "framework.seeding",
    "framework.storage.summaries",
}


def _module_name(path: pathlib.Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _imports() -> dict[str, set[str]]:
    """Each module of the three packages -> the modules of the three packages it imports."""
    sources = {
        _module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
    }
    graph = {}
    for name, path in sources.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        graph[name] = {module for module in found if module in sources and module != name}
    return graph


GRAPH = _imports()


def _layer(module: str) -> int:
    for index, layer in enumerate(FRAMEWORK_LAYERS):
        if any(module == top or module.startswith(top + ".") for top in layer - {"framework"}):
            return index
    if module == "framework":
        return 0
    raise AssertionError(f"{module} is in no layer: add it to FRAMEWORK_LAYERS")


def test_the_graph_sees_the_imports():
    # A check that reads no import would pass whatever the code does.
    assert "framework.learner" in GRAPH["agents.dqn"]
    assert "framework.drivers.synchronous" in GRAPH["framework.runner"]
    assert len(GRAPH) > 50


def _imports_where(importer: str, wrong: Callable[[str, str], bool]) -> list[str]:
    """`module imports target` for each import of a module under `importer` that is `wrong`."""
    return [
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if module.split(".")[0] == importer
        for target in sorted(targets)
        if wrong(module, target)
    ]


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_import_only_downward(package):
    order = {name: index for index, name in enumerate(PACKAGES)}
    upward = _imports_where(package, lambda _, target: order[target.split(".")[0]] > order[package])
    assert not upward, upward


def test_framework_modules_import_only_their_layer_or_below():
    upward = _imports_where(
        "framework",
        lambda module, target: target.startswith("framework") and _layer(target) > _layer(module),
    )
    assert not upward, upward


def test_agents_know_no_files_seeding_drivers_or_runner():
    known = _imports_where(
        "agents",
        lambda _, target: any(t == target or target.startswith(t + ".") for t in NOT_FOR_AGENTS),
    )
    assert not known, known


def test_no_import_circle():
    circles, done, path = [], set(), []

    def visit(module: str) -> None:
        if module in path:
            circles.append(" -> ".join([*path[path.index(module) :], module]))
            return
        if module in done:
            return
        path.append(module)
        for target in sorted(GRAPH[module]):
            visit(target)
        path.pop()
        done.add(module)

    for module in sorted(GRAPH):
        visit(module)
    assert not circles, circles
