"""Bad input and failed runs as one paragraph each, for every entry point."""

import re
from collections.abc import Sequence


class RunError(Exception):
    """Bad input or a failed run, as one paragraph naming the culprit."""


def without_gin_call_stack(error: Exception) -> str:
    """The error in one paragraph, without gin's "In call to configurable ..." trail (the
    message names the part already); an undefined macro said in words."""
    text = " ".join(str(error).split())
    macro = re.search(r"In call to configurable 'macro' \([^)]*\) in scope '([^']+)'", text)
    if macro:
        name = macro.group(1)
        return (
            f"The config uses the macro %{name}, which it never defines: add a line "
            f"`{name} = <value>` to a gin file, or fix the name."
        )
    return re.sub(r"\s*In call to configurable '[^']*' \([^)]*\)( in scope '[^']*')?", "", text)


def required_binding_message(error: RuntimeError, gin_files: Sequence[str]) -> str:
    found = re.search(r"Required bindings for `(\w+)` not provided in config: \[(.*)\]", str(error))
    if not found:
        return " ".join(str(error).split())
    names = [f"{found.group(1)}.{name.strip(chr(39))}" for name in found.group(2).split(", ")]
    return (
        f"The config does not bind {', '.join(names)}, which has no default (gin files: "
        f"{', '.join(gin_files)}). Every config names at least its agent and environment, "
        "e.g. `Runner.agent = @DQNAgent`; start from a shipped one (`python -m "
        "experiments.parts` lists the parts)."
    )
