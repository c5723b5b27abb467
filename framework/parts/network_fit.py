"""Whether a network's outputs fit what its agent reads from them, checked when the agent is built.

Any `(input_shape, num_outputs) -> keras.Model` is a network part, so a config can bind one that
builds, and even trains, while meaning something else: `ppo/cartpole.gin` on Pendulum acted
from `actor_critic_mlp` and died at its first step looking for a log std; `ppo/pendulum.gin` on
CartPole trained with the Gaussian's mean read as logits. An agent names what it reads (a
distribution's parameters, Q-values, an action, V(s)) as `Output`s; `check_network` compares
them with the model's outputs, read from its symbolic shapes (no forward pass, no random draw),
and refuses in one paragraph naming the binding to change.
"""

import dataclasses

import keras

from framework.agent import Agent
from framework.parts.networks import categorical_support_of


@dataclasses.dataclass(frozen=True)
class Output:
    """One tensor an agent reads from a network: its name, for the message, and its shape
    after the batch axis (`()`: one number per sample)."""

    name: str
    shape: tuple[int, ...]

    def describe(self) -> str:
        return f"{self.name} {_shape_text((None, *self.shape))}"


# An output, or a tuple of them (nested as the model returns them).
Outputs = Output | tuple["Outputs", ...]

VALUE = Output("V(s)", ())  # [B], beside an actor-critic's policy
CRITIC_Q = Output("Q(s, a)", ())  # [B], of a critic called as `critic([s, a])`


def q_outputs(model: keras.Model, num_actions: int) -> Output:
    """A Q-network's Q-values `[B, A]`, or, with a categorical head, its logits `[B, A, Z]`."""
    support = categorical_support_of(model)
    if support is None:
        return Output("Q-values", (num_actions,))
    return Output("atom logits", (num_actions, support.num_atoms))


def check_network(
    agent: Agent,
    binding: str,
    model: keras.Model,
    needs: Outputs,
    fix: str,
    takes_action: bool = False,
) -> None:
    """Raises ValueError, one paragraph naming `Agent.binding`, unless `model` takes the
    agent's observations (and, with `takes_action`, its actions `[B, *action shape]` as a
    second input) and returns `needs`. `fix`: the network part that fits (`networks.mlp`)."""
    owner_name = type(agent).__name__
    observation_space, action_space = agent.observation_space, agent.action_space
    inputs: Outputs = Output("observation", observation_space.shape)
    symbolic = keras.KerasTensor((None, *observation_space.shape), observation_space.dtype)
    if takes_action:
        inputs = (inputs, Output("action", action_space.shape))
        symbolic = [symbolic, keras.KerasTensor((None, *action_space.shape), "float32")]
    try:
        outputs = model.compute_output_spec(symbolic)
    except (ValueError, TypeError):  # Keras's complaint, which names its own input layers
        problem = f"which does not take {_describe_expected(inputs)}"
    else:
        if _fits(outputs, needs):
            return
        problem = f"whose outputs are {_describe_actual(outputs)}"
    remedy = (
        f"check the bindings of {fix}"
        if model.name == fix.rsplit(".", 1)[-1]
        else f"bind {owner_name}.{binding} = @{fix} for a {type(action_space).__name__} "
        "action space, or a network part with those outputs"
    )
    raise ValueError(
        f"{owner_name}.{binding} builds {model.name}, {problem}; {owner_name} reads "
        f"{_describe_expected(needs)} from it for the action space {action_space}: {remedy}."
    )


def _fits(outputs, needs: Outputs) -> bool:
    """Whether `outputs` (Keras's symbolic tensors, as nested as the model returns them) have
    the structure and the shapes of `needs`; a size Keras leaves unknown fits any."""
    if isinstance(needs, Output):
        shape = getattr(outputs, "shape", None)
        if shape is None or len(shape) != len(needs.shape) + 1:
            return False
        return all(size in (None, need) for size, need in zip(shape[1:], needs.shape, strict=True))
    return (
        isinstance(outputs, list | tuple)
        and len(outputs) == len(needs)
        and all(_fits(output, need) for output, need in zip(outputs, needs, strict=True))
    )


def _shape_text(shape: tuple) -> str:
    """`(None, 2)` as `[B, 2]`: the batch axis named, unknown sizes as `?`."""
    sizes = ["B", *("?" if size is None else str(size) for size in shape[1:])]
    return f"[{', '.join(sizes[: len(shape)])}]"


def _describe_actual(outputs) -> str:
    if isinstance(outputs, list | tuple):
        return f"({', '.join(_describe_actual(output) for output in outputs)})"
    if isinstance(outputs, dict):
        return f"{{{', '.join(f'{k}: {_describe_actual(v)}' for k, v in outputs.items())}}}"
    return _shape_text(tuple(outputs.shape))


def _describe_expected(needs: Outputs) -> str:
    if isinstance(needs, Output):
        return needs.describe()
    return f"({', '.join(_describe_expected(need) for need in needs)})"
