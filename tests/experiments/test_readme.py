"""Runs every command of the README as written, so the user's guide cannot drift from the code.

Which lines are commands: every line of a ```bash, ```sh or ```console fence (a line ending in
`\\` or inside an open quote continues on the next; a `$ ` prompt is dropped), and nothing
outside them: a README line that starts with `python -m experiments.` outside such a fence fails
`test_every_command_is_in_a_fence`. The quick start's indented lines are not commands by this
rule: they install the package (`test_install.py` covers that). Left out of the fences' commands:
`pip install` (it changes the environment), `pytest` (the suite itself) and `tensorboard` (a
server that never ends). A ```python or ```gin fence whose first line is `# <name>.py` or
`# <name>.gin` is a file: it is written under that name before any command runs.

How each command runs: in README order within a test process, in one temporary folder per process
(the README's paths are relative: `runs/cartpole`, `sweeps/...`), by bash with this checkout on
PYTHONPATH and this interpreter's folder first on PATH (its `python`), so the text is run as a
user types it. A session fixture first trains `runs/cartpole` with the README's first
`experiments.run` command and `TINY_RUN` appended, so that evaluate, export and load read a real
run with a best policy. Then every `experiments.run` command gets `--dry_run` appended (its
purpose is training, which the fixture and the runner's own tests cover), every
`experiments.sweep` command gets `TINY_SWEEP` appended, and every other command runs exactly as
written. A command that names an earlier command's `--base_dir` (`experiments.analyze` reads
the sweep's) has that command run first, once per process, so any subset of the tests, split
over any workers, runs as the README reads.
"""

import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.experiments import cli

README = os.path.join(cli.REPO_ROOT, "README.md")
FENCE = re.compile(r"^```(\w*)\s*$")
COMMAND_FENCES = ("bash", "sh", "console")
FILE_FENCES = ("python", "gin")
LEFT_OUT = ("pip ", "pytest", "tensorboard ")
RUN_DIR = "runs/cartpole"
TINY_RUN = (
    "Runner.num_steps = 1000",
    "Runner.eval_interval = 500",
    "Runner.checkpoint_interval = 500",
    "Runner.log_interval = 500",
    "Runner.eval_episodes = 2",
    "ReplaySchedule.learning_starts = 200",
)
TINY_SWEEP = (
    "Runner.num_steps = 400",
    "Runner.eval_interval = 200",
    "Runner.checkpoint_interval = 400",
    "Runner.log_interval = 200",
    "Runner.eval_episodes = 2",
)
TIMEOUT = 300


def _fences(text: str) -> list[tuple[str, list[str]]]:
    """Each fenced block of `text` as (language, lines)."""
    blocks, language, lines = [], None, []
    for line in text.splitlines():
        match = FENCE.match(line)
        if match and language is None:
            language, lines = match.group(1), []
        elif line.startswith("```") and language is not None:
            blocks.append((language, lines))
            language = None
        elif language is not None:
            lines.append(line)
    return blocks


def _complete(command: str) -> bool:
    if command.endswith("\\"):
        return False
    try:
        shlex.split(command)
    except ValueError:  # an open quote: the command goes on
        return False
    return True


def _commands(lines: list[str]) -> list[str]:
    commands, pending = [], ""
    for line in lines:
        line = line.removeprefix("$ ") if not pending else line
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending = f"{pending}\n{line}" if pending else line
        if _complete(pending):
            commands.append(pending)
            pending = ""
    assert not pending, f"an unfinished command in the README: {pending!r}"
    return commands


def _readme() -> str:
    with open(README, encoding="utf-8") as file:
        return file.read()


def readme_commands() -> list[str]:
    """The README's commands, in order, but those left out (see the module's docstring)."""
    commands = []
    for language, lines in _fences(_readme()):
        if language in COMMAND_FENCES:
            commands += [c for c in _commands(lines) if not c.startswith(LEFT_OUT)]
    return commands


def readme_files() -> dict[str, str]:
    """The README's example files: fences whose first line names them."""
    files = {}
    for language, lines in _fences(_readme()):
        named = re.fullmatch(r"# (\w+\.(?:py|gin))", lines[0].strip()) if lines else None
        if language in FILE_FENCES and named:
            files[named.group(1)] = "\n".join(lines[1:]) + "\n"
    return files


def _bindings(bindings: tuple[str, ...]) -> str:
    return " ".join(shlex.quote(f"--gin_bindings={binding}") for binding in bindings)


def as_run(command: str) -> str:
    """The command as the test runs it (see the module's docstring)."""
    if "-m experiments.run" in command:
        return f"{command} --dry_run"
    if "-m experiments.sweep" in command:
        return f"{command} {_bindings(TINY_SWEEP)}"
    return command


