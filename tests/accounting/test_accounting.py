"""Accountants against published / independently computed values (Li et al. SST-2; issue #3)."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpaudit import accounting
from dpaudit.accounting import SubsampledGaussian
from dpaudit.errors import DpauditError

SST2 = dict(sample_rate=2048 / 67349, steps=99)
DELTA_SST2 = 1 / (2 * 67349)


def eps(acc, sigma, q, T, delta):
    return accounting.compute([SubsampledGaussian(q, sigma, T)], delta, acc).epsilon


def test_li_sst2_eps3():
    q, T = SST2["sample_rate"], SST2["steps"]
    assert eps("rdp", 0.946, q, T, DELTA_SST2) == pytest.approx(3.00, abs=0.02)
    assert eps("dpa_rdp", 0.946, q, T, DELTA_SST2) == pytest.approx(3.00, abs=0.02)
    assert eps("pld", 0.946, q, T, DELTA_SST2) == pytest.approx(2.50, abs=0.02)
    assert eps("prv", 0.946, q, T, DELTA_SST2) == pytest.approx(2.51, abs=0.02)


def test_li_sst2_eps8():
    q, T = SST2["sample_rate"], SST2["steps"]
    assert eps("rdp", 0.641, q, T, DELTA_SST2) == pytest.approx(7.97, abs=0.03)
    assert eps("pld", 0.641, q, T, DELTA_SST2) == pytest.approx(6.74, abs=0.03)


def test_q001_reference():
    assert eps("pld", 1.0, 0.01, 1000, 1e-5) == pytest.approx(1.83, abs=0.01)
    assert eps("rdp", 1.0, 0.01, 1000, 1e-5) == pytest.approx(2.10, abs=0.01)


def test_prv_and_pld_agree_within_2pct():
    for sigma, q, T in [(0.946, SST2["sample_rate"], 99), (1.0, 0.01, 1000), (0.8, 0.02, 300)]:
        a, b = eps("prv", sigma, q, T, 1e-5), eps("pld", sigma, q, T, 1e-5)
        assert abs(a - b) / b < 0.02


@pytest.fixture
def searched(monkeypatch):
    """calibrate_sigma runs its search here (no answer from this machine's accounting cache or the process memo)."""
    monkeypatch.setenv("DPAUDIT_ACCOUNTING_CACHE", "0")
    accounting._calibrate_sigma_once.cache_clear()
    yield
    accounting._calibrate_sigma_once.cache_clear()


@pytest.mark.parametrize("acc", ["rdp", "prv", "pld"])
def test_calibration_inverts(acc, searched):
    s = accounting.calibrate_sigma(3.0, DELTA_SST2, SST2["sample_rate"], 99, accountant=acc)
    e = eps(acc, s, SST2["sample_rate"], 99, DELTA_SST2)
    assert e <= 3.0 + 1e-9  # never above the target
    assert e > 2.95  # and tight
    if acc == "rdp":
        assert s == pytest.approx(0.946, abs=0.002)  # Li et al.'s sigma for eps = 3


def test_composition_of_phases_is_larger():
    a = SubsampledGaussian(0.01, 1.0, 500)
    b = SubsampledGaussian(0.05, 2.0, 100)
    for acc in ("rdp", "pld"):
        both = accounting.compute([a, b], 1e-5, acc).epsilon
        assert both > accounting.compute([a], 1e-5, acc).epsilon
        assert both > accounting.compute([b], 1e-5, acc).epsilon


@settings(max_examples=15, deadline=None)
@given(sigma=st.floats(0.7, 3.0), q=st.floats(0.002, 0.1), T=st.integers(10, 500))
def test_monotone(sigma, q, T):
    e = eps("rdp", sigma, q, T, 1e-5)
    assert eps("rdp", sigma, q, T + 50, 1e-5) >= e - 1e-9
    assert eps("rdp", sigma, min(1.0, q * 1.5), T, 1e-5) >= e - 1e-9
    assert eps("rdp", sigma * 1.2, q, T, 1e-5) <= e + 1e-9


@pytest.mark.parametrize("kwargs,needle", [
    (dict(sample_rate=0.01, noise_multiplier=0.0, steps=10), "sigma"),
    (dict(sample_rate=1.5, noise_multiplier=1.0, steps=10), "sample rate"),
    (dict(sample_rate=0.01, noise_multiplier=1.0, steps=0), "steps"),
])
def test_bad_mechanism(kwargs, needle):
    with pytest.raises(DpauditError, match=needle):
        SubsampledGaussian(**kwargs)


def test_bad_delta_and_accountant():
    ev = [SubsampledGaussian(0.01, 1.0, 10)]
    with pytest.raises(DpauditError, match="delta"):
        accounting.compute(ev, 1.0, "rdp")
    with pytest.raises(DpauditError, match="unknown accountant"):
        accounting.compute(ev, 1e-5, "moments")
    with pytest.raises(DpauditError, match="target epsilon"):
        accounting.calibrate_sigma(0.0, 1e-5, 0.01, 10)


def test_group_lemma_by_hand():
    from dpaudit.accounting import group

    # Chua et al. setting, delta = 1e-5: user eps 1 with k = 2 -> record (0.5, 1e-5 / (1 + e^0.5))
    e, d = group.record_level_target(1.0, 1e-5, 2)
    assert e == 0.5 and d == pytest.approx(1e-5 / (1 + 2.718281828 ** 0.5))
    assert d == pytest.approx(3.78e-6, rel=2e-3)
    assert group.record_level_target(8.0, 1e-5, 5)[1] == pytest.approx(1.33e-8, rel=5e-3)
    k_eps, k_delta = group.lemma(e, d, 2)
    assert k_eps == pytest.approx(1.0) and k_delta == pytest.approx(1e-5)
    with pytest.raises(DpauditError, match="group size"):
        group.lemma(1.0, 1e-5, 0)
    # an epsilon whose exp overflows (a card may claim any finite epsilon): the group's delta is infinite, not an error
    assert group.lemma(1e308, 1e-5, 3) == (math.inf, math.inf) and group.lemma(800.0, 0.0, 2) == (1600.0, 0.0)
    assert group.lemma(300.0, 1e-5, 2)[1] == pytest.approx(1e-5 * (1 + math.exp(300.0)))


def test_group_mixture_accounting():
    from dpaudit.accounting import group

    ev = [SubsampledGaussian(0.01, 1.0, 1000)]
    # k = 1 is plain PLD
    from dpaudit.accounting import dpa_pld

    plain = dpa_pld._epsilon(ev, 1e-5, "add_remove", group.MIXTURE_DISCRETISATION, True)
    assert group.subsampled_gaussian_group_epsilon(ev, 1e-5, 1) == pytest.approx(plain, rel=1e-6)
    # a group of 3 costs more than one record and at most what the lemma gives from the record-level PLD
    g3 = group.subsampled_gaussian_group_epsilon(ev, 1e-5, 3)
    rec_delta = 1e-5 / sum(2.718281828 ** (i * 1.9) for i in range(3))
    lemma_eps = group.lemma(eps("pld", 1.0, 0.01, 1000, rec_delta), rec_delta, 3)[0]
    assert eps("pld", 1.0, 0.01, 1000, 1e-5) < g3 < lemma_eps


def _card(claim_eps, sampler="poisson", sigma=1.0):
    from dpaudit.claim.card import Claim, PrivacyCard

    return PrivacyCard(claim=Claim(epsilon=claim_eps, delta=1e-5),
                       events=[SubsampledGaussian(0.01, sigma, 1000, sampler)])


def test_claim_check_flags_too_small_claim():
    from dpaudit.claim.reaccount import reaccount
    from dpaudit.claim.verdict import Grounds, judge

    honest = _card(1.84)  # PLD 1.83, PRV ~1.84, RDP 2.10: certified by PLD/PRV
    acct = reaccount(honest)
    assert acct.reaccounted_epsilon == pytest.approx(2.10, abs=0.01)  # largest is reported
    assert acct.status == "verified" and acct.lower_epsilon < 1.84
    # no audit ran: the accounting is verified but nothing empirical was tested
    v = judge(honest, acct, Grounds(None))
    assert v.status == "inconclusive" and v.accounting.status == "verified"
    assert v.empirical.status == "no-power"
    low = _card(1.5)
    v = judge(low, reaccount(low), Grounds(None))
    assert v.status == "accounting-mismatch" and "lower value of the true epsilon" in v.reason


def test_shuffled_batches_are_accounted_without_replacement_but_not_certified():
    import dataclasses

    from dpaudit.claim.card import Claim
    from dpaudit.claim.reaccount import reaccount
    from dpaudit.claim.verdict import Grounds, judge

    c = dataclasses.replace(_card(2.2, sampler="shuffle"), dataset_size=10_000,
                            claim=Claim(epsilon=2.2, delta=1e-5, neighbouring="replace_one"))
    acct = reaccount(c)
    assert [r.accountant for r in acct.results] == ["dpa_rdp"]  # sampling without replacement, replace-one
    assert acct.results[0].epsilon > 2.2 and acct.results[0].relation == "replace_one"
    assert acct.findings and "shuffle" in acct.findings[0]
    assert acct.status == "unverifiable"  # an upper value only: never an accusation
    assert judge(c, acct, Grounds(None)).status == "inconclusive"


def test_empirical_bound_above_claim_is_a_violation():
    from dpaudit.audit.rows import TestRow
    from dpaudit.claim.reaccount import reaccount
    from dpaudit.claim.verdict import Grounds, judge

    c = _card(2.2)
    best = TestRow.from_dict({"epsilon_lb": 3.0, "ceiling": 5.8, "family_confidence": 0.95, "delta_kind": "claimed"})
    assert judge(c, reaccount(c), Grounds(best)).status == "violated"


def test_calibration_treats_a_sigma_the_accountant_cannot_grid_as_too_small(searched):
    """The search for sigma may probe a noise multiplier below 0.1, where PRV and PLD decline (their grids would
    need GBs): that probe is "too small", not an error. DP-FROST at epsilon = 8 (configs/dp_frost_sentiment.toml,
    frost-eps8) starts its selection-noise search at 0.05 and stopped there before."""
    train = accounting.SubsampledGaussian(0.02204, 0.5265, 46)
    s = accounting.calibrate_sigma_after(8.0, 1e-5, [train], 0.02, 5, accountant="prv")
    assert s == pytest.approx(0.4508, abs=2e-3)  # the committed frost-eps8 card's sigma_ps
    both = [train, accounting.SubsampledGaussian(0.02, s, 5)]
    assert accounting.compute(both, 1e-5, "prv").epsilon <= 8.0
    # a target so loose that 0.6 x the RDP bracket falls below 0.1: the answer is still one PRV certifies
    s = accounting.calibrate_sigma(60.0, 1e-5, 0.5, 10, accountant="prv")
    assert s >= 0.1 and accounting.compute([accounting.SubsampledGaussian(0.5, s, 10)], 1e-5, "prv").epsilon <= 60.0


def test_a_calibration_is_computed_once_per_process_and_bad_input_still_refused():
    """calibrate_sigma for the same mechanism answers from the per-process memo (a run, its resume and its dry run
    calibrate the same one); the answer is the uncached search's, and a malformed argument is refused as before."""
    from dpaudit import accounting
    from dpaudit.errors import DpauditError

    accounting._calibrate_sigma_once.cache_clear()
    s1 = accounting.calibrate_sigma(4.0, 1e-5, 0.17, 9, accountant="rdp")
    s2 = accounting.calibrate_sigma(4, 1e-5, 0.17, 9, accountant="rdp")  # an int target: the same mechanism
    assert s1 == s2 == accounting._calibrate_sigma(4.0, 1e-5, 0.17, 9, "rdp")
    assert accounting._calibrate_sigma_once.cache_info().hits == 1
    for bad in ("4", float("inf"), -1.0):
        with pytest.raises(DpauditError, match="target epsilon"):
            accounting.calibrate_sigma(bad, 1e-5, 0.17, 9, accountant="rdp")


def test_a_calibration_is_computed_once_per_machine_and_a_forged_answer_is_not_used(tmp_path, monkeypatch):
    """Another process asking for the same mechanism (a resume, a dry run, a torchrun rank) reads the machine's
    accounting cache instead of searching again; an entry edited by hand is reported and searched afresh."""
    import json
    import warnings

    from dpaudit.accounting import disk_cache

    monkeypatch.setenv("DPAUDIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DPAUDIT_STATE", str(tmp_path / "state"))
    monkeypatch.delenv("DPAUDIT_ACCOUNTING_CACHE", raising=False)
    accounting._calibrate_sigma_once.cache_clear()
    searched = accounting._calibrate_sigma(2.0, 1e-5, 0.05, 40, "prv")
    assert accounting.calibrate_sigma(2.0, 1e-5, 0.05, 40) == searched  # searched, then stored
    [entry] = (tmp_path / "cache" / "accounting").glob("*.json")

    def no_search(*a, **k):
        raise AssertionError("searched again")

    real = accounting._calibrate_sigma
    monkeypatch.setattr(accounting, "_calibrate_sigma", no_search)
    accounting._calibrate_sigma_once.cache_clear()  # a new process: the memo is empty, the disk is not
    assert accounting.calibrate_sigma(2.0, 1e-5, 0.05, 40) == searched
    with pytest.raises(AssertionError, match="searched again"):  # another mechanism is another key
        accounting.calibrate_sigma(2.0, 1e-5, 0.05, 41)

    d = json.loads(entry.read_text())
    entry.write_text(json.dumps({**d, "upper": searched / 2}))  # half the noise, the old integrity code
    monkeypatch.setattr(accounting, "_calibrate_sigma", real)
    accounting._calibrate_sigma_once.cache_clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert accounting.calibrate_sigma(2.0, 1e-5, 0.05, 40) == searched
    assert any(issubclass(w.category, disk_cache.CacheWarning) for w in caught)
    accounting._calibrate_sigma_once.cache_clear()


def test_prv_reads_the_domain_it_guarded_and_answers_as_opacus_does():
    """The grid guard's domain is the one Opacus then discretises on (not searched twice): the answer is exactly
    Opacus' own get_epsilon."""
    from dpaudit.accounting import opacus_prv
    from dpaudit.accounting.events import SubsampledGaussian

    for sigma, q, steps in ((0.9, 0.167, 9), (1.4, 0.01, 1000), (0.6, 0.5, 3)):
        acc = opacus_prv._prv_accountant()
        acc.history = [(sigma, q, steps)]
        assert opacus_prv.epsilon([SubsampledGaussian(q, sigma, steps)], 1e-5) == float(
            acc.get_epsilon(delta=1e-5, eps_error=opacus_prv.COARSE_ERROR))
