"""The benchmark script's tables, for the synchronous and the asynchronous driver."""

from experiments import benchmark


def _result(split: dict, gradient_steps: int) -> dict:
    return {
        "seed": 0,
        "seconds": 10.0,
        "steps": 20_000,
        "curve": [(10_000, 100.0), (20_000, 480.0)],
        "split": split,
        "gradient_steps": gradient_steps,
        "first_call_seconds": 1.0 if "learner" in split else 0.0,
        "first_call_steps": 1 if "learner" in split else 0,
        "loop_seconds": 8.0,
        "save_ms": 5.0,
        "save_mb": 0.1,
        "resume_s": 0.01,
    }


def test_the_summary_reads_both_drivers_results():
    runner = benchmark.summarize(
        "dqn.gin", [_result({"learner": 5.0, "environment": 2.0}, 5001)], 475
    )
    assert "reached 475 in 1/1 seeds" in runner
    assert "in-loop 2500 steps/s" in runner
    # (5 s - 1 s first call) / 5000 later steps = 800 us
    assert "800 us per step after them" in runner
    a3c = benchmark.summarize("a3c.gin", [_result({"workers": 6.0, "evaluation": 1.0}, 500)], 475)
    assert "workers 6.0 s (60%)" in a3c and "other (loop, counters) 3.0 s (30%)" in a3c
    assert "us per gradient step" not in a3c  # its workers' learners are not the driver's
