"""The suite's tiers, by what a test costs, so that a contributor can run the quick ones alone.

    unit         the rest, and the default for a new test: parts, the learner, packing, the
                 checkpoint store, environment state, the run folder, config, the agent
                 contract, drivers and the runner on fakes
    integration  trains through `experiments.train` or the `Runner` (a few thousand steps at
                 most), or loads, evaluates or exports a short trained run
    process      starts a subprocess, a virtual environment, Ray or TensorBoard, sends a signal,
                 or mounts a filesystem
    learning     trains until a return crosses a threshold
    slow         long checks, run on demand

A test's tier is declared by its own mark in its file or by a row of `TESTS` naming it; else it
defaults to the tier of a shared fixture it uses (`FIXTURES`, through the fixtures it uses in
turn) or of its file's row in `FILES`; else it is unit. Two declarations, or two defaults, that
disagree are an error, as is a row naming a test or a file that does not exist: conftest.py
stops the collection and lists them.
"""

from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

TIERS = ("unit", "integration", "process", "learning", "slow")

# The shared fixtures of conftest.py that decide the tier of a test using them.
FIXTURES = {
    "local_ray": "process",
    "trained_runs": "integration",
}

# A file whose tests share one tier, save those that `TESTS` names.
FILES = {
    "tests/experiments/test_custom_parts.py": "process",
    "tests/experiments/test_learner_report.py": "integration",
    "tests/experiments/test_mujoco.py": "integration",
    "tests/experiments/test_resume.py": "process",
    "tests/experiments/test_run_cli.py": "process",
    "tests/experiments/test_run_records.py": "integration",
    "tests/experiments/test_search_runs.py": "process",
    "tests/experiments/test_signals.py": "process",
    "tests/experiments/test_sweep.py": "process",
    "tests/experiments/test_tensorboard_live.py": "process",
    "tests/experiments/test_train.py": "process",
    "tests/framework/drivers/test_backends.py": "process",
    "tests/framework/storage/test_checkpointing.py": "integration",
    "tests/framework/test_runner.py": "integration",
}

_LEARNING = {
    "tests/agents/test_a2c.py": ["test_cartpole_improves_within_a_small_budget_with_one_trace"],
    "tests/agents/test_a3c.py": ["test_cartpole_improves_within_a_small_budget"],
    "tests/agents/test_ddpg.py": ["test_ddpg_pendulum_return_rises_well_above_the_start"],
    "tests/agents/test_dqn.py": ["test_cartpole_return_rises_well_above_random"],
    "tests/agents/test_nstep_q.py": ["test_asynchronous_n_step_q_learning_improves_on_cartpole"],
    "tests/agents/test_ppo.py": ["test_cartpole_is_solved_within_its_budget_with_one_trace"],
    "tests/agents/test_reinforce.py": [
        "test_bandit_policy_moves_mass_to_best_arm",
        "test_a_learning_rate_sweep_on_the_bandit_evaluates_its_trials_apart",
        "test_cartpole_return_rises_well_above_random",
    ],
}
_INTEGRATION = {
    "tests/agents/test_a2c.py": [
        "test_resume_inside_a_rollout_and_an_episode_is_exact",
        "test_a2c_learns_from_minatar_planes_through_the_shared_conv_torso",
    ],
    "tests/agents/test_a3c.py": [
        "test_round_robin_runs_are_deterministic",
        "test_round_robin_resume_is_exact_and_restores_networks_optimizer_and_counters",
        "test_resuming_with_another_number_of_workers_is_one_paragraph",
        "test_threads_resume_from_the_global_networks_optimizer_and_counters",
    ],
    "tests/agents/test_ddpg.py": ["test_exact_resume_mid_episode"],
    "tests/agents/test_dqn.py": [
        "test_soft_target_config_swaps_the_updater_and_updates_every_step",
        "test_pong_pixel_path_runs",
    ],
    "tests/agents/test_nstep_q.py": [
        "test_round_robin_resume_is_exact_for_online_target_optimizer_and_workers",
        "test_the_runner_trains_it_synchronously_over_a_vector_env",
    ],
    "tests/agents/test_sac.py": ["test_a_run_traces_its_learner_once"],
    "tests/experiments/test_faults.py": [
        "test_disk_full_stops_with_one_paragraph_keeps_the_last_checkpoint_and_resumes",
        "test_a_start_killed_before_its_first_checkpoint_simply_starts_again",
        "test_a_changed_config_is_named_when_the_checkpoint_does_not_fit",
        "test_a_crash_inside_a_prune_is_finished_by_the_next_start",
        "test_a_resume_keeps_the_seed_the_agent_and_the_environment",
        "test_a_damaged_best_snapshot_or_progress_table_is_set_aside_and_the_resume_goes_on",
    ],
    "tests/experiments/test_search.py": [
        "test_a_pruned_run_ends_checkpointed_says_why_and_a_resume_by_hand_trains_on"
    ],
    "tests/experiments/test_learner_floor.py": [
        "test_the_floor_and_the_learner_take_the_same_steps",
        "test_the_sac_floor_and_the_learner_take_the_same_steps",
    ],
    "tests/experiments/test_train.py": ["test_a_result_reports_the_curve_and_the_folder"],
    "tests/experiments/test_use_trained.py": [
        "test_videos_are_named_so_that_they_sort_in_episode_order"
    ],
    "tests/framework/test_callbacks.py": [
        "test_early_stopping_ends_a_real_run_bound_in_gin_or_given_in_python"
    ],
    "tests/framework/parts/test_wrappers.py": [
        "test_a_normalised_dqn_run_resumes_bitwise_statistics_included"
    ],
}
_PROCESS = {
    "tests/experiments/test_analyze.py": [
        "test_the_command_line_without_pandas_says_which_extra_to_install"
    ],
    "tests/experiments/test_faults.py": [
        "test_a_base_dir_on_a_read_only_filesystem_is_one_paragraph",
        "test_a_really_full_disk_loses_nothing",
        "test_a_full_disk_in_tensorflows_own_variable_save_is_one_paragraph",
    ],
    "tests/experiments/test_install.py": [
        "test_installed_package_imports_from_site_packages",
        "test_default_config_trains_from_a_non_editable_install",
    ],
    "tests/experiments/test_learner_floor.py": ["test_the_command_runs_in_a_process_of_its_own"],
    "tests/experiments/test_mujoco.py": [
        "test_a_trained_halfcheetah_is_recorded_as_video_without_a_display",
        "test_a_renderer_that_cannot_start_is_one_paragraph",
    ],
    "tests/experiments/test_parts.py": ["test_command_line"],
    "tests/experiments/test_reproduce_results.py": [
        "test_the_active_virtual_environments_interpreter_runs_every_sweep",
        "test_python_wins_and_one_without_the_package_stops_the_script_at_once",
        "test_the_mujoco_results_run_alone_at_their_lengths_and_seeds",
        "test_a_part_that_does_not_exist_is_refused_before_anything_runs",
        "test_the_classic_results_alone_need_no_mujoco",
        "test_the_pixel_part_runs_pong_in_pieces_and_sweeps_the_minatar_configs",
    ],
    "tests/experiments/test_run_records.py": [
        "test_the_recorded_command_pasted_elsewhere_reproduces_the_run"
    ],
    "tests/experiments/test_use_trained.py": [
        "test_every_agent_exports_a_savedmodel_that_acts_as_its_policy",
        "test_evaluate_prints_its_figures_records_and_logs_where_asked",
        "test_evaluate_records_whole_pong_games_of_the_pixel_ppo_policy",
        "test_the_export_command_writes_a_model_for_others_and_times_it",
    ],
    "tests/framework/compiled/test_xla_cache.py": [
        "test_a_second_run_loads_the_first_runs_program_and_learns_the_same_numbers"
    ],
    "tests/framework/parts/test_environments.py": [
        "test_building_an_atari_env_prints_no_banner_and_its_errors_still_surface"
    ],
    "tests/framework/test_console.py": [
        "test_a_worker_imports_tensorflow_silently_and_logs_in_the_short_format",
        "test_a_command_line_logs_in_the_same_format",
    ],
}
# Unit tests in files whose row says otherwise.
_UNIT = {
    "tests/experiments/test_custom_parts.py": [
        "test_the_catalogue_lists_the_parts_of_what_the_gin_file_imports"
    ],
    "tests/experiments/test_run_records.py": [
        "test_default_folder_names_the_environment_a_binding_changed",
        "test_a_binding_of_an_included_file_made_moot_by_an_override_is_not_unused",
    ],
    "tests/experiments/test_sweep.py": [
        "test_a_random_sweep_draws_the_same_trials_each_time",
        "test_a_run_whose_sweep_was_killed_says_so_in_its_log_not_a_traceback",
    ],
}


