"""Canaries at a rate of their own (canaries.sample_rate; issue wave 5 · 1/5 item 2): the sampler draws each record
at its own rate with Opacus' draw (equal rates give Opacus' batches exactly), the engine samples the marked canary
records at their rate and calibrates and accounts every record at the larger rate, and what cannot honour the
rate is refused in one line."""

import math

import numpy as np
import pytest
import torch
from opacus.utils.uniform_sampler import UniformWithReplacementSampler
from scipy import stats

from dpaudit import accounting
from dpaudit.canaries import manifest as canaries
from dpaudit.canaries import sampling
from dpaudit.errors import DpauditError
from dpaudit.tasks import sentiment
from dpaudit.trainers import data as data_seam
from dpaudit.trainers import engine


def test_equal_rates_draw_opacus_batches_exactly():
    for q in (0.1, 0.3, 1 / 3, 0.77):  # 0.1 and 1/3 are not float32 numbers: compared as Opacus compares them
        ours = sampling.RatedSampler(torch.full((500,), q), generator=torch.Generator().manual_seed(7), steps=40)
        opacus = UniformWithReplacementSampler(num_samples=500, sample_rate=q,
                                               generator=torch.Generator().manual_seed(7), steps=40)
        assert list(ours) == list(opacus)


def test_each_record_is_drawn_at_its_own_rate_independently():
    """2,000 steps over 40 records at 0.05 and 10 at 0.6: each record's inclusion count is binomial at its rate
    (a two-sided 1e-4 test per group), and two canaries' inclusions are independent (their joint count)."""
    rates = torch.tensor([0.05] * 40 + [0.6] * 10)
    steps = 2000
    counts = np.zeros(50)
    both = 0
    for batch in sampling.RatedSampler(rates, generator=torch.Generator().manual_seed(1), steps=steps):
        counts[batch] += 1
        both += 40 in batch and 41 in batch
    for lo, hi, q in ((0, 40, 0.05), (40, 50, 0.6)):
        total, n = counts[lo:hi].sum(), steps * (hi - lo)
        assert stats.binomtest(int(total), n, q).pvalue > 1e-4, (q, total / n)
    assert stats.binomtest(both, steps, 0.36).pvalue > 1e-4
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        sampling.RatedSampler(torch.tensor([0.5, 0.0]))


def test_the_loader_keeps_opacus_collation_of_empty_batches():
    from opacus.data_loader import DPDataLoader

    ds = torch.utils.data.TensorDataset(torch.arange(6).view(6, 1), torch.zeros(6, dtype=torch.long))
    dp = DPDataLoader(ds, sample_rate=0.5, generator=torch.Generator().manual_seed(0))
    rated = sampling.rated(dp, torch.full((6,), 1e-6))  # almost surely empty batches
    x, y = next(iter(rated))
    assert x.shape == (0, 1) and y.shape == (0,)
    with pytest.raises(ValueError, match="one rate per record"):
        sampling.rated(dp, torch.full((5,), 0.5))


def _records(tok, n=12, canaries=3):
    recs = [sentiment.encode_text(f"record number {i} is fine", tok, 32) for i in range(n)]
    return recs + [{**sentiment.encode_text(f"My account number is {i}.", tok, 32), "canary": True}
                   for i in range(canaries)]


def test_the_engine_samples_canaries_at_their_rate_and_accounts_the_larger(tiny_model_factory, monkeypatch):
    model, tok = tiny_model_factory()
    seen = {}
    original = data_seam.Poisson.__init__

    def spy(self, loader, *a, **k):
        seen["rates"] = loader.batch_sampler.rates.clone()
        original(self, loader, *a, **k)

    monkeypatch.setattr(data_seam.Poisson, "__init__", spy)
    records = _records(tok)
    cfg = engine.EngineConfig(target_epsilon=4.0, delta=1e-3, epochs=1, batch_size=3)  # q = 3 / 15 = 0.2
    _, res = engine.train(model, records, cfg, tok.pad_token_id, 32, canary_rate=0.6)
    assert seen["rates"].tolist() == pytest.approx([0.2] * 12 + [0.6] * 3)
    sigma = accounting.calibrate_sigma(4.0, 1e-3, 0.6, res.steps, accountant=cfg.accountant)
    assert res.steps == 5 and res.noise_multiplier == pytest.approx(sigma)  # steps from the data's rate
    assert res.events[0].sample_rate == 0.6 and res.sample_rate == 0.6
    assert res.epsilon <= 4.0 + 1e-6
    assert res.sampling == {"records": 0.2, "canaries": 0.6, "accounted": 0.6, "canary_records": 3, "divisor": 3}
    # canaries rarer than the data: the data's rate is the larger one
    model, tok = tiny_model_factory()
    _, res = engine.train(model, records, cfg, tok.pad_token_id, 32, canary_rate=0.05)
    assert res.events[0].sample_rate == pytest.approx(0.2) and res.sampling["canaries"] == 0.05


