"""Saves and restores the complete state of an environment, so a run resumes mid-episode exactly.

A checkpoint taken in the middle of episodes only resumes bitwise when everything that decides the
next step comes back: physics arrays, `np_random` generator states, wrapper counters and frame
buffers, the vector env's pending autoresets, the Atari emulator and the MuJoCo simulation. The
state is kept as data (arrays, numbers, generator states, the emulator's own serialization,
MuJoCo's state vector) because a pickled checkpoint runs code when it is loaded; pickle is only
the fallback for an attribute that is not data, and `how_saved` tells the caller at start where
even that fails, so it can plan to start new episodes on resume instead.

`capture` walks the wrapper chain (`env`, `env.env`, ..., `env.unwrapped`) and takes each layer's
own attributes except configuration (spaces, the env spec, constructor records). Its result is a
nested dict of JSON values and numpy arrays; tuples, deques, dicts, numpy scalars and generators
(numpy's `Generator` and its legacy `RandomState`) are tagged with `"__kind__"` so `restore`
gives them back with their exact Python/numpy types.

An object of a class given to `register_state_class` (MinAtar's game objects) is saved as a
layer is, attribute by attribute, and restored in place: whoever else holds it, or a generator
it holds, keeps holding the restored one.
"""

import io
import json
import pickle
import sys
from collections import deque
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import SyncVectorEnv

KIND = "__kind__"
_ARRAY_REFERENCE = "__array__"
_SCALAR_TYPES = (type(None), bool, int, float, str)
# Configuration, rebuilt by constructing the env the same way; never state.
_CONFIG_TYPES = (gymnasium.Space, EnvSpec)
# Constructor records, and Wrapper's cache of `spec` (None until `spec` is first read).
_CONFIG_NAMES = frozenset({"_saved_kwargs", "_ezpickle_args", "_ezpickle_kwargs", "_cached_spec"})
_CONFIG_ATTRIBUTES: dict[type, frozenset[str]] = {
    gymnasium.wrappers.TransformObservation: frozenset({"func"}),
    gymnasium.wrappers.TransformAction: frozenset({"func"}),
    gymnasium.wrappers.TransformReward: frozenset({"func"}),
}
# SyncVectorEnv's own state; its other attributes are configuration or the sub-envs.
_VECTOR_FIELDS = (
    "_autoreset_envs",
    "_env_obs",
    "_observations",
    "_rewards",
    "_terminations",
    "_truncations",
)
_BIT_GENERATORS = frozenset({"PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64"})
_RANK = {"data": 0, "ale": 0, "mujoco": 0, "object": 0, "pickle": 1, "none": 2}
_SIMULATORS = {  # how `how_saved` describes the kinds that are a simulator's own state
    "ale": "the Atari emulator as ALE's own serialized state",
    "mujoco": "the MuJoCo simulation as its integration state",
}
# MuJoCo's whole integration state (`mj_getState`): time, positions, velocities, actuator
# activations, delay histories, the solver's warm start, controls, applied forces, equality
# flags, mocap poses, user data and plugin state, all a step starts from.
_MUJOCO_SPEC = "mjSTATE_INTEGRATION"
# What gymnasium's MuJoCo environments read of a step's results besides the state. A step
# recomputes them, but some environments read them before stepping (Ant's and Reacher's body
# positions, Humanoid's centre of mass for its velocity), where they are the last step's: they
# are saved with the state, which alone would leave them as the first reset computed them.
_MUJOCO_RESULTS = (
    "xpos",
    "xipos",
    "site_xpos",
    "cinert",
    "cvel",
    "cfrc_ext",
    "qfrc_actuator",
    "qfrc_constraint",
    "ten_length",
    "ten_velocity",
)
# Classes whose objects hold an environment's state in their attributes (`register_state_class`).
_STATE_CLASSES: set[type] = set()


class EnvStateError(ValueError):
    """A saved state that does not fit the environment it is restored into."""


def register_state_class(*classes: type) -> None:
    """Objects of `classes` are saved as data, attribute by attribute, where their attributes
    are data (or such objects in turn), and restored in place: for environments that keep
    their state in plain objects of their own, as MinAtar's games do."""
    _STATE_CLASSES.update(classes)


