"""The tiers' rules (tests/tiers.py): a declaration beats a default, and contradictions stop."""

from pathlib import Path

import pytest

from tests import tiers

ROOT = Path(__file__).resolve().parents[1]
RUN_CLI = "tests/experiments/test_run_cli.py"  # FILES: process
PPO = "tests/agents/test_ppo.py"
SOLVED = "test_cartpole_is_solved_within_its_budget_with_one_trace"  # TESTS: learning


def test_a_test_no_row_mark_or_fixture_claims_is_unit():
    assert tiers.tier_of(PPO, "test_anything", [], ["tmp_path"]) == "unit"


def test_a_declaration_beats_the_files_row_and_the_fixtures():
    assert tiers.tier_of(RUN_CLI, "test_x", [], []) == "process"
    assert tiers.tier_of(RUN_CLI, "test_x", ["slow"], []) == "slow"
    assert tiers.tier_of(PPO, SOLVED, [], ["trained_runs"]) == "learning"
    assert tiers.tier_of(PPO, "test_x", [], ["trained_runs"]) == "integration"


def test_declarations_that_disagree_are_an_error():
    with pytest.raises(tiers.TierError, match="declared learning and unit"):
        tiers.tier_of(PPO, SOLVED, ["unit"], [])
    assert tiers.tier_of(PPO, SOLVED, ["learning"], []) == "learning"  # agreeing: one tier


def test_defaults_that_disagree_are_an_error():
    with pytest.raises(tiers.TierError, match="integration by fixture trained_runs, process by"):
        tiers.tier_of(RUN_CLI, "test_x", [], ["trained_runs"])


def test_rows_naming_no_file_or_no_test_are_found(monkeypatch):
    monkeypatch.setitem(tiers.FILES, "tests/test_gone.py", "process")
    monkeypatch.setitem(tiers.TESTS, f"{PPO}::test_renamed", "learning")
    ppo = type("Module", (), {SOLVED: None})
    assert tiers.rows_naming_nothing(ROOT, [(PPO, ppo)]) == [
        "FILES names tests/test_gone.py: no such file",
        f"TESTS names {PPO}::test_renamed: no such test in that file",
    ]
    not_collected = tiers.rows_naming_nothing(ROOT, [])  # test names unchecked without modules
    assert not_collected == ["FILES names tests/test_gone.py: no such file"]