def _run(command: str, folder) -> subprocess.CompletedProcess:
    environment = {
        **os.environ,
        "PYTHONPATH": cli.REPO_ROOT,
        "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
    }
    return subprocess.run(
        ["bash", "-c", command],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def _explain(command: str, done: subprocess.CompletedProcess) -> str:
    return f"{command}\nexit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


@pytest.fixture(scope="session")
def workspace(tmp_path_factory):
    """A folder holding the README's files and a tiny `runs/cartpole`."""
    folder = tmp_path_factory.mktemp("readme")
    for name, text in readme_files().items():
        (folder / name).write_text(text)
    train = next(c for c in readme_commands() if "-m experiments.run" in c)
    assert f"--base_dir={RUN_DIR}" in train, train
    done = _run(f"{train} {_bindings(TINY_RUN)}", folder)
    assert done.returncode == 0, _explain(train, done)
    return folder


def test_every_command_is_in_a_fence():
    inside, outside = False, []
    for line in _readme().splitlines():
        if line.startswith("```"):
            inside = not inside
        elif not inside and line.lstrip().startswith("python -m experiments."):
            outside.append(line)
    assert not outside, f"README commands outside a fence, which this test would not run: {outside}"


def test_the_readme_shows_what_a_user_does():
    commands = " ".join(readme_commands())
    for command in ("run", "evaluate", "export", "sweep", "analyze", "parts", "configs"):
        assert f"-m experiments.{command}" in commands, command
    assert "experiments.load(" in commands
    assert set(readme_files()) >= {"my_envs.py", "corridor.gin", "my_network.py", "wide.gin"}


def _base_dir(command: str) -> str | None:
    """The folder a command writes (its `--base_dir=`), or None."""
    match = re.search(r"--base_dir=(\S+)", command)
    return match.group(1) if match else None


def _names(command: str, folder: str) -> bool:
    """Whether `folder` stands in `command` as a path of its own (not `sweeps/a` in `sweeps/ab`)."""
    return re.search(rf"(?<![\w./-]){re.escape(folder)}(?![\w.-])", command) is not None


def prerequisites(command: str) -> list[str]:
    """The earlier README commands writing a folder that `command` names, except the fixture's
    run (`RUN_DIR`)."""
    commands = readme_commands()
    earlier = commands[: commands.index(command)]
    return [
        c
        for c in earlier
        if (folder := _base_dir(c)) not in (None, RUN_DIR, _base_dir(command))
        and _names(command, folder)
    ]


@pytest.fixture(scope="session")
def run_once(workspace):
    """Runs a README command in the workspace the first time it is asked for, then recalls it."""
    done: dict[str, subprocess.CompletedProcess] = {}

    def run(command: str) -> subprocess.CompletedProcess:
        if command not in done:
            done[command] = _run(as_run(command), workspace)
        return done[command]

    return run


@pytest.mark.process
@pytest.mark.parametrize("command", readme_commands(), ids=lambda c: c.split("\n")[0][:60])
def test_readme_command_runs_as_written(run_once, command):
    for earlier in prerequisites(command):
        done = run_once(earlier)
        assert done.returncode == 0, f"needed first: {_explain(as_run(earlier), done)}"
    done = run_once(command)
    assert done.returncode == 0, _explain(as_run(command), done)


def test_analyze_has_the_sweep_it_reads_run_first():
    analyze = next(c for c in readme_commands() if "-m experiments.analyze" in c)
    needed = prerequisites(analyze)
    assert [_base_dir(c) for c in needed] == [analyze.split()[-1]], needed


def test_a_folder_is_named_as_a_whole_path():
    assert _names("python -m experiments.analyze sweeps/lr", "sweeps/lr")
    assert _names("analyze sweeps/lr/ --threshold=1", "sweeps/lr")
    assert not _names("python -m experiments.analyze sweeps/lr_tpe", "sweeps/lr")
    assert not _names("python -m experiments.analyze old/sweeps/lr", "sweeps/lr")


def _anchors(path: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    with open(path, encoding="utf-8") as file:
        headings = [line.lstrip("#").strip() for line in file if line.startswith("#")]
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_every_relative_link_of_the_readme_and_docs_resolves():
    docs = os.path.join(cli.REPO_ROOT, "docs")
    pages = [README] + [
        os.path.join(docs, page) for page in os.listdir(docs) if page.endswith(".md")
    ]
    broken = []
    for page in pages:
        with open(page, encoding="utf-8") as file:
            prose = re.sub(r"`[^`]*`", "", file.read())  # code spans hold no links
        links = re.findall(r"\]\(([^)\s]+)\)", prose)
        for link in links:
            if re.match(r"\w+://|mailto:", link):
                continue
            target, _, anchor = link.partition("#")
            path = os.path.normpath(os.path.join(os.path.dirname(page), target)) if target else page
            if not os.path.exists(path) or (anchor and anchor not in _anchors(path)):
                broken.append(f"{os.path.relpath(page, cli.REPO_ROOT)}: {link}")
    assert not broken, broken
