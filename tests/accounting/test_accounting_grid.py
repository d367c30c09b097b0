"""Accounting without torch and with the PLD grid as arrays: the same numbers as dp_accounting and Opacus.

* dpaudit.accounting.dpa_pld_grid builds dp_accounting's subsampled-Gaussian PLDs (pessimistic connect-the-dots,
  optimistic privacy buckets) with the grid evaluated as numpy arrays: PMF by PMF and epsilon by epsilon equal
  to dp_accounting's own construction;
* dpaudit.accounting.opacus_modules runs Opacus' RDP and PRV accountants without importing torch: the same
  answers as Opacus imported the usual way, and a fresh process accounts a card without torch and can still
  import the real Opacus afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from dpaudit.accounting import dpa_pld, dpa_pld_grid, opacus_modules
from dpaudit.accounting.events import SubsampledGaussian

# (sigma, q): tiny to large sampling rates, small to large noise
MECHANISMS = [(0.97, 0.0227), (0.9, 0.004), (0.5, 0.001), (2.0, 0.3), (0.7, 0.99)]


@pytest.mark.parametrize("pessimistic", [True, False])
@pytest.mark.parametrize("sigma,q", MECHANISMS)
def test_grid_pld_equals_dp_accounting(sigma, q, pessimistic):
    disc = 1e-3
    ours = dpa_pld_grid.gaussian_pld(sigma, q, disc, pessimistic)
    ref = pld_lib.from_gaussian_mechanism(sigma, pessimistic_estimate=pessimistic, value_discretization_interval=disc,
                                          sampling_prob=q, use_connect_dots=pessimistic)
    for mine, theirs in ((ours._pmf_remove, ref._pmf_remove), (ours._pmf_add, ref._pmf_add)):
        a, b = mine.to_dense_pmf(), theirs.to_dense_pmf()
        assert a._lower_loss == b._lower_loss and len(a._probs) == len(b._probs)
        np.testing.assert_allclose(a._probs, b._probs, rtol=1e-10, atol=1e-16)
        assert a._infinity_mass == pytest.approx(b._infinity_mass, rel=1e-9, abs=1e-300)
    for steps in (1, 100, 3000):
        for delta in (1e-5, 1e-8):
            e_ours = ours.self_compose(steps).get_epsilon_for_delta(delta)
            e_ref = ref.self_compose(steps).get_epsilon_for_delta(delta)
            # equal PMFs (to 1e-12) give epsilons equal to ~1e-7, up to dp_accounting's FFT round-off at delta = 1e-8
            # after 3000 compositions: 1.3e-6 relative on this machine's NumPy (sigma 0.9, q 0.004), hence 5e-6
            assert e_ours == pytest.approx(e_ref, rel=5e-6, abs=1e-9), (steps, delta)


def test_grid_pld_at_dp_accountings_default_grid():
    ev = SubsampledGaussian(0.004, 0.9, 2000)
    for pessimistic in (True, False):
        ref = pld_lib.from_gaussian_mechanism(0.9, pessimistic_estimate=pessimistic, value_discretization_interval=1e-4,
                                              sampling_prob=0.004, use_connect_dots=pessimistic)
        assert dpa_pld._epsilon([ev], 1e-5, "add_remove", 1e-4, pessimistic) == pytest.approx(
            ref.self_compose(2000).get_epsilon_for_delta(1e-5), rel=1e-8)


def test_pld_interval_contains_the_tight_epsilon_and_refines_the_upper_end():
    ev = [SubsampledGaussian(0.0005504, 1.037, 5000)]
    lo, hi, detail = dpa_pld.interval(ev, 1e-5)
    fine = dpa_pld._epsilon(ev, 1e-5, "add_remove", 1e-5, True)  # the tightest pessimistic value here
    coarse = dpa_pld._epsilon(ev, 1e-5, "add_remove", 1e-4, True)
    assert lo <= fine <= hi and hi < coarse  # refined below dp_accounting's default grid
    assert (hi - fine) <= 1e-4 * fine
    assert "(upper)" in detail and "(lower)" in detail


def _fresh_process(code: str) -> str:
    """The last line ``code`` prints in a new interpreter, with the accounting cache off."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"DPAUDIT_ACCOUNTING_CACHE": "0", "PATH": "/usr/bin:/bin"})
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("sigma,q,steps", [(0.97, 0.0227, 99), (0.8, 0.004, 2000), (1.2, 0.3, 50)])
def test_opacus_accountants_without_torch_equal_opacus(sigma, q, steps):
    from opacus.accountants import PRVAccountant
    from opacus.accountants.analysis import rdp as real_rdp

    light_rdp = opacus_modules.module("accountants.analysis.rdp", light=True)
    light_prv = opacus_modules.module("accountants.prv", light=True)
    assert light_rdp is not real_rdp and light_rdp.__file__ == real_rdp.__file__  # the same file, run apart
    orders = [1.5, 2, 4, 8, 16, 32]
    assert light_rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=orders) == pytest.approx(
        list(real_rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=orders)), rel=1e-12)
    mine, theirs = light_prv.PRVAccountant(), PRVAccountant()
    mine.history = theirs.history = [(sigma, q, steps)]
    assert mine.get_epsilon(delta=1e-5) == pytest.approx(theirs.get_epsilon(delta=1e-5), rel=1e-12)


def test_a_fresh_process_accounts_a_card_without_torch_and_can_still_import_opacus(tmp_path):
    card = tmp_path / "card.json"
    from dpaudit.cli import main

    main(["card", "--sigma", "0.97", "--sample-rate", "0.0227", "--steps", "99", "--delta", "1e-5",
          "--epsilon", "8", "--out", str(card)])
    code = (
        "import json, sys\n"
        "from dpaudit.claim.card import load_card\n"
        "from dpaudit.claim.reaccount import reaccount\n"
        f"acct = reaccount(load_card({str(card)!r}))\n"
        "no_torch = 'torch' not in sys.modules and 'opacus' not in sys.modules\n"
        "import opacus\n"
        "print(json.dumps({'status': acct.status, 'accountants': [r.accountant for r in acct.results],\n"
        "                  'no_torch': no_torch, 'engine': hasattr(opacus, 'PrivacyEngine'),\n"
        "                  'optimizers_real': opacus.optimizers.DPOptimizer.__module__.startswith('opacus.')}))\n")
    got = json.loads(_fresh_process(code))
    assert got == {"status": "verified", "accountants": ["rdp", "prv", "pld", "dpa_rdp"], "no_torch": True,
                   "engine": True, "optimizers_real": True}


def test_threaded_accountants_import_the_real_opacus_once_where_torch_is_loaded(tmp_path):
    """A trainer or ``evaluate`` process has torch: the accountants' threads then import Opacus itself, once
    (two threads importing Opacus' circular package at once would deadlock)."""
    code = (
        "import sys, torch\n"
        "from dpaudit.accounting import SubsampledGaussian, intervals\n"
        "done, _ = intervals([SubsampledGaussian(0.01, 1.0, 500)], 1e-5)\n"
        "print(sorted(r.accountant for r in done), 'dpaudit._opacus' not in sys.modules, 'opacus' in sys.modules)\n")
    assert _fresh_process(code) == "['dpa_rdp', 'pld', 'prv', 'rdp'] True True"
