"""A MuJoCo environment's frames drawn in a child process without TensorFlow, for videos
(`experiments.evaluate --video`, `experiments.load(..., render_mode="rgb_array")`).

Without a GPU, MuJoCo draws off screen through EGL with Mesa's llvmpipe, which links an LLVM of
its own; TensorFlow carries another, and a process holding both crashes as it draws or as it
exits (a segmentation fault, or `free(): invalid pointer`). So the evaluation's environment
steps where the policy acts, as always, and each frame is drawn by a copy of the environment
in a child process: set to the simulation's state (`mj_setState`, then `mj_forward` for the
poses it draws) and rendered there. The child draws through EGL where there is no display
(`MUJOCO_GL=egl`, unless MUJOCO_GL is set): GLFW, MuJoCo's default, needs one.

    python -m experiments.mujoco_frames    the child: reads the environment, then states, on
                                           stdin, and writes a frame for each on stdout
"""

import io
import os
import pickle
import subprocess
import sys
from typing import BinaryIO

import gymnasium as gym
import numpy as np

from experiments.errors import RunError

_SPEC = "mjSTATE_INTEGRATION"  # everything a frame's poses follow from


def _is_mujoco(env: gym.Env) -> bool:
    mujoco_env = sys.modules.get("gymnasium.envs.mujoco.mujoco_env")
    return mujoco_env is not None and isinstance(env.unwrapped, mujoco_env.MujocoEnv)


def drawn_apart(env: gym.Env) -> gym.Env:
    """`env` with its frames drawn in a child process if it is a MuJoCo environment built with
    `render_mode="rgb_array"`; else `env` itself."""
    if env.render_mode != "rgb_array" or not _is_mujoco(env):
        return env
    return FramesDrawnApart(env)


class FramesDrawnApart(gym.Wrapper):
    """`render()` returns the frame a child process draws of this environment's state."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        spec = env.unwrapped.spec
        kwargs = {key: value for key, value in spec.kwargs.items() if key != "render_mode"}
        child_environment = dict(os.environ)
        if sys.platform.startswith("linux") and not (
            os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
        ):
            child_environment.setdefault("MUJOCO_GL", "egl")
        self._backend = child_environment.get("MUJOCO_GL", "glfw (MuJoCo's default)")
        self._child = subprocess.Popen(
            [sys.executable, "-m", "experiments.mujoco_frames"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=child_environment,
        )
        pickle.dump((spec.id, kwargs), self._child.stdin)  # to our own child: trusted
        self._child.stdin.flush()

    def render(self) -> np.ndarray:
        """The frame of the simulation as it is now, [height, width, 3] uint8."""
        import mujoco

        data = self.env.unwrapped.data
        spec = getattr(mujoco.mjtState, _SPEC)
        state = np.empty(mujoco.mj_stateSize(data.model, spec), np.float64)
        mujoco.mj_getState(data.model, data, state, spec)
        try:
            _send(self._child.stdin, state)
            frame = _receive(self._child.stdout)
        except OSError:  # a closed pipe: the child ended
            frame = None
        if frame is None:
            code = self._child.wait()
            raise RunError(
                f"The process drawing MuJoCo's frames ended (exit code {code}; its error "
                f"above). It drew with MUJOCO_GL={self._backend}: egl needs libEGL (Mesa's "
                "libegl1), glfw a display, osmesa libOSMesa; set MUJOCO_GL to the one this "
                "machine has."
            )
        return frame

    def close(self) -> None:
        if self._child.poll() is None:
            self._child.stdin.close()  # the child's end of input: it closes and exits
            self._child.wait()
        super().close()


def main() -> None:
    """The child: builds the environment it is sent, then draws each state it is sent."""
    from framework.parts.environments import make_env

    source = sys.stdin.buffer
    sink = os.fdopen(os.dup(1), "wb")  # the frames' own: whatever else prints goes to stderr
    os.dup2(2, 1)
    env_id, kwargs = pickle.load(source)
    env = make_env(env_id, env_kwargs=kwargs, render_mode="rgb_array")
    env.reset(seed=0)
    base = env.unwrapped
    import mujoco

    spec = getattr(mujoco.mjtState, _SPEC)
    while (state := _receive(source)) is not None:
        mujoco.mj_setState(base.model, base.data, state, spec)
        mujoco.mj_forward(base.model, base.data)
        _send(sink, env.render())
    env.close()


def _send(stream: BinaryIO, array: np.ndarray) -> None:
    """`array` in npy form after its length in bytes (8, little-endian): pipes cannot seek."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    stream.write(len(buffer.getvalue()).to_bytes(8, "little") + buffer.getvalue())
    stream.flush()


def _receive(stream: BinaryIO) -> np.ndarray | None:
    """The next array `_send` wrote, or None where the other end closed the pipe."""
    length = stream.read(8)
    if len(length) < 8:
        return None
    payload = stream.read(int.from_bytes(length, "little"))
    return np.load(io.BytesIO(payload), allow_pickle=False)


if __name__ == "__main__":
    main()