class TierError(ValueError):
    """A test's tier is contradicted, or a row of this module names nothing."""


def _rows(tables: dict[str, dict[str, list[str]]]) -> dict[str, str]:
    """Each test's row, "file::test function", and its tier, from each tier's table."""
    rows: dict[str, str] = {}
    for tier, table in tables.items():
        for path, names in table.items():
            for name in names:
                row = f"{path}::{name}"
                if rows.setdefault(row, tier) != tier:
                    raise TierError(f"{row} is in two tiers' tables: {rows[row]} and {tier}")
    return rows


# The tests of a file that are not all alike.
TESTS = _rows(
    {"learning": _LEARNING, "integration": _INTEGRATION, "process": _PROCESS, "unit": _UNIT}
)


def tier_of(path: str, name: str, marks: Iterable[str], fixtures: Iterable[str]) -> str:
    """The tier of test function `name` in `path` (relative to the repository), given the tier
    marks it carries and every fixture it uses."""
    declared = set(marks)
    if f"{path}::{name}" in TESTS:
        declared.add(TESTS[f"{path}::{name}"])
    if len(declared) > 1:
        raise TierError(f"declared {' and '.join(sorted(declared))}: keep one")
    if declared:
        return declared.pop()
    by_fixture = {FIXTURES[fixture]: fixture for fixture in fixtures if fixture in FIXTURES}
    defaults = {tier: f"fixture {fixture}" for tier, fixture in by_fixture.items()}
    if path in FILES:
        defaults.setdefault(FILES[path], f"{path}'s row")
    if len(defaults) > 1:
        reasons = ", ".join(f"{tier} by {reason}" for tier, reason in sorted(defaults.items()))
        raise TierError(f"{reasons}: name it in tests/tiers.py's TESTS")
    return defaults.popitem()[0] if defaults else "unit"


def rows_naming_nothing(root: Path, modules: Iterable[tuple[str, ModuleType]]) -> list[str]:
    """Rows of `FILES` and `TESTS` whose file is gone, or whose test is not in its file's
    module (`modules`: each collected file's path, relative to `root`, and its module)."""
    problems = [
        f"FILES names {path}: no such file" for path in FILES if not (root / path).is_file()
    ]
    names = {path: vars(module) for path, module in modules}
    for row in TESTS:
        path, name = row.split("::")
        if not (root / path).is_file():
            problems.append(f"TESTS names {row}: no such file")
        elif path in names and name not in names[path]:
            problems.append(f"TESTS names {row}: no such test in that file")
    return problems
