"""Every committed config parses with today's code, so a reproduction command in a README still runs."""

from pathlib import Path

import pytest

from dpaudit import config
from dpaudit.policy import load_policy

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
RUN_CONFIGS = sorted(p for p in CONFIGS.glob("*.toml") if p.name != "policy.toml")


def test_there_are_configs():
    assert len(RUN_CONFIGS) >= 10


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.name)
def test_run_config_parses(path):
    cfg = config.load(path)
    names = [v.name for v in cfg.variants]
    assert names and len(names) == len(set(names))


def test_policy_parses():
    load_policy(CONFIGS / "policy.toml")
