"""The white-box noise check (dpaudit/audit/noise_check.py): an upper confidence bound on the noise the
recorded updates carry, valid whatever the records' gradients add, exact at the boundary, and powerful."""

import numpy as np
import pytest

from dpaudit.audit import noise_check


def _below_rate(sims: int, T: int, m: int, sigma_true: float, sigma_card: float, seed: int, data=None) -> float:
    rng = np.random.default_rng(seed)
    below = 0
    for _ in range(sims):
        x = rng.normal(0.0, sigma_true, size=(T, m))
        if data is not None:
            x = x + data(rng, x)
        below += noise_check.check(x, sigma_card)["status"] == "below the card"
    return below / sims


def test_exact_noise_is_flagged_at_most_alpha_and_not_vacuously():
    # pure noise at exactly the card's sigma: the 95% test rejects in ~5% of runs (binomial sd 0.5% over 2000)
    rate = _below_rate(2000, 10, 40, 0.8, 0.8, seed=1)
    assert 0.035 <= rate <= 0.065


@pytest.mark.parametrize("name", ["sampled_canaries", "drift", "history_dependent"])
def test_the_records_gradients_never_make_honest_noise_look_short(name):
    def sampled_canaries(rng, x):  # inserted canaries at rate q, mean 1 when sampled
        return (rng.random(x.shape) < 0.1) * (rng.random(x.shape[1]) < 0.5)

    def drift(rng, x):  # a persistent per-coordinate gradient of either sign
        return np.broadcast_to(rng.normal(0, 0.3, size=x.shape[1]), x.shape)

    def history_dependent(rng, x):  # each step's gradient pushes against the previous step's noise
        d = np.zeros_like(x)
        d[1:] = -0.5 * x[:-1]
        return d

    rate = _below_rate(1000, 10, 40, 0.8, 0.8, seed=2, data=locals()[name])
    assert rate <= 0.065


def test_a_ten_percent_shortfall_is_found_on_a_demo_sized_record():
    # 61 updates x 1000 canaries, as on reports/li_repro_sentiment; the records add a little spread of their own
    rng = np.random.default_rng(3)
    sigma = 0.7733
    for _ in range(20):
        x = rng.normal(0, 0.9 * sigma, size=(61, 1000)) + rng.normal(0, 0.05, size=(61, 1000))
        c = noise_check.check(x, sigma)
        assert c["status"] == "below the card" and c["upper"] < sigma
        assert c["values"] == 61_000 and c["ratio"] < 1


def test_upper_bound_matches_the_chi_square_quantile():
    from scipy.stats import chi2

    x = np.arange(1, 13, dtype=float).reshape(3, 4) / 10
    c = noise_check.check(x, 0.5, confidence=0.9)
    ss = float((x ** 2).sum())
    assert c["upper"] == pytest.approx(np.sqrt(ss / chi2.ppf(0.1, 12)), rel=1e-12)
    assert c["rms"] == pytest.approx(np.sqrt(ss / 12), rel=1e-12)
    assert c["status"] == "no shortfall" and c["upper"] >= 0.5


@pytest.mark.parametrize("steps,sigma,conf", [(np.zeros(5), 1.0, 0.95), (np.zeros((2, 0)), 1.0, 0.95),
                                              (np.full((2, 2), np.nan), 1.0, 0.95), (np.ones((2, 2)), 0.0, 0.95),
                                              (np.ones((2, 2)), 1.0, 1.0)])
def test_bad_inputs_are_refused(steps, sigma, conf):
    with pytest.raises(ValueError):
        noise_check.check(steps, sigma, conf)


def test_applies_only_to_orthonormal_canaries_with_the_likelihood_ratio():
    rec = {"kind": "dirac", "steps_array": np.ones((2, 2))}
    assert noise_check.applies(rec, "likelihood_ratio")
    assert noise_check.applies({**rec, "kind": "sparse"}, "likelihood_ratio")
    assert not noise_check.applies({**rec, "kind": "dense"}, "likelihood_ratio")
    assert not noise_check.applies(rec, "sum")
    assert not noise_check.applies({"kind": "dirac"}, "likelihood_ratio")


def test_record_level_samples_at_the_cards_rate_when_the_batch_does_not_divide_the_data():
    """Opacus alone samples at 1 / ceil(N / B) and divides by int(N q); the engine's mechanism is q = B / N, /B."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from dpaudit.trainers import mechanism

    model = torch.nn.Linear(3, 1)
    data = TensorDataset(torch.randn(500, 3), torch.zeros(500, dtype=torch.long))
    _, dp_opt, _, dp_loader = mechanism.record_level(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                                     DataLoader(data, batch_size=64), sigma=1.0, clipping_norm=1.0,
                                                     grad_sample_mode="hooks", seed=0)
    assert dp_opt.expected_batch_size == 64
    assert dp_loader.sample_rate == dp_loader.batch_sampler.sample_rate == 64 / 500
    sizes = [len(b) for _ in range(250) for b in dp_loader.batch_sampler]  # 2,000 batches; Opacus alone: 62.5
    assert abs(np.mean(sizes) - 64) < 4 * np.sqrt(500 * 0.128 * 0.872 / len(sizes))  # 4 standard errors


def test_honest_training_shows_the_cards_noise_when_the_batch_does_not_divide_the_data(tiny_model_factory):
    """Held-out canaries' projections are the card's noise plus a little of the records' gradients: rms / sigma
    just above 1 (it was 64 / 62 = 1.032 while Opacus divided by int(N / ceil(N / B)) instead of B)."""
    from dpaudit.tasks import sentiment
    from dpaudit.trainers import engine

    model, tok = tiny_model_factory()
    recs = [sentiment.encode_example(e, tok, "lm", 32) for e in sentiment.load(n_train=500, n_test=20).train]
    cfg = engine.EngineConfig(target_epsilon=1.0, delta=1e-5, epochs=2, batch_size=64, lr=1e-3, clipping_norm=1.0,
                              gradient_canaries=1000)
    _, res = engine.train(model, recs, cfg, tok.pad_token_id, 32)
    gc = res.gradient_canaries
    x, signs = gc["step_projections"].astype(float), np.array(gc["signs"])
    assert res.sample_rate == pytest.approx(64 / len(recs))
    ratio = np.sqrt((x[:, signs < 0] ** 2).mean()) / res.noise_multiplier
    assert 0.98 < ratio < 1.015
    assert noise_check.check(x, res.noise_multiplier)["status"] == "no shortfall"