def pack(state: dict[str, Any]) -> np.ndarray:
    """A captured state as one uint8 array: its JSON text and its arrays in npz form.

    Which attributes an environment holds changes as it runs (a wrapper's cache fills on the
    first step), so the checkpoint keeps the state as one opaque leaf, never pickled.
    """
    arrays: dict[str, np.ndarray] = {}

    def strip(node: Any) -> Any:
        if isinstance(node, np.ndarray):
            arrays[f"array_{len(arrays)}"] = node
            return {_ARRAY_REFERENCE: f"array_{len(arrays) - 1}"}
        if isinstance(node, dict):
            return {key: strip(value) for key, value in node.items()}
        if isinstance(node, list):
            return [strip(value) for value in node]
        return node

    text = json.dumps(strip(state)).encode()
    buffer = io.BytesIO()
    np.savez(buffer, json_text=np.frombuffer(text, np.uint8), **arrays)
    return np.frombuffer(buffer.getvalue(), np.uint8).copy()


def unpack(packed: np.ndarray) -> dict[str, Any]:
    """What `pack` was given (arrays read with pickling refused)."""
    with np.load(io.BytesIO(packed.tobytes()), allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}

    def fill(node: Any) -> Any:
        if isinstance(node, dict):
            if set(node) == {_ARRAY_REFERENCE}:
                return arrays[node[_ARRAY_REFERENCE]]
            return {key: fill(value) for key, value in node.items()}
        if isinstance(node, list):
            return [fill(value) for value in node]
        return node

    return fill(json.loads(arrays.pop("json_text").tobytes().decode()))


def how_saved(env: gymnasium.Env | gymnasium.vector.VectorEnv) -> tuple[str, str]:
    """("data" | "pickle" | "none", why): how `capture` would save `env`, from its structure.

    Call it after the env's first reset (some attributes only exist from then on).
    """
    worst, culprit, kinds = "data", None, set()
    for where, layer in _layers(env):
        for name, value in _attributes(layer).items():
            kind = _attribute_kind(value)
            kinds.add(kind)
            if _RANK[kind] > _RANK[worst]:
                worst, culprit = kind, f"attribute {name!r} of {where} holds a {_type_name(value)}"
    if worst == "none":
        return (
            worst,
            f"The {culprit}, which is neither data nor picklable: the state cannot be saved.",
        )
    if worst == "pickle":
        return worst, f"The {culprit}, which is not data, so it is saved with pickle."
    simulators = "; ".join(text for kind, text in _SIMULATORS.items() if kind in kinds)
    saved_as = f" ({simulators})" if simulators else ""
    return worst, f"Every layer of {_describe(env)} holds only data{saved_as}."


def capture(env: gymnasium.Env | gymnasium.vector.VectorEnv) -> dict[str, Any]:
    """The state of `env` (a single env or a SyncVectorEnv): JSON values and numpy arrays only.

    Raises TypeError where `how_saved(env)` is "none".
    """
    return {
        "env": _describe(env),
        "layers": [_capture_layer(layer) for layer in wrapper_chain(env)],
    }


def restore(env: gymnasium.Env | gymnasium.vector.VectorEnv, state: dict[str, Any]) -> None:
    """Puts a `capture`d state into `env`, built the same way and reset once.

    Stepping `env` then continues exactly as the captured env would have. The whole state is
    checked before anything is changed: on EnvStateError `env` is untouched.
    """
    for apply in _restorers(env, state, ""):
        apply()


# --- Structure -------------------------------------------------------------------------------


def wrapper_chain(env: Any) -> list[Any]:
    """The wrapper layers of `env`, outermost first, ending with the unwrapped env."""
    layers = [env]
    while isinstance(layers[-1], gymnasium.Wrapper | gymnasium.vector.VectorWrapper):
        layers.append(layers[-1].env)
    return layers


