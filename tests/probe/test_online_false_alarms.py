"""The probe's online checks as shipped keep their stated family-wise rate on honest runs (issue wave 5 · 0/5 item
5): a small live run of the `Online` object every adapter feeds (scripts/online_false_alarms.py), at an alpha that
300 runs resolve, and both planted bugs found within a few steps at the shipped alpha. The committed table at the
shipped alpha is that script's output (a consistency check, labelled so: the evidence is the live run here and the
command that re-makes the table)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
from scipy.stats import binom

from dpaudit.probe.online import ALPHA

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("online_false_alarms", ROOT / "scripts" / "online_false_alarms.py")
ofa = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ofa)


def test_honest_runs_alarm_no_more_often_than_the_stated_rate():
    alarms, runs = ofa.false_alarms(300, 0.05, seed=11)
    assert alarms <= binom.ppf(0.999, runs, 0.05), alarms  # Ville: P(any check ever alarms) <= alpha


def test_half_the_noise_and_twice_the_rate_alarm_within_a_few_steps_at_the_shipped_alpha():
    rng = np.random.default_rng(3)
    half = [ofa.run(rng, ALPHA, sigma_run=ofa.SIGMA / 2) for _ in range(10)]
    twice = [ofa.run(rng, ALPHA, q_run=2 * ofa.Q) for _ in range(10)]
    assert all(h is not None and h <= 3 for h in half), half
    assert all(t is not None and t <= 10 for t in twice), twice
    slightly = [ofa.run(rng, ALPHA, sigma_run=0.97 * ofa.SIGMA) for _ in range(10)]  # 3% less noise: found, later
    assert all(s is not None for s in slightly) and min(slightly) > max(half), slightly


def test_the_committed_table_is_the_scripts_output_at_the_shipped_alpha():
    """Consistency check: reports/probe/online_false_alarms.md names the script's command and shows the shipped
    alpha's rate shown within it (no alarm in enough runs to bound the rate below alpha at 95%)."""
    text = (ROOT / "reports" / "probe" / "online_false_alarms.md").read_text()
    assert f"`{ofa.COMMAND}`" in text
    row = re.search(r"^\| ([0-9.]+) \(shipped\) \| ([0-9,]+) \| (\d+) \| [0-9.]+ \| ([0-9.]+) \| (.+) \|$", text, re.M)
    assert row and float(row[1]) == ALPHA
    runs, alarms, up = int(row[2].replace(",", "")), int(row[3]), float(row[4])
    assert up == round(ofa.upper(alarms, runs), 5) and up <= ALPHA and row[5].startswith("yes")