def test_what_cannot_honour_the_rate_is_refused(tiny_model_factory):
    model, tok = tiny_model_factory()
    cfg = engine.EngineConfig(target_epsilon=4.0, delta=1e-3, epochs=1, batch_size=3, gradient_canaries=16)
    with pytest.raises(DpauditError, match="canaries.sample_rate cannot be honoured: train.gradient_canaries"):
        engine.train(model, _records(tok), cfg, tok.pad_token_id, 32, canary_rate=0.5)
    plain = engine.EngineConfig(target_epsilon=math.inf, epochs=1, batch_size=3)  # non-private: shuffled epochs
    _, res = engine.train(model, _records(tok), plain, tok.pad_token_id, 32, canary_rate=0.5)
    assert res.sampling is None


def test_the_plan_validates_and_the_manifest_keeps_the_rate():
    plan = canaries.CanaryPlan(m=20, sample_rate=0.01)
    man = canaries.generate(plan)
    again = canaries.manifest_from_dict(man.to_dict())
    assert again.plan.sample_rate == 0.01 and again.to_dict() == man.to_dict()
    assert "sample_rate" not in canaries.generate(canaries.CanaryPlan(m=20)).to_dict()  # old manifests unchanged
    for bad in (0, 1.5, "0.1", True):
        with pytest.raises(DpauditError, match="canaries.sample_rate must be a number in"):
            canaries.CanaryPlan(m=20, sample_rate=bad)
    with pytest.raises(DpauditError, match="record-level text canaries"):
        canaries.CanaryPlan(m=20, sample_rate=0.1, records_per_user=2)


def test_a_loop_written_elsewhere_samples_canaries_at_their_rate_and_its_card_accounts_the_larger(tmp_path):
    """examples/final_weights_opacus.py --canary-rate (Opacus' make_private, then dpaudit.api.sample_canaries_at_rate):
    the card's event is at the canaries' rate (above the data's 1/len(loader)), its epsilon is the accountants' at
    that rate and within the target, `dpaudit account --card` verifies it, and evaluate's limit uses it."""
    import importlib.util
    import json
    from pathlib import Path

    from dpaudit.cli import main

    path = Path(__file__).resolve().parents[2] / "examples" / "final_weights_opacus.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "fw"
    small = ["--canaries", "60", "--records", "120", "--epochs", "2", "--batch-size", "16", "--width", "32",
             "--guess-fraction", "0.2", "--canary-rate", "0.5", "--epsilon", "8"]
    assert mod.main(["--out", str(out), "--insecure-rng", *small]) == 0
    card = json.loads((out / "model" / "privacy_card.json").read_text())
    (event,) = card["mechanism"]["events"]
    sampling = card["extra"]["sampling"]
    assert event["sample_rate"] == 0.5 and sampling["canaries"] == 0.5 and sampling["accounted"] == 0.5
    inserted = sum(c["inserted"] for c in json.loads((out / "model" / "canaries.json").read_text())["canaries"])
    assert sampling["records"] < 0.2 and sampling["canary_records"] == inserted
    eps = accounting.compute([accounting.SubsampledGaussian(0.5, event["noise_multiplier"], event["steps"])],
                             card["claim"]["delta"], "prv").epsilon
    assert card["claim"]["epsilon"] == pytest.approx(eps, rel=1e-9) and eps <= 8.0 + 1e-6
    assert main(["account", "--card", str(out / "model" / "privacy_card.json")]) == 0  # verified at that rate
    assert main(["evaluate", str(out / "model"), "--out", str(out / "report"), "--quiet"]) in (0, None)
    report = json.loads((out / "report" / "report.json").read_text())
    limits = [x["mechanism_limit"] for x in report["audit_limits"] if x.get("mechanism_limit")]
    assert limits and all(x["mechanism"]["sample_rate"] == 0.5 for x in limits)


def test_the_api_refuses_what_it_cannot_sample():
    from opacus.data_loader import DPDataLoader

    from dpaudit import api

    ds = torch.utils.data.TensorDataset(torch.arange(6).view(6, 1))
    dp = DPDataLoader(ds, sample_rate=0.5, generator=torch.Generator().manual_seed(0))
    rated = canaries.generate(canaries.CanaryPlan(m=20, sample_rate=0.1))
    with pytest.raises(DpauditError, match="fixes no sampling rate"):
        api.sample_canaries_at_rate(dp, [False] * 6, canaries.generate(canaries.CanaryPlan(m=20)))
    with pytest.raises(DpauditError, match="5 flags for a dataset of 6 rows"):
        api.sample_canaries_at_rate(dp, [False] * 5, rated)
    plain = torch.utils.data.DataLoader(ds, batch_size=2)
    with pytest.raises(DpauditError, match="need the Poisson loader Opacus' make_private returned"):
        api.sample_canaries_at_rate(plain, [False] * 6, rated)
    loader = api.sample_canaries_at_rate(dp, [True, False, False, False, False, True], rated)
    assert loader.batch_sampler.rates.tolist() == pytest.approx([0.1, 0.5, 0.5, 0.5, 0.5, 0.1])
    assert loader.batch_sampler.sampling == {"records": 0.5, "canaries": 0.1, "canary_records": 2}
