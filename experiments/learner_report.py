"""The hardware-floor report of one config: trains it, then sets its learner's in-loop seconds
per gradient step beside the floor of the step's own products (`op_census.py`, `op_timing.py`)
at this process's threads (`experiments/hardware_floor.py` is its command line)."""

import resource
import tempfile

from experiments.op_census import of_learner
from experiments.op_timing import floor_of
from framework.compiled import threads as compiled_threads


def learner_in_loop(gin_file: str, bindings: list[str], num_steps: int) -> dict:
    """Trains `num_steps` and returns the learner, its seconds per gradient step in the loop
    without its first call, that call's seconds (tracing and compiling), and the loop's
    environment steps per second."""
    import agents  # noqa: F401  (registers every configurable the config may name)
    import experiments

    bindings = [*bindings, f"Runner.num_steps = {num_steps}", f"Runner.eval_interval = {num_steps}"]
    with tempfile.TemporaryDirectory() as base_dir:
        runner = experiments.train([gin_file], bindings, base_dir).runner
    learner = runner.agent.learner
    steps = runner.state.gradient_steps - learner.first_call_steps
    if steps <= 0:
        raise ValueError(
            f"{gin_file} made no gradient step after its first learner call in {num_steps} "
            "environment steps: train it longer (hardware_floor's --num_steps, learner_floor's "
            "--in_loop_steps)."
        )
    return {
        "learner": learner,
        "seconds_per_step": (runner.time_split()["learner"] - learner.first_call_seconds) / steps,
        "first_call_seconds": learner.first_call_seconds,
        "steps_per_second": num_steps / runner.loop_seconds,
    }


def report(gin_file: str, bindings: list[str], num_steps: int, calls: int) -> str:
    """The op table, the floor and the learner beside it, as the command prints them."""
    measured = learner_in_loop(gin_file, bindings, num_steps)
    floor = floor_of(*of_learner(measured["learner"]), calls=calls)
    seconds = measured["seconds_per_step"]
    threads = compiled_threads.settings()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return "\n".join(
        [
            f"== {gin_file} at {threads['tf_intra_op_threads']} intra-op / "
            f"{threads['tf_inter_op_threads']} inter-op threads",
            floor.table(),
            f"step: {floor.flops / 1e6:.1f} MFLOP; floor {1e3 * floor.seconds:.3f} ms "
            f"({floor.rate:.0f} GFLOP/s); learner in the loop {1e3 * seconds:.3f} ms "
            f"({floor.flops / seconds / 1e9:.0f} GFLOP/s) = {floor.seconds / seconds:.0%} of the "
            f"floor; first call (tracing, compiling) {measured['first_call_seconds']:.1f} s; "
            f"process peak memory {peak_mb:.0f} MB",
        ]
    )
