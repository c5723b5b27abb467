"""What a resume must keep, and what to say when a checkpoint does not fit the config.

A resume may change a config (a larger `Runner.num_steps` trains longer; config.gin keeps the
earlier one), but not what makes the run itself: its seed, its agent and its environment. And
when the checkpoints do not fit a changed config, the few lines that decide it are named; the
whole difference goes to a file.
"""

import difflib
import re

from experiments.errors import RunError

# (what, the binding names that say it): the run's identity, which a resume must keep.
_IDENTITY = (
    ("the seed", ("Runner.seed",)),
    ("the agent", ("Runner.agent",)),
    ("the environment", ("make_env.env_id", "make_atari_env.env_id", "Runner.env_factory")),
)
# Bindings that decide whether a checkpoint fits: the agent, the environment, the networks.
_DECISIVE = re.compile(
    r"^(Runner\.(agent|env_factory|driver)|\S*\.env_id|\S*\.(network|actor_network|"
    r"critic_network|num_critics|dueling|wrappers|screen_size|frame_stack|replay)|"
    r"(networks\.)?(mlp|nature_cnn|actor_mlp|critic_mlp|actor_critic_mlp)\.\w+)$"
)
_SHOWN = 6  # decisive lines named in the paragraph; the rest are in the file
_SHORT_DETAIL = 400  # characters of the checkpoint's complaint still said in the paragraph


def _bound(config: str) -> dict[str, str]:
    """Binding name -> value text of an operative config (unscoped, as config.gin has them)."""
    from framework.config_sources import binding_name, statements

    bound = statements(config, "config.gin").items()
    # A reference is read as its text: '@DQNAgent' is shown as config.gin writes it.
    return {binding_name(key): re.sub(r"^'(@.*)'$", r"\1", value) for key, value in bound}


def identity_change(previous: str, current: str) -> str | None:
    """What resuming `previous` (config.gin) with `current` would change of the run itself
    (its seed, agent or environment), in words; None if nothing."""
    before, now = _bound(previous), _bound(current)
    changed = [
        f"{what} ({name}: {before.get(name, 'unset')} then, {now.get(name, 'unset')} now)"
        for what, names in _IDENTITY
        for name in names
        if before.get(name) != now.get(name)
    ]
    return "; ".join(changed) or None


def refuse_identity_change(change: str, base_dir: str) -> RunError:
    return RunError(
        f"{base_dir} holds checkpoints of a run this config would continue as another: "
        f"{change}. A resume keeps the seed, the agent and the environment (its other settings "
        "may change, e.g. Runner.num_steps to train longer). Resume with the run's own (its "
        "config.gin), train this one in a new --base_dir, or discard the run's checkpoints "
        "with --start_afresh (they are set aside in discarded/, not deleted). Nothing was "
        "changed."
    )


def changed_lines(previous: str, current: str) -> list[str]:
    """The bindings that differ, as `-old` / `+new` lines (comments and blanks left out)."""
    return [
        line
        for line in difflib.unified_diff(previous.splitlines(), current.splitlines(), n=0)
        if line[:1] in "+-"
        and line[:3] not in ("+++", "---")
        and line[1:].strip()
        and not line[1:].lstrip().startswith("#")
    ]


def explain_misfit(message: str, folder: object, current: str) -> str:
    """A checkpoint that does not fit is most often a changed config: the lines that decide it
    are named, the whole difference (and `message`, the checkpoint's own complaint) written
    to a file in the run folder."""
    previous = folder.read_config()
    changed = changed_lines(previous, current) if previous is not None else []
    if not changed:
        return message
    decisive = [line for line in changed if _DECISIVE.match(line[1:].split(" = ")[0].strip())]
    shown = (decisive or changed)[:_SHOWN]
    diff = "\n".join(
        difflib.unified_diff(
            previous.splitlines(), current.splitlines(), "config.gin", "this start", lineterm=""
        )
    )
    path = folder.write_config_changes(f"{diff}\n\nThe checkpoint's complaint:\n{message}\n")
    more = len(changed) - len(shown)
    # The checkpoint's own complaint where it is short (a worker count); a list of every
    # missing variable is left to the file.
    detail = f" In detail: {message}" if len(message) <= _SHORT_DETAIL else ""
    return (
        f"The config changed since the checkpoints in {folder.checkpoint_dir} were written, "
        f"and they do not fit it: {'; '.join(shown)} (- as config.gin has it, + now)"
        f"{f', and {more} more changed lines' if more > 0 else ''}. The whole difference, and "
        f"what the checkpoint lacks, is in {path}. Resume with the config they were written "
        f"with, or train the new one in a new --base_dir.{detail}"
    )