def _layers(env: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Every layer of `env` and of its sub-envs, each with a name for messages."""
    named = []
    for layer in wrapper_chain(env):
        named.append((prefix + type(layer).__name__, layer))
        if isinstance(layer, SyncVectorEnv):
            for i, sub_env in enumerate(layer.envs):
                named += _layers(sub_env, f"{prefix}sub-environment {i}'s ")
    return named


def _describe(env: Any) -> str:
    if isinstance(env, gymnasium.vector.VectorEnv):
        base = env.unwrapped
        if isinstance(base, SyncVectorEnv):
            return f"{type(base).__name__} of {base.num_envs} x {_describe(base.envs[0])}"
        return type(base).__name__
    return env.spec.id if env.spec is not None else type(env.unwrapped).__name__


def _config_attributes(layer: Any) -> frozenset[str]:
    # A wrapper's `shared_attributes` are shared with other environments and saved by
    # whoever shares them (the normalisation statistics of a run), never per environment.
    names = set(_CONFIG_NAMES) | set(getattr(type(layer), "shared_attributes", ()))
    for cls, config in _CONFIG_ATTRIBUTES.items():
        if isinstance(layer, cls):
            names |= config
    ale_py = sys.modules.get("ale_py")
    if ale_py is not None and isinstance(layer, ale_py.env.AtariEnv):
        names.add("_action_set")  # ale_py.Action enums: the ROM's minimal action set.
    mujoco_env = sys.modules.get("gymnasium.envs.mujoco.mujoco_env")
    if mujoco_env is not None and isinstance(layer, mujoco_env.MujocoEnv):
        # The model, compiled from the environment's XML as it is built (one that changes its
        # model as it runs keeps what it changed in attributes of its own), and the renderer.
        names |= {"model", "mujoco_renderer"}
    return frozenset(names)


def _attributes(layer: Any) -> dict[str, Any]:
    """The layer's own state attributes (for a wrapper, `env` is the link to the next layer)."""
    if isinstance(layer, SyncVectorEnv):
        return {name: getattr(layer, name) for name in _VECTOR_FIELDS}
    config = _config_attributes(layer)
    if isinstance(layer, gymnasium.Wrapper | gymnasium.vector.VectorWrapper):
        config |= {"env"}
    return {
        name: value
        for name, value in vars(layer).items()
        if name not in config and not isinstance(value, _CONFIG_TYPES)
    }


def _is_data(value: Any) -> bool:
    if type(value) in _SCALAR_TYPES:
        return True
    if type(value) is np.ndarray or isinstance(value, np.generic):
        return not value.dtype.hasobject
    if isinstance(value, np.random.Generator):
        return type(value.bit_generator).__name__ in _BIT_GENERATORS
    if type(value) is np.random.RandomState:
        return value.get_state(legacy=False)["bit_generator"] in _BIT_GENERATORS
    if type(value) in (list, tuple, deque):
        return all(_is_data(item) for item in value)
    if type(value) is dict:
        return all(_is_data(key) and _is_data(item) for key, item in value.items())
    return False


def _is_ale(value: Any) -> bool:
    ale_py = sys.modules.get("ale_py")
    return ale_py is not None and isinstance(value, ale_py.ALEInterface)


def _is_mujoco(value: Any) -> bool:
    mujoco = sys.modules.get("mujoco")
    return mujoco is not None and isinstance(value, mujoco.MjData)


def _is_state_object(value: Any) -> bool:
    """An object of a registered class whose attributes are all data, or such objects."""
    return type(value) in _STATE_CLASSES and all(
        _attribute_kind(item) in ("data", "object") for item in _attributes(value).values()
    )


def _attribute_kind(value: Any) -> str:
    if _is_data(value):
        return "data"
    if _is_ale(value):
        return "ale"
    if _is_mujoco(value):
        return "mujoco"
    if _is_state_object(value):
        return "object"
    try:
        pickle.dumps(value)
    except Exception:
        return "none"
    return "pickle"


def _type_name(value: Any) -> str:
    return _type_name_of(type(value))


def _type_name_of(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


# --- Capture ---------------------------------------------------------------------------------


def _capture_layer(layer: Any) -> dict[str, Any]:
    state = {
        "class": _type_name(layer),
        "attributes": {
            name: _capture_attribute(layer, name, value)
            for name, value in _attributes(layer).items()
        },
    }
    if isinstance(layer, SyncVectorEnv):
        state["autoreset_mode"] = layer.autoreset_mode.value
        state["envs"] = [capture(sub_env) for sub_env in layer.envs]
    return state


def _bytes_array(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8).copy()


def _capture_attribute(layer: Any, name: str, value: Any) -> Any:
    kind = _attribute_kind(value)
    if kind == "data":
        return _encode(value)
    if kind == "ale":  # Emulator, sticky-action RNG included; ALE's own binary serialization.
        return {KIND: "ale", "state": _bytes_array(value.cloneState(include_rng=True).serialize())}
    if kind == "mujoco":
        return {KIND: "mujoco", **_mujoco_state(value)}
    if kind == "object":  # Attribute by attribute, as a layer.
        return {KIND: "object", **_capture_layer(value)}
    if kind == "pickle":
        return {KIND: "pickle", "bytes": _bytes_array(pickle.dumps(value))}
    raise TypeError(
        f"Cannot capture attribute {name!r} of {type(layer).__name__}: it holds a "
        f"{_type_name(value)}, which is neither data nor picklable (see how_saved)."
    )


def _mujoco_state(data: Any) -> dict[str, Any]:
    """An MjData's integration state (float64, MuJoCo's own layout) and its last step's results."""
    mujoco = sys.modules["mujoco"]
    spec = getattr(mujoco.mjtState, _MUJOCO_SPEC)
    state = np.empty(mujoco.mj_stateSize(data.model, spec), np.float64)
    mujoco.mj_getState(data.model, data, state, spec)
    return {
        "spec": _MUJOCO_SPEC,
        "state": state,
        "results": {name: getattr(data, name).copy() for name in _MUJOCO_RESULTS},
    }


def _encode(value: Any) -> Any:
    if type(value) in _SCALAR_TYPES:
        return value
    if type(value) is np.ndarray:
        return value.copy()  # The env may write into its arrays after the capture.
    if isinstance(value, np.generic):
        return {KIND: "numpy_scalar", "value": np.asarray(value)}
    if isinstance(value, np.random.Generator):
        return {KIND: "generator", "state": _encode(value.bit_generator.state)}
    if type(value) is np.random.RandomState:
        return {KIND: "random_state", "state": _encode(value.get_state(legacy=False))}
    if type(value) is list:
        return [_encode(item) for item in value]
    if type(value) is tuple:
        return {KIND: "tuple", "items": [_encode(item) for item in value]}
    if type(value) is deque:
        return {KIND: "deque", "maxlen": value.maxlen, "items": [_encode(item) for item in value]}
    return {  # A dict; keys are encoded too, as JSON would turn int keys into strings.
        KIND: "dict",
        "keys": [_encode(key) for key in value],
        "values": [_encode(item) for item in value.values()],
    }


# --- Restore ---------------------------------------------------------------------------------


def _mismatch(what: str) -> EnvStateError:
    return EnvStateError(
        f"The saved environment state does not fit this environment: {what}. Restore it into an "
        "environment built the same way as the one captured (same id, wrappers and number of "
        "sub-environments), or start new episodes instead of restoring."
    )


def _field(state: Any, key: str, where: str) -> Any:
    if not isinstance(state, dict) or key not in state:
        raise _mismatch(f"the state of {where or 'the environment'} has no {key!r} entry")
    return state[key]


# Layers that hold nothing of the environment, only which of gymnasium's checks ran: where the
# state and the environment differ in them alone, they are passed over (the bandit, registered
# without the checker since its states were first saved with it).
_CHECK_LAYERS = frozenset({_type_name_of(gymnasium.wrappers.common.PassiveEnvChecker)})


def _restorers(env: Any, state: Any, prefix: str) -> list[Callable[[], None]]:
    """Checks `state` against `env` and decodes it; returns the steps that write it into `env`."""
    layers = wrapper_chain(env)
    saved_layers = _field(state, "layers", prefix)
    saved_classes = [_field(saved, "class", prefix) for saved in saved_layers]
    if saved_classes != [_type_name(layer) for layer in layers]:
        layers = [layer for layer in layers if _type_name(layer) not in _CHECK_LAYERS]
        saved_layers = [saved for saved in saved_layers if saved["class"] not in _CHECK_LAYERS]
    if [saved["class"] for saved in saved_layers] != [_type_name(layer) for layer in layers]:
        short = [name.rsplit(".", 1)[-1] for name in saved_classes]
        raise _mismatch(
            f"{prefix}the state is of {_field(state, 'env', prefix)!r} with layers "
            f"{' > '.join(short)}, but this is {_describe(env)!r} with layers "
            f"{' > '.join(type(layer).__name__ for layer in wrapper_chain(env))}"
        )
    steps = []
    for layer, saved in zip(layers, saved_layers, strict=True):
        where = prefix + type(layer).__name__
        steps += _layer_restorers(layer, _field(saved, "attributes", where), where)
        if isinstance(layer, SyncVectorEnv):
            steps += _vector_restorers(layer, saved, where)
    return steps


def _vector_restorers(vector: SyncVectorEnv, saved: dict, where: str) -> list[Callable[[], None]]:
    saved_envs = _field(saved, "envs", where)
    if len(saved_envs) != vector.num_envs:
        raise _mismatch(
            f"the state has {len(saved_envs)} sub-environments but {where} has {vector.num_envs}"
        )
    mode = _field(saved, "autoreset_mode", where)
    if mode != vector.autoreset_mode.value:
        raise _mismatch(
            f"the state was captured with autoreset mode {mode!r} but {where} uses "
            f"{vector.autoreset_mode.value!r}"
        )
    steps = []
    for i, (sub_env, sub_state) in enumerate(zip(vector.envs, saved_envs, strict=True)):
        steps += _restorers(sub_env, sub_state, f"sub-environment {i}'s ")
    return steps


def _layer_restorers(layer: Any, saved: dict, where: str) -> list[Callable[[], None]]:
    attributes = _attributes(layer)
    missing = sorted(attributes.keys() - saved.keys())
    unexpected = sorted(saved.keys() - attributes.keys())
    if missing or unexpected:
        raise _mismatch(
            f"{where} has attributes {missing} that the state lacks and the state has "
            f"{unexpected} that {where} lacks"
        )
    return [
        _attribute_restorer(layer, name, value, saved[name], where)
        for name, value in attributes.items()
    ]


def _attribute_restorer(
    layer: Any, name: str, current: Any, saved: Any, where: str
) -> Callable[[], None]:
    kind = _attribute_kind(current)
    if kind == "none":
        raise TypeError(
            f"Cannot restore attribute {name!r} of {where}: it holds a {_type_name(current)}, "
            "which is neither data nor picklable (see how_saved)."
        )
    if kind == "ale":
        ale_state = sys.modules["ale_py"].ALEState(_tagged(saved, "ale", where)["state"].tobytes())
        return lambda: current.restoreState(ale_state)
    if kind == "mujoco":
        return _mujoco_restorer(current, _tagged(saved, "mujoco", where), f"{name!r} of {where}")
    if kind == "pickle":  # Only where this env's own structure needs pickle, never otherwise.
        value = pickle.loads(_tagged(saved, "pickle", where)["bytes"].tobytes())
        return lambda: setattr(layer, name, value)
    if kind == "object":
        saved = _tagged(saved, "object", where)
        inner = f"attribute {name!r} of {where}"
        if _field(saved, "class", inner) != _type_name(current):
            found = saved["class"]
            raise _mismatch(f"{inner} holds a {_type_name(current)} but the state a {found}")
        steps = _layer_restorers(current, _field(saved, "attributes", inner), inner)
        return lambda: [step() for step in steps]
    value = _decode(saved, f"attribute {name!r} of {where}")
    if isinstance(current, np.random.Generator) and isinstance(value, np.random.Generator):
        # In place: anything holding this generator keeps drawing from the restored stream.
        return lambda: setattr(current.bit_generator, "state", value.bit_generator.state)
    if type(current) is np.random.RandomState and type(value) is np.random.RandomState:
        return lambda: current.set_state(value.get_state(legacy=False))  # in place, as above
    if _fits_in_place(current, value):
        # In place: a buffer handed out without copying (e.g. `copy=False`) shows the state.
        return lambda: np.copyto(current, value)
    return lambda: setattr(layer, name, value)


def _mujoco_restorer(data: Any, saved: dict, where: str) -> Callable[[], None]:
    """Checks a saved MuJoCo state against `data`'s model; returns what writes it into `data`."""
    mujoco = sys.modules["mujoco"]
    spec_name = _field(saved, "spec", where)
    if spec_name != _MUJOCO_SPEC:
        raise _mismatch(f"{where} holds MuJoCo's {_MUJOCO_SPEC} but the state has {spec_name!r}")
    spec = getattr(mujoco.mjtState, _MUJOCO_SPEC)
    state = np.array(_field(saved, "state", where), np.float64)
    size = mujoco.mj_stateSize(data.model, spec)
    results = _field(saved, "results", where)
    shapes = {name: getattr(data, name).shape for name in _MUJOCO_RESULTS}
    saved_shapes = {name: np.shape(value) for name, value in results.items()}
    if state.shape != (size,) or saved_shapes != shapes:
        raise _mismatch(
            f"the MuJoCo state of {where} has {state.size} numbers and results shaped "
            f"{saved_shapes}, but this model's has {size} and {shapes}: another model"
        )

    def apply() -> None:
        mujoco.mj_setState(data.model, data, state, spec)
        for name in _MUJOCO_RESULTS:
            np.copyto(getattr(data, name), results[name])

    return apply


def _fits_in_place(current: Any, value: Any) -> bool:
    return (
        type(current) is np.ndarray
        and type(value) is np.ndarray
        and current.flags.writeable
        and current.shape == value.shape
        and current.dtype == value.dtype
    )


def _tagged(saved: Any, kind: str, where: str) -> dict:
    if not isinstance(saved, dict) or saved.get(KIND) != kind:
        found = saved.get(KIND) if isinstance(saved, dict) else type(saved).__name__
        raise _mismatch(f"{where} holds a value saved as {kind!r} but the state has {found!r}")
    return saved


def _decode(saved: Any, where: str) -> Any:
    if type(saved) in _SCALAR_TYPES:
        return saved
    if isinstance(saved, np.ndarray):
        return np.array(saved)  # A copy: restoring one state twice must not share arrays.
    if isinstance(saved, list):
        return [_decode(item, where) for item in saved]
    kind = saved.get(KIND) if isinstance(saved, dict) else None
    if kind == "numpy_scalar":
        return _field(saved, "value", where)[()]
    if kind == "generator":
        return _generator(_decode(_field(saved, "state", where), where), where)
    if kind == "random_state":
        return _random_state(_decode(_field(saved, "state", where), where), where)
    if kind in ("tuple", "deque"):
        items = [_decode(item, where) for item in _field(saved, "items", where)]
        return tuple(items) if kind == "tuple" else deque(items, _field(saved, "maxlen", where))
    if kind == "dict":
        keys = _decode(_field(saved, "keys", where), where)
        values = _decode(_field(saved, "values", where), where)
        return dict(zip(keys, values, strict=True))
    raise _mismatch(f"{where} holds data but the state has a {kind or type(saved).__name__!r}")


def _generator(state: dict, where: str) -> np.random.Generator:
    name = state.get("bit_generator")
    if name not in _BIT_GENERATORS:
        raise _mismatch(f"{where} holds a generator but the state names bit generator {name!r}")
    bit_generator = getattr(np.random, name)()
    bit_generator.state = state
    return np.random.Generator(bit_generator)


def _random_state(state: dict, where: str) -> np.random.RandomState:
    if not isinstance(state, dict) or state.get("bit_generator") not in _BIT_GENERATORS:
        raise _mismatch(f"{where} holds a RandomState but the state is not one's")
    random_state = np.random.RandomState()
    random_state.set_state(state)
    return random_state
