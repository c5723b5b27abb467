"""Gin configuration: locating files, parsing with clear errors, accounting for every binding."""

import contextlib
import dataclasses
import datetime
import difflib
import functools
import importlib.metadata
import importlib.resources
import inspect
import logging as python_logging
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence

import gin
import gin.resource_reader
from absl import logging

from framework import config_sources


class ConfigError(ValueError):
    """A bad gin file or binding; the message names the culprit and what is allowed."""


def resolve_gin_file(path: str) -> str:
    """`path` as given if it exists, else relative to the installed `gin_configs` package."""
    if os.path.isfile(path):
        return path
    relative = path.removeprefix("gin_configs/")
    packaged = importlib.resources.files("gin_configs").joinpath(relative)
    if packaged.is_file():
        return str(packaged)
    available = sorted(
        str(p.relative_to(importlib.resources.files("gin_configs")))
        for p in _gin_files(importlib.resources.files("gin_configs"))
    )
    raise ConfigError(
        f"Gin file {path!r} does not exist as a file (looked relative to {os.getcwd()!r} and "
        f"in the installed gin_configs package). Available configs: {', '.join(available)}."
    )


def _gin_files(root) -> list:
    found = []
    for entry in root.iterdir():
        if entry.is_dir():
            found += _gin_files(entry)
        elif entry.name.endswith(".gin"):
            found.append(entry)
    return found


def _registered_names() -> list[str]:
    names = set()
    for selector in gin.config._REGISTRY._selector_map:  # no public listing exists
        names.add(selector)
        names.add(selector.rsplit(".", 1)[-1])
    return sorted(names)


def _explain(error: Exception) -> str:
    """gin's message, plus close matches for an unknown configurable or parameter."""
    message = str(error).strip()
    hint = ""
    unknown = re.search(r"No configurable matching (?:reference )?'@?([\w./]+?)(?:\(\))?'", message)
    if unknown:
        close = difflib.get_close_matches(unknown.group(1), _registered_names(), n=3)
        hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
    parameter = re.search(
        r"Configurable '([\w.]+)' doesn't have a parameter named '(\w+)'", message
    )
    if parameter:
        configurable = gin.get_configurable(parameter.group(1))
        if configurable is not None:
            allowed = _parameters(configurable)
            close = difflib.get_close_matches(parameter.group(2), allowed, n=2)
            hint = f" Its parameters are: {', '.join(allowed)}."
            hint += f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
            hint += _bound_elsewhere(parameter.group(2), configurable)
    return " ".join(message.split()) + hint


def _bound_elsewhere(name: str, configurable) -> str:
    """Where a parameter `name` does exist (an optimizer's learning_rate, not the agent's):
    the parts that take it, those this config already binds or refers to first."""
    owners = [
        other
        for other in gin.config._REGISTRY._selector_map.values()  # no public listing exists
        if other.wrapped is not configurable and other.module != "gin" and _takes(other, name)
    ]
    if not owners:
        return ""
    used = {selector for _, selector in gin.config._CONFIG}
    used |= {r.configurable.selector for r in gin.config.iterate_references(gin.config._CONFIG)}
    owners.sort(key=lambda other: (other.selector not in used, _config_name(other)))
    named = [
        f"{_config_name(other)}.{name}{' (this config uses it)' if other.selector in used else ''}"
        for other in owners[:3]
    ]
    more = f" and {len(owners) - 3} more" if len(owners) > 3 else ""
    return f" {name} is a parameter of other parts: {', '.join(named)}{more}."


def _takes(configurable, name: str) -> bool:
    """Whether a config may bind `name` on `configurable` (its allowlist and denylist too)."""
    try:
        parameters = _parameters(configurable.wrapped)
    except (TypeError, ValueError):  # a signature inspect cannot read
        return False
    if configurable.allowlist and name not in configurable.allowlist:
        return False
    return name in parameters and name not in (configurable.denylist or ())


def _config_name(configurable) -> str:
    """The name a config writes: the full selector when short ('optimizers.Adam'), else the
    shortest unique one ('mlp' for framework.parts.networks.mlp)."""
    selector = configurable.selector
    if selector.count(".") <= 1:
        return selector
    return gin.config._REGISTRY.minimal_selector(selector)


