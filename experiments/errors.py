"""Bad input and failed runs as one paragraph each, for every entry point."""

import re
from collections.abc import Sequence


class RunError(Exception):
    """Bad input or a failed run, as one paragraph naming the culprit."""


class RunStopped(Exception):
    """Training stopped by SIGTERM or SIGINT (after checkpointing, once it trained); the message
    says where and how to resume. `exit_code` is the shell's convention: 128 + the signal's
    number."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def without_gin_call_stack(error: Exception) -> str:
    """The error in one paragraph, without gin's "In call to configurable ..." trail; an
    undefined macro said in words. Where the message does not name the part (a library's own
    error, Keras's for a learning rate), the innermost configurable is named, with the
    parameter the message mentions: `optimizers.Adam.learning_rate: ...`."""
    text = " ".join(str(error).split())
    macro = re.search(r"In call to configurable 'macro' \([^)]*\) in scope '([^']+)'", text)
    if macro:
        name = macro.group(1)
        return (
            f"The config uses the macro %{name}, which it never defines: add a line "
            f"`{name} = <value>` to a gin file, or fix the name."
        )
    trail = re.findall(r"In call to configurable '([^']*)' \(([^)]*)\)", text)
    message = re.sub(r"\s*In call to configurable '[^']*' \([^)]*\)( in scope '[^']*')?", "", text)
    if not trail:
        return message
    configurable = _selector(trail[0][0])  # gin adds the innermost call first
    short = configurable.rsplit(".", 1)[-1]
    if re.search(rf"\b{re.escape(short)}\b", message):
        return message
    parameter = re.search(r"(?:Argument |Received(?: instead)?: )`?(\w+)`?", message)
    named = f"{configurable}.{parameter.group(1)}" if parameter else configurable
    return f"{named} (as the config binds it): {message}"


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


def _selector(name: str) -> str:
    """A configurable's name as a config binds it (`optimizers.Adam`, not `Adam`)."""
    import gin

    matches = gin.config._REGISTRY.matching_selectors(name)
    return matches[0] if len(matches) == 1 else name
