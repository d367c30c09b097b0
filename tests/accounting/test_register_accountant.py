"""An accountant of the user's own (dpaudit.api.register_accountant), through the public calls only: the exact
accountant of full-batch DP-SGD (q = 1: T Gaussian mechanisms compose to one of mu = sqrt(T) / sigma, whose
(eps, delta) curve has a closed form) joins every interval and claim check beside the shipped ones, agrees with
dp_accounting's PLD interval, says "not applicable" for subsampling, and is gone once removed."""

from __future__ import annotations

import math

import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from dpaudit import accounting, api
from dpaudit.accounting import NotApplicable, SubsampledGaussian
from dpaudit.claim.card import Claim, PrivacyCard, card_from_dict
from dpaudit.claim.reaccount import reaccount
from dpaudit.errors import DpauditError


class FullBatchGaussian:
    """Exact for q = 1 (Dong, Roth, Su: mu-GDP composes as sqrt(sum mu_i^2); Balle & Wang's delta(eps))."""

    @staticmethod
    def _delta(eps: float, mu: float) -> float:
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)

    def interval(self, events, delta, relation, dataset_size):
        if relation != "add_remove" or any(not isinstance(e, SubsampledGaussian) or e.sample_rate != 1.0
                                           for e in events):
            raise NotApplicable("full_batch_gdp: full-batch Gaussian steps only (sample rate 1)")
        mu = math.sqrt(sum(e.steps / e.noise_multiplier ** 2 for e in events))
        eps = brentq(lambda x: self._delta(x, mu) - delta, 0.0, 500.0, xtol=1e-12)
        return eps, eps, f"mu = {mu:.6g}, closed form"


@pytest.fixture
def registered():
    remove = api.register_accountant("full_batch_gdp", FullBatchGaussian())
    yield
    remove()


def test_it_answers_beside_the_shipped_ones_and_agrees_with_pld(registered):
    events = [SubsampledGaussian(1.0, 4.0, 10, "poisson")]
    done, skipped = accounting.intervals(events, 1e-5)
    mine = next(r for r in done if r.accountant == "full_batch_gdp")
    pld = next(r for r in done if r.accountant == "pld")
    assert "full_batch_gdp" in accounting.accountant_names()
    assert pld.lower - 1e-6 <= mine.epsilon <= pld.epsilon + 1e-6, (pld, mine)
    assert mine.epsilon == pytest.approx(pld.epsilon, rel=0.01)


def test_it_is_not_applicable_to_subsampling_and_the_others_still_answer(registered):
    done, skipped = accounting.intervals([SubsampledGaussian(0.01, 1.0, 100, "poisson")], 1e-5)
    assert "full_batch_gdp" in skipped and "sample rate 1" in skipped["full_batch_gdp"]
    assert {r.accountant for r in done} >= {"pld", "dpa_rdp"}


def test_a_card_may_claim_by_it_and_the_claim_check_reads_it(registered):
    event = SubsampledGaussian(1.0, 4.0, 10, "poisson")
    eps = FullBatchGaussian().interval([event], 1e-5, "add_remove", None)[1]
    card = PrivacyCard(claim=Claim(epsilon=eps * 1.001, delta=1e-5, accountant="full_batch_gdp"), events=[event],
                       clipping_norm=1.0, method="external")
    card = card_from_dict(card.to_dict())
    acct = reaccount(card)
    assert "full_batch_gdp" in {r.accountant for r in acct.results} and acct.status == "verified"


def test_removed_it_is_gone_and_names_are_not_taken_twice():
    remove = api.register_accountant("full_batch_gdp", FullBatchGaussian())
    with pytest.raises(DpauditError, match="taken"):
        api.register_accountant("full_batch_gdp", FullBatchGaussian())
    with pytest.raises(DpauditError, match="taken"):
        api.register_accountant("pld", FullBatchGaussian())
    with pytest.raises(DpauditError, match="interval"):
        api.register_accountant("no_interval", object())
    remove()
    assert "full_batch_gdp" not in accounting.accountant_names()
    card = PrivacyCard(claim=Claim(epsilon=3.0, delta=1e-5, accountant="prv"),
                       events=[SubsampledGaussian(1.0, 4.0, 10, "poisson")], clipping_norm=1.0).to_dict()
    card["claim"]["accountant"] = "full_batch_gdp"
    with pytest.raises(DpauditError, match="unknown"):
        card_from_dict(card)