def _parameters(configurable) -> list[str]:
    function = configurable.__init__ if inspect.isclass(configurable) else configurable
    return [
        name
        for name in inspect.signature(function).parameters
        if name not in ("self", "args", "kwargs")
    ]


def _tolerate_namespace_packages(exists: Callable[[str], bool]) -> Callable[[str], bool]:
    """gin's package-path reader raises TypeError for a namespace package (gin_configs/dqn has
    no __init__.py), which ends the search for an include before gin tries its search paths."""

    @functools.wraps(exists)
    def check(path: str) -> bool:
        try:
            return exists(path)
        except TypeError:
            return False

    return check


# Bindings that parts built in other processes read (`note_read_elsewhere`), by short name.
_READ_ELSEWHERE: set[str] = set()
# The folders of the gin files gin read in this process: where a module that a config imports
# may have been found (`snapshot` hands them to a worker process).
_GIN_FILE_FOLDERS: set[str] = set()


@contextlib.contextmanager
def _on_sys_path(folders: Sequence[str]) -> Iterator[None]:
    """`folders` (those not on it already) first on `sys.path` for the block, then taken off."""
    added = [folder for folder in dict.fromkeys(folders) if folder not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for folder in added:
            if folder in sys.path:
                sys.path.remove(folder)


def _importing_beside_the_file(reader: Callable):
    """gin's file reader, with the folder of the file it opens first on `sys.path` while gin
    reads that file: its `import my_parts` finds the my_parts.py beside it from any working
    folder, as a script's imports find the modules beside the script (an included file's
    imports, the modules beside it)."""

    @functools.wraps(reader)
    @contextlib.contextmanager
    def read(path: str):
        with reader(path) as file:
            folder = os.path.dirname(os.path.abspath(getattr(file, "name", path)))
            _GIN_FILE_FOLDERS.add(folder)
            with _on_sys_path([folder]):
                yield file

    read.imports_beside_the_file = True
    return read


gin.config._FILE_READERS[:] = [  # gin has no API to replace a registered reader
    (
        reader
        if getattr(reader, "imports_beside_the_file", False)  # a reload of this module
        else _importing_beside_the_file(reader),
        _tolerate_namespace_packages(exists)
        if exists is gin.resource_reader.system_path_file_exists
        else exists,
    )
    for reader, exists in gin.config._FILE_READERS
]


class _IncludeProbes(python_logging.Filter):
    """gin's package-path reader logs every place it tries for an include, an INFO line each
    and an ERROR "Path not found" for each that is not a package: probes, not errors (a
    missing include is said by `parse` in one paragraph)."""

    def filter(self, record: python_logging.LogRecord) -> bool:
        return record.pathname != gin.resource_reader.__file__


@contextlib.contextmanager
def _without_include_probes() -> Iterator[None]:
    """gin's reader logs to the root logger, where absl's handler prints every line."""
    probes = _IncludeProbes()
    root = python_logging.getLogger()
    root.addFilter(probes)
    try:
        yield
    finally:
        root.removeFilter(probes)


@contextlib.contextmanager
def _include_search_paths(folders: Sequence[str]) -> Iterator[list[str]]:
    """Adds `folders` to gin's global include search paths for one parse, then restores them, so
    repeated parses neither pile up duplicates nor keep earlier runs' folders. Yields them all."""
    prefixes = gin.config._LOCATION_PREFIXES  # gin has no API to list or remove search paths
    saved = list(prefixes)
    for folder in dict.fromkeys(folders):
        if folder not in prefixes and folder != os.getcwd():  # '' already is the working directory
            gin.add_config_file_search_path(folder)
    try:
        yield list(prefixes)
    finally:
        prefixes[:] = saved


def _missing_include(error: OSError, searched: Sequence[str]) -> str | None:
    """One paragraph naming a missing include and where gin looked; None for other read errors."""
    missing = re.search(r"Unable to open file: (.+?)\. Searched config paths", str(error))
    including = re.search(r'In file "(.+?)", line (\d+)', str(error))
    if not (missing and including):
        return None
    path = missing.group(1)
    source = f"{including.group(1)!r} (line {including.group(2)})"
    if os.path.isabs(path):
        return f"Gin file {source} includes {path!r}, which does not exist."
    places = [
        f"the working directory {os.getcwd()!r}" if prefix == "" else repr(prefix)
        for prefix in searched
    ]
    return (
        f"Gin file {source} includes {path!r}, which was not found relative to any of: "
        f"{', '.join(places)}. Write an include relative to one of these, e.g. "
        "'gin_configs/dqn/cartpole_common.gin'."
    )


def parse(
    gin_files: Sequence[str],
    bindings: Sequence[str],
    seed: int | None = None,
    import_folders: Sequence[str] = (),
) -> list[str]:
    """Parses files, then bindings, then `--seed` as the runner's seed (later sources win;
    within one source a parameter is bound once); returns the resolved file paths.

    Every configurable must already be registered (import the agents first), so that an unknown
    name or parameter fails here, before anything is built or written. An `include` resolves
    from any working directory and installation: relative to the working directory, the
    installed package's parent ('gin_configs/dqn/...'), the package itself ('dqn/...'), or the
    folder of a file given. A gin file's `import` finds a module beside the file (and in
    `import_folders`: where a run's config.gin, read back, first found its modules), as well as
    on `sys.path`.
    """
    resolved = [resolve_gin_file(path) for path in gin_files]
    _READ_ELSEWHERE.clear()
    try:
        config_sources.check(resolved, bindings)
    except ValueError as error:
        raise ConfigError(str(error)) from error
    package = importlib.resources.files("gin_configs")
    folders = [str(package.parent), str(package)]
    folders += [os.path.dirname(os.path.abspath(path)) for path in resolved]
    _GIN_FILE_FOLDERS.update(import_folders)
    with (
        _include_search_paths(folders) as searched,
        _without_include_probes(),
        _on_sys_path(import_folders),
    ):
        try:
            gin.parse_config_files_and_bindings(resolved, bindings, finalize_config=False)
        except (ValueError, SyntaxError, KeyError) as error:
            raise ConfigError(f"Bad gin configuration: {_explain(error)}") from error
        except OSError as error:  # a missing include, an unreadable file
            message = _missing_include(error, searched)
            raise ConfigError(
                message
                or f"Could not read the gin files {resolved}: {' '.join(str(error).split())}"
            ) from error
    _integral_floats_as_integers()
    if seed is not None:
        _bind_seed(seed)
    return resolved


def _integral_floats_as_integers() -> None:
    """RL-Zoo's configs write counts as floats (`n_timesteps: !!float 1e5`): a float with no
    fraction bound to a parameter that takes an integer is rebound as that integer, which the
    parts then build with and the operative config records; said once a binding. A fraction
    (1.5) stays, for the part's own check to refuse. Every binding is one of gin's entries,
    scoped or not and whether its configurable is called directly or built through a
    reference (`@ReplaySchedule()`); a macro's value is followed to the parameter it is
    bound to."""
    for (scope, selector), parameters in list(gin.config._CONFIG.items()):  # no public listing
        integers = _integer_parameters(gin.config._REGISTRY[selector].wrapped)
        for name, bound in parameters.items():
            value = _macro_value(bound)
            if name in integers and isinstance(value, float) and value.is_integer():
                gin.bind_parameter((scope, selector, name), int(value))
                logging.info(
                    "%s = %r read as the integer %d.",
                    _short_name(scope, selector, name),
                    value,
                    int(value),
                )


def _integer_parameters(function: Callable) -> set[str]:
    """The parameters of `function` (a class: its constructor's) that take an integer: annotated
    `int` or `int | None`, or, unannotated, with an integer default (not a bool)."""
    try:
        signature = inspect.signature(function.__init__ if inspect.isclass(function) else function)
    except (TypeError, ValueError):  # a signature inspect cannot read
        return set()
    integer = (int, int | None, "int", "int | None")  # a module's annotations may be text
    return {
        name
        for name, parameter in signature.parameters.items()
        if parameter.annotation in integer
        or (parameter.annotation is inspect.Parameter.empty and type(parameter.default) is int)
    }


def _macro_value(value: object) -> object:
    """`value`, or where it is a macro (`%NUM_STEPS`), the value that macro is bound to."""
    while (
        isinstance(value, gin.config.ConfigurableReference)
        and value.configurable.wrapped is gin.config.macro
    ):
        value = gin.config._CONFIG.get(value.config_key, {}).get("value")
    return value


def _bind_seed(seed: int) -> None:
    """`--seed` wins over the seed the files or bindings set, and says so."""
    selector = "Runner.seed"
    try:
        earlier = gin.query_parameter(selector)
    except ValueError:
        earlier = None
    if earlier is not None and earlier != seed:
        logging.info("%s = %d (--seed) overrides %s.", selector, seed, earlier)
    gin.bind_parameter(selector, seed)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The parsed config as gin text, with the modules whose configurables it names: what another
    process (a spawned worker, a Ray actor) parses to build the same parts. Gin bindings do not
    cross processes by themselves (gin#31), and a module that registers a part must be
    imported before the text naming it is parsed. `folders`: where such a module was found
    beside a gin file (`import my_parts` in the user's config), which the other process's
    `sys.path` lacks as this one's did."""

    text: str
    modules: tuple[str, ...]
    folders: tuple[str, ...] = ()

    def apply(self) -> None:
        """Makes this process's gin config the snapshot's."""
        with _on_sys_path(self.folders):
            for module in self.modules:
                importlib.import_module(module)
            gin.clear_config()
            gin.parse_config(self.text)


def snapshot() -> Snapshot:
    """The current config (every file and binding, the command line's included), with the
    modules that define the parts it names and the framework's parts modules, which also
    register Keras's optimizers under names of their own (gin does not record who did), and
    the folders beside a gin file that some of them came from."""
    configurables = [gin.config._REGISTRY[selector] for _, selector in gin.config._CONFIG]
    configurables += [r.configurable for r in gin.config.iterate_references(gin.config._CONFIG)]
    modules = {configurable.wrapped.__module__ for configurable in configurables}
    modules |= {name for name in sys.modules if name.startswith("framework.parts.")}
    modules |= set(imported_modules())  # a gin file's `import`, as the text repeats it
    modules -= {"__main__"}
    # Where a gin file's own `import`s were found beside it (not where the framework is).
    folders = {_import_root(module) for module in imported_modules()} & _GIN_FILE_FOLDERS
    return Snapshot(gin.config_str(), tuple(sorted(modules)), tuple(sorted(folders)))


def imported_modules() -> list[str]:
    """The modules the parsed config's gin files (and what they include) import, by name."""
    statements = gin.config._IMPORTS  # no public API lists them
    return sorted({s.module for s in statements if not s.module.startswith("__gin__")})


def _import_root(name: str) -> str | None:
    """The `sys.path` folder module `name` was imported from (the one above its top package)."""
    path = getattr(sys.modules.get(name), "__file__", None)
    if path is None:
        return None
    if os.path.basename(path).startswith("__init__."):
        path = os.path.dirname(path)
    for _ in name.split("."):
        path = os.path.dirname(path)
    return path


def unused_bindings() -> list[str]:
    """Bindings that no configurable read so far (a part the config never builds, a bad scope),
    here or in another process that said so (`note_read_elsewhere`)."""
    unread = (name for name, read in _bindings_read() if not read)
    return sorted(name for name in unread if name not in _READ_ELSEWHERE)


def read_bindings() -> list[str]:
    """Bindings that some configurable in this process read: what a remote worker reports."""
    return sorted(name for name, read in _bindings_read() if read)


def note_read_elsewhere(bindings: Sequence[str]) -> None:
    """Bindings read by parts another process built (an asynchronous driver's remote workers,
    which parse the config again): this process never builds those parts, and would call the
    bindings only they read unused. Forgotten at the next `parse`."""
    _READ_ELSEWHERE.update(bindings)


def _bindings_read() -> list[tuple[str, bool]]:
    operative = gin.config._OPERATIVE_CONFIG  # no public API compares the two
    return [
        (_short_name(scope, selector, name), name in operative.get((scope, selector), {}))
        for (scope, selector), parameters in gin.config._CONFIG.items()
        for name in parameters
    ]


def own_bindings(gin_files: Sequence[str], bindings: Sequence[str]) -> set[str]:
    """What the given files and bindings bind themselves, not through an `include`: a binding
    only an included file makes is the included config's, and an override may make it moot."""
    sources = [config_sources.statements(b, "a binding") for b in bindings]
    for path in gin_files:
        with open(resolve_gin_file(path)) as f:
            sources.append(config_sources.statements(f.read(), path))
    return {
        _short_name(*key) if key[2] else f"{key[1]}/macro.value"  # a macro, as gin keeps it
        for source in sources
        for key in source
    }


def _short_name(scope: str, selector: str, parameter: str) -> str:
    """`scope/Name.parameter`, the configurable by the last part of its selector."""
    return f"{scope + '/' if scope else ''}{selector.rsplit('.', 1)[-1]}.{parameter}"


def bound_hyperparameters() -> dict[str, bool | int | float | str]:
    """What the config itself binds (its files and bindings), as `scope/Name.param` -> value,
    for TensorBoard's HParams dashboard: not every default a part used (a Keras optimizer has
    dozens), and not the seed, so that the seeds of one configuration compare as one.
    Configurables are named as config.gin names them (gin's shortest unique selector: `Adam`,
    `mlp`, `make_env`), as a sweep's columns and the analysis are; references and sequences
    appear as their gin text."""
    values = {}
    for (scope, selector), parameters in gin.config._CONFIG.items():  # no public listing
        short = gin.config._REGISTRY.minimal_selector(selector)
        name = f"{scope + '/' if scope else ''}{short}"
        for parameter, value in parameters.items():
            if (name, parameter) == ("Runner", "seed"):
                continue
            simple = isinstance(value, bool | int | float | str)
            values[f"{name}.{parameter}"] = value if simple else str(value)
    return values


def command_line(
    gin_files: Sequence[str], bindings: Sequence[str], base_dir: str, seed: int | None
) -> str:
    """The shell command that trains this config again, from any folder: quoted, with absolute
    paths (a later `--base_dir=...` appended to it wins)."""
    arguments = [sys.executable, "-m", "experiments.run"]
    arguments += [f"--gin_file={os.path.abspath(resolve_gin_file(f))}" for f in gin_files]
    arguments += [f"--gin_bindings={binding}" for binding in bindings]
    if seed is not None:
        arguments.append(f"--seed={seed}")
    arguments.append(f"--base_dir={os.path.abspath(base_dir)}")
    return shlex.join(arguments)


def recorded_import_folders(start: dict) -> list[str]:
    """Where a start's modules were found (`start`: its metadata): beside the gin files of its
    recorded command, and in its working folder."""
    working_folder = start.get("working_folder", "")
    try:
        arguments = shlex.split(start.get("command", ""))
    except ValueError:  # an edited record
        arguments = []
    files = [a.removeprefix("--gin_file=") for a in arguments if a.startswith("--gin_file=")]
    folders = [os.path.dirname(os.path.join(working_folder, path)) for path in files]
    return [*folders, working_folder] if working_folder else folders


def run_metadata(command: str, seed: int, trial: str) -> dict[str, str]:
    """What reproduces a run besides its config: command, working folder, seed, versions, git
    commit; and when it started and its trial (`framework/storage/trials.py`), for analysis."""
    metadata = {"command": command, "working_folder": os.getcwd()}
    metadata["started"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    metadata["trial"] = trial
    metadata["seed"] = str(seed)
    metadata["python"] = sys.version.split()[0]
    for package in ("rlframe", "tensorflow", "keras", "gymnasium", "gin-config", "numpy"):
        try:
            metadata[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            metadata[package] = "not installed"
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            cwd=os.path.dirname(os.path.abspath(__file__)),
            check=True,
        ).stdout.strip()
        metadata["git_commit"] = commit
    except (OSError, subprocess.CalledProcessError):
        metadata["git_commit"] = "none"
    return metadata
