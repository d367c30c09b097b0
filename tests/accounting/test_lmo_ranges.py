"""An LMO card outside the range its accountant's numerics hold is not accounted by it (not applicable: the claim is
unverifiable, never a crash), a malformed dimension is refused in one line, and a long run's lower value is skipped
rather than composed: a hostile round's fuzz of the committed LMO card (each leaf at 1e308, 1e-308, 5e-324, 1e15;
dimension 0 and -1; 10^8 steps) found exit 3 (overflow, division by zero, empty max, index errors), runs of minutes
and one of 19 GB before these checks."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest

from dpaudit.accounting import NotApplicable, disk_cache, event_from_dict, interval
from dpaudit.cli import main
from dpaudit.errors import DpauditError

CARD = Path(__file__).resolve().parents[2] / "reports" / "lmo_dp" / "laplace-fixed-eps0p63" / "checkpoint" / \
    "privacy_card.json"


def _event(**change) -> dict:
    card = json.loads(CARD.read_text())
    ev = copy.deepcopy([e for e in card["mechanism"]["events"] if e["type"] == "subsampled_laplace_mixture"][0])
    for k, v in change.items():
        if k.startswith("noise_"):
            ev["noise"][k[6:]] = v
        else:
            ev[k] = v
    return ev


@pytest.mark.parametrize("change,needle", [
    ({"noise_a3": 1e308}, "a3 = 1e+308"),
    ({"noise_a3": 1e-308}, "a3 = 1e-308"),
    ({"noise_u_high": 1e15}, "u_high = 1e+15"),
    ({"noise_a1": 1.0, "noise_gamma_k": 1e-6}, "[0.01, 1e+06]; gamma_k = 1e-06"),
    ({"clipping_norm": 5e-324}, "clipping_norm x E[Y]"),
    ({"clipping_norm": 34.0}, "here it is 98.8"),
])
def test_noise_outside_the_accountants_range_is_not_accounted_by_it(change, needle):
    t = time.time()
    with disk_cache.bypassed(), pytest.raises(NotApplicable) as e:
        interval([event_from_dict(_event(**change))], 1e-10, "lmo_vector")
    assert needle in str(e.value) and time.time() - t < 5


@pytest.mark.parametrize("dimension", [0, -1, 2.5e7, True])
def test_a_dimension_that_is_not_a_count_is_refused(dimension):
    with pytest.raises(DpauditError, match="LMO dimension"):
        event_from_dict(_event(dimension=dimension))


def test_account_card_says_unverifiable_and_why(tmp_path, capsys):
    card = json.loads(CARD.read_text())
    card["mechanism"]["events"] = [_event(noise_a1=1e308)]
    (tmp_path / "c.json").write_text(json.dumps(card))
    assert main(["account", "--card", str(tmp_path / "c.json")]) == 1
    out = capsys.readouterr().out
    assert "a1 = 1e+308" in out and "unverifiable" in out, out


def test_a_long_run_has_its_upper_value_and_no_lower_value_in_seconds():
    """10^8 steps (the largest count any card may state): the exact PLD of the lower value would need a grid of
    billions of cells; the upper value (RDP, linear in the steps) is still given."""
    t = time.time()
    with disk_cache.bypassed():
        r = interval([event_from_dict(_event(steps=10 ** 8))], 1e-10, "lmo_vector")
    assert r.lower is None and "no lower value" in r.detail
    assert r.epsilon is not None and r.epsilon > 0
    assert time.time() - t < 60
    with disk_cache.bypassed():  # the committed run's 46 steps keep their exact lower value
        r46 = interval([event_from_dict(_event())], 1e-10, "lmo_vector")
    assert r46.lower is not None and 0 < r46.lower <= r46.epsilon


@pytest.mark.parametrize("clipping_norm", ["1e-250", "1e-7"])
def test_lmo_account_outside_the_range_prints_the_papers_claim_and_why_it_declines(clipping_norm, capsys):
    """`dpaudit lmo account` re-accounted without the range check a card gets: C = 1e-320 divided by zero (exit 3,
    a hostile round by argument, 2026-12-06). Now a C below 1e-300 is refused before any work (by `lmo search` too,
    which ran its whole grid first), and where the vector accountant's range ends the paper's claim is printed and
    the re-account declines, naming the range, as for a card; the JSON says null."""
    from dpaudit.cli import main

    noise = '{"a1": 0.3, "a2": 0.2, "a3": 0.5, "gamma_k": 2, "gamma_theta": 0.5, "exp_rate": 5, "u_low": 0.5, "u_high": 1.5}'
    argv = ["lmo", "account", "--noise", noise, "--delta", "1e-5", "--steps", "10", "--sample-rate", "0.01",
            "--clipping-norm", clipping_norm]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "dpaudit re-account: not applicable" in out.out and "[1e-06, 10]" in out.out and not out.err, out
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reaccounted_epsilon"] is None


@pytest.mark.parametrize("command,clipping_norm,needle", [
    ("account", "1e308", "diverges"), ("account", "1e-320", ">= 1e-300"), ("account", "nan", ">= 1e-300"),
    ("search", "1e-320", ">= 1e-300"), ("search", "0", ">= 1e-300"), ("search", "inf", ">= 1e-300")])
def test_a_clipping_norm_at_the_floats_limits_is_one_line_without_warnings(command, clipping_norm, needle, capsys):
    from dpaudit.cli import main

    noise = '{"a1": 0.3, "a2": 0.2, "a3": 0.5, "gamma_k": 2, "gamma_theta": 0.5, "exp_rate": 5, "u_low": 0.5, "u_high": 1.5}'
    mechanism = ["--noise", noise] if command == "account" else ["--epsilon", "1"]
    t = time.time()
    assert main(["lmo", command, *mechanism, "--delta", "1e-5", "--steps", "10", "--sample-rate", "0.01",
                 "--clipping-norm", clipping_norm]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and needle in err and "Warning" not in err, err
    assert time.time() - t < 2  # refused before the search's grid
