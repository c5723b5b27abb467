"""Where a learner's step spends its time, op by op, read from TensorFlow's profiler.

The hardware floor (`hardware_floor.py`) says how far a learner is from its products' rate; this
says what the rest is: the time of every op the compute threads ran during a learner's calls
(XLA's thunks for a compiled learner, TensorFlow's kernels otherwise) per gradient step, each
op's kind beside it: products (dots, convolutions), reductions, copies, selects (XLA's form of
a guarded update), the rest. Thread time: ops on both cores at once count twice, so the column
may sum to more than the step's wall time, which the last line gives (the calls' Python
included). `python -m experiments.learner_floor --profile_calls=10` prints it for a DQN or SAC
config.
"""

import collections
import dataclasses
import glob
import re
import tempfile
import time
from collections.abc import Callable

import tensorflow as tf

# Profiler events that hold ops rather than being one: the thunk executor's and thread pools'.
CONTAINERS = re.compile(r"ThunkExecutor::|ThreadPool::|^end:|^while(\.\d+)?$|^Execute")
KINDS = (
    ("product", re.compile(r"MatMul|dot|Conv2D|convolution")),
    ("reduction", re.compile(r"reduce|Sum|L2Loss|Mean|Max$")),
    ("copy", re.compile(r"^copy")),
    ("select", re.compile(r"select")),
)


@dataclasses.dataclass
class Profile:
    """Per op name: thread seconds and runs, over `steps` gradient steps in `seconds` of wall
    time."""

    seconds_by_op: dict[str, float]
    runs_by_op: dict[str, int]
    steps: int
    seconds: float

    def by_kind(self) -> dict[str, float]:
        """Thread seconds per kind of op (`kind_of`)."""
        totals = collections.Counter()
        for name, seconds in self.seconds_by_op.items():
            totals[kind_of(name)] += seconds
        return dict(totals)

    def table(self, top: int) -> str:
        total = sum(self.seconds_by_op.values())
        lines = [f"{'us/step':>9}  {'share':>5}  {'runs/step':>9}  kind       op"]
        ranked = sorted(self.seconds_by_op.items(), key=lambda item: -item[1])
        for name, seconds in ranked[:top]:
            lines.append(
                f"{1e6 * seconds / self.steps:9.1f}  {seconds / total:5.1%}  "
                f"{self.runs_by_op[name] / self.steps:9.2f}  {kind_of(name):9}  {name}"
            )
        kinds = ", ".join(
            f"{kind} {1e6 * seconds / self.steps:.0f} us ({seconds / total:.0%})"
            for kind, seconds in sorted(self.by_kind().items(), key=lambda item: -item[1])
        )
        lines.append(
            f"{self.steps} gradient steps: ops {1e6 * total / self.steps:.0f} us of thread time "
            f"a step ({kinds}); wall {1e6 * self.seconds / self.steps:.0f} us a step, profiled"
        )
        return "\n".join(lines)


def kind_of(name: str) -> str:
    """An op's kind by its name: XLA names a thunk after its HLO (`MatMul.61`,
    `add_select_fusion.3`), TensorFlow a kernel after its op."""
    return next((kind for kind, pattern in KINDS if pattern.search(name)), "other")


def read_ops(logdir: str) -> tuple[dict[str, float], dict[str, int]]:
    """Thread seconds and runs per op name on the compute threads of the profile in `logdir`
    (Eigen's pools, which run XLA's thunks and TensorFlow's kernels; the Python thread's events
    are calls, XLA's codegen threads' are compiling)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    seconds, runs = collections.Counter(), collections.Counter()
    for path in glob.glob(f"{glob.escape(logdir)}/**/*.xplane.pb", recursive=True):
        space = xplane_pb2.XSpace()
        with open(path, "rb") as file:
            space.ParseFromString(file.read())
        for plane in space.planes:
            if not plane.name.startswith("/host:CPU"):
                continue
            names = {key: value.name for key, value in plane.event_metadata.items()}
            for line in plane.lines:
                if "Eigen" not in line.name:
                    continue
                for event in line.events:
                    name = names.get(event.metadata_id, "?")
                    if CONTAINERS.search(name):
                        continue
                    seconds[name] += event.duration_ps * 1e-12
                    runs[name] += 1
    return dict(seconds), dict(runs)


def profile(call: Callable[[], object], calls: int, steps_per_call: int) -> Profile:
    """`calls` calls of `call` (a learner's, already traced and compiled) under the profiler."""
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        start = time.perf_counter()
        try:
            for _ in range(calls):
                call()
        finally:
            seconds = time.perf_counter() - start
            tf.profiler.experimental.stop()
        seconds_by_op, runs_by_op = read_ops(logdir)
    if not seconds_by_op:
        raise ValueError(
            "op_profile: the profile holds no op on TensorFlow's compute threads; profile a "
            "call that runs a compiled learner step (a learner's `run`), not Python alone."
        )
    return Profile(seconds_by_op, runs_by_op, calls * steps_per_call, seconds)
