"""The privacy card written from an Opacus PrivacyEngine records what ran: phases, q, sampler, C, N."""

from __future__ import annotations

import pytest
import torch
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

from dpaudit.claim.opacus_card import card_from_opacus, sampler_of
from dpaudit.claim.reaccount import reaccount
from dpaudit.errors import DpauditError

N, B = 300, 32


def _private(poisson: bool = True, sigma: float = 1.0):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(N, 4), torch.randint(0, 2, (N,)))
    model = nn.Linear(4, 2)
    engine = PrivacyEngine(accountant="rdp")
    model, opt, loader = engine.make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                             data_loader=DataLoader(data, batch_size=B, shuffle=True),
                                             noise_multiplier=sigma, max_grad_norm=0.5, poisson_sampling=poisson)
    return engine, model, opt, loader


def _steps(model, opt, loader, n):
    done = 0
    while done < n:
        for x, y in loader:
            if done == n:
                break
            if len(x):
                opt.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
                done += 1


def test_heterogeneous_phases_compose_and_q_is_opacus_own():
    engine, model, opt, loader = _private()
    _steps(model, opt, loader, 3)
    opt.noise_multiplier = 2.0  # a second phase with more noise
    _steps(model, opt, loader, 2)
    card = card_from_opacus(engine, loader, opt, delta=1e-5)
    q = 1 / -(-N // B)  # Opacus: 1 / len(data_loader), here 1/10, not B/N = 0.1067
    assert [(e.noise_multiplier, e.steps) for e in card.events] == [(1.0, 3), (2.0, 2)]
    assert all(e.sample_rate == pytest.approx(q) and e.sampler == "poisson" for e in card.events)
    assert card.clipping_norm == 0.5 and card.dataset_size == N and card.expected_batch_size == pytest.approx(q * N)
    assert card.claim.accountant == "rdp" and card.claim.epsilon == pytest.approx(engine.get_epsilon(1e-5))
    acct = reaccount(card)
    assert acct.findings == () and acct.status == "verified"  # the engine's own RDP claim is sound


def test_fixed_size_batches_are_recorded_and_not_certified():
    engine, model, opt, loader = _private(poisson=False)
    assert sampler_of(loader) == "shuffle"
    _steps(model, opt, loader, 2)
    card = card_from_opacus(engine, loader, opt, delta=1e-5)
    assert card.events[0].sampler == "shuffle"
    acct = reaccount(card)
    assert acct.status == "unverifiable" and "shuffle" in acct.findings[0]


def test_samplers_and_untrained_engine():
    data = TensorDataset(torch.zeros(10, 1))
    assert sampler_of(DataLoader(data, batch_size=2)) == "other"
    assert sampler_of(DataLoader(data, batch_size=2, sampler=RandomSampler(data, replacement=True))) == "with_replacement"
    engine, model, opt, loader = _private()
    with pytest.raises(DpauditError, match="no steps"):
        card_from_opacus(engine, loader, opt, delta=1e-5)


@pytest.mark.parametrize("kw,needle", [(dict(delta=0), "delta must be in \\(0, 1\\)"), (dict(delta=2.0), "delta must be"),
                                       (dict(delta=float("nan")), "delta must be"),
                                       (dict(delta=1e-5, epsilon=-1.0), "epsilon must be a positive"),
                                       (dict(delta=1e-5, epsilon=float("inf")), "epsilon must be a positive")])
def test_a_delta_or_epsilon_no_gaussian_claim_has_is_refused_in_words(kw, needle):
    """delta = 0 divided by zero inside the accountant (ZeroDivisionError) and delta = 2 was Opacus' bare
    RuntimeError 'Cannot compute epsilon'; a non-engine was 'recorded no steps'. Each is one DpauditError now."""
    engine, model, opt, loader = _private()
    _steps(model, opt, loader, 3)
    with pytest.raises(DpauditError, match=needle):
        card_from_opacus(engine, loader, opt, **kw)
    with pytest.raises(DpauditError, match="needs the Opacus PrivacyEngine that trained the model, got object"):
        card_from_opacus(object(), loader, opt, delta=1e-5)


def test_an_engine_that_trained_without_noise_is_a_baseline_not_a_claim():
    """Opacus trains at noise_multiplier = 0 without a word; the card refused it as a bad sigma with no way on.
    The line names the non-private card that audits such a run."""
    engine, model, opt, loader = _private(sigma=0.0)
    _steps(model, opt, loader, 3)
    for kw in ({}, {"epsilon": 8.0}):
        with pytest.raises(DpauditError, match=r"noise_multiplier = 0 .*dpaudit card --non-private"):
            card_from_opacus(engine, loader, opt, delta=1e-5, **kw)
