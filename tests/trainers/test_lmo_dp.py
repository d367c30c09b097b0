"""LMO-DP in the engine: the noise is really added (once per logical batch), the card carries the paper's claim
and the mechanism, dpaudit re-accounts it independently, and the white-box canaries (Dirac and dense) find a
leak without noise and none under strong noise."""

from __future__ import annotations

import json
import math
import tomllib

import numpy as np
import pytest
import torch

from dpaudit.accounting import lmo_paper
from dpaudit.accounting.lmo_noise import LmoNoise
from dpaudit.errors import DpauditError
from dpaudit.probe.canaries import GradientCanaries
from tests.settings import TINY_RUN

LMO_CONFIG = TINY_RUN + """
[train]
method = "lmo_dp"
delta = 1e-5
epochs = 1
batch_size = 24
lr = 5e-3
clipping_norm = 1.0
gradient_canaries = 40
gradient_canary_kind = "dirac+dense"
[train.lmo]
noise = {a1 = 0.3, a2 = 0.2, a3 = 0.5, gamma_k = 2.0, gamma_theta = 0.5, exp_rate = 5.0, u_low = 0.5, u_high = 1.5}
"""


def _fit(tmp_path, extra: str, name: str = "v"):
    from dpaudit.canaries import manifest as canaries
    from dpaudit.checkpoint import load
    from dpaudit.run import config
    from dpaudit.tasks import registry
    from dpaudit.trainers import lmo_dp

    cfg = config.parse(tomllib.loads(LMO_CONFIG + f'[[variants]]\nname = "{name}"\n' + extra))
    data = registry.load_data(cfg.task.__dict__)
    ck = lmo_dp.fit(cfg, cfg.variants[0], data, canaries.generate(cfg.canaries), tmp_path / name)
    return cfg, load(ck)


def test_lmo_run_writes_the_papers_claim_and_dpaudit_reaccounts_the_mechanism(tmp_path):
    from dpaudit.claim.reaccount import reaccount

    cfg, ck = _fit(tmp_path, "target_epsilon = 3.0\n")
    card = ck.card
    (ev,) = card.events
    assert ev.type == "subsampled_laplace_mixture" and ev.draw == "per_coordinate" and ev.dimension > 1000
    assert card.claim.accountant == "lmo_paper" and card.method == "lmo_dp"
    nz = LmoNoise.from_dict(ev.noise)
    assert card.claim.epsilon <= 3.0 and card.claim.epsilon == pytest.approx(
        lmo_paper.claim(nz, 1.0, ev.sample_rate, ev.steps, card.claim.delta).epsilon)
    assert card.claim.epsilon > 2.9  # the scale was pushed to the target
    acct = reaccount(card)
    (res,) = acct.results
    assert res.accountant == "lmo_vector" and 0 <= res.lower <= res.epsilon
    assert set(acct.not_applicable) == {"rdp", "prv", "pld", "dpa_rdp"}
    # the paper's scalar accounting understates the d-dimensional mechanism: the exact PLD of one neighbouring pair
    # (a lower bound on the true epsilon) already lies above the claim (docs/methods.md, LMO-DP)
    assert res.lower > 1.2 * card.claim.epsilon and acct.status == "under-claim"
    # both canary sets recorded, the dense one over every trainable coordinate
    assert json.loads((ck.path / "gradient_canaries.json").read_text())["kind"] == "dirac"
    dense = json.loads((ck.path / "gradient_canaries_dense.json").read_text())
    assert dense["kind"] == "dense" and len(dense["scores"]) == 40
    lmo = card.extra["lmo"]
    assert lmo["mean_abs_noise"] > 0 and lmo["dimension"] == ev.dimension


def test_evaluator_audits_each_canary_set_separately(tmp_path):
    from dpaudit.evaluation.options import EvalOptions
    from dpaudit.evaluation.steps import evaluate

    cfg, ck = _fit(tmp_path, "target_epsilon = 3.0\n")
    r = evaluate(ck.path, EvalOptions(n_references=20, attacks=("loss",)))  # canaries.generate: no plan
    names = {e["attack"] for e in r["empirical"]}
    assert {"whitebox_gradient", "whitebox_gradient_dense"} <= names
    assert r["attacks"]["whitebox_gradient_dense"]["kind"] == "dense"
    assert {e["bonferroni_tests"] for e in r["empirical"]} == {3}  # loss + two white-box sets


def _params(sizes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g)) for s in sizes]


def test_dense_canaries_are_dense_orthogonal_and_recover_their_own_counts():
    params = _params([(37, 11), (129,), (5, 3, 2)])
    gc = GradientCanaries.plan(12, "dense", 3, params, clipping_norm=0.5, sample_rate=0.6)
    gc.start(0)
    sums = [torch.zeros_like(p) for p in params]
    for _ in range(20):
        upd = [torch.zeros_like(p) for p in params]
        gc.inject(lambda k, upd=upd: upd[k])
        for s, u in zip(sums, upd):
            s += u
    flat = torch.cat([s.reshape(-1) for s in sums])
    ins = gc.signs > 0
    assert (flat.abs() > 0).float().mean() > 0.99  # every coordinate carries the canaries
    gc.score(lambda k: sums[k], expected_batch_size=1.0)
    d, n = gc.d, gc.n
    expected = np.where(ins, gc.times_sampled, 0)
    assert np.abs(gc.scores - expected).max() <= gc.times_sampled.sum() * n / d + 1e-6
    assert gc.times_sampled[ins].sum() > 0 and gc.times_sampled[~ins].sum() == 0


def _whitebox_auc(y0: float, kind: str) -> float:
    from dpaudit.accounting import SubsampledLaplaceMixture
    from dpaudit.audit.mia_metrics import compute
    from dpaudit.run.config import ModelSpec
    from dpaudit.tasks.models import build
    from dpaudit.tasks.sentiment import encode_text
    from dpaudit.trainers import engine
    from dpaudit.trainers.noise import LaplaceMixture

    model, tok = build(ModelSpec(name="tiny-gpt2", vocab_size=512, n_embd=32, n_layer=1, n_head=2, max_len=16))
    recs = [encode_text(f"record {i} text", tok, 16) for i in range(64)]
    nz = LmoNoise(0, 0, 1.0, u_low=y0, u_high=y0 * (1 + 1e-9))
    cfg = engine.EngineConfig(target_epsilon=1.0, epochs=4, batch_size=16, lr=1e-3, clipping_norm=1.0,
                              gradient_canaries=200, gradient_canary_kind=kind)
    ev = lambda q, steps: SubsampledLaplaceMixture(q, steps, nz.to_dict(), 1.0)  # noqa: E731
    _, res = engine.train(model, recs, cfg, tok.pad_token_id, 16, noise=LaplaceMixture(nz), event=ev)
    wb = res.gradient_canaries
    return compute(np.array(wb["scores"]), np.array(wb["signs"]), seed=0).auc


@pytest.mark.parametrize("kind", ["dirac", "dense"])
def test_whitebox_canaries_find_the_leak_without_noise_and_none_under_strong_noise(kind):
    assert _whitebox_auc(1e4, kind) > 0.95  # scale 1e-4: essentially no noise
    assert abs(_whitebox_auc(1e-3, kind) - 0.5) < 0.12  # scale 1e3 per coordinate: nothing to see


@pytest.mark.parametrize("extra, needle", [
    ("target_epsilon = inf\n", "finite target_epsilon"),
    ('target_epsilon = 1.0\n[variants.lmo]\naccounting = "vector"\nnoise = {}\n', "not all 0"),
    ('target_epsilon = 1.0\n[variants.lmo]\nnoise = {a3 = 1.0, u_low = 0.0, u_high = 1.0}\n', "0 < a < b"),
    ('target_epsilon = 1.0\n[variants.lmo]\nnoise = {a1 = 1.0, gamma_k = -1.0}\n', "k > 0"),
    ('target_epsilon = 1.0\n[variants.lmo]\ndraw = "sometimes"\n', "lmo.draw"),
    ('target_epsilon = 1.0\n[variants.lmo]\nnoise = {a3 = 1.0, u_low = 1.0, u_high = 2.0, colour = 1}\n', "colour"),
])
def test_bad_lmo_settings_fail_before_training(tmp_path, extra, needle):
    with pytest.raises(DpauditError, match=needle):
        _fit(tmp_path, extra)
    assert not (tmp_path / "v").exists()


def test_lmo_options_are_refused_for_other_methods():
    from dpaudit.run import config

    text = LMO_CONFIG.replace('method = "lmo_dp"', 'method = "dp_adam"').replace('gradient_canary_kind = "dirac+dense"\n', "")
    with pytest.raises(DpauditError, match="lmo_dp"):
        config.parse(tomllib.loads(text + '[[variants]]\nname = "v"\n'))


def test_vector_calibration_meets_its_target_and_claims_with_its_own_accountant():
    from dpaudit.accounting import lmo_vector
    from dpaudit.trainers import engine, lmo_dp

    tc = config_trainer('target_epsilon = 4.0\n[variants.lmo]\naccounting = "vector"\nfixed = true\n')
    plan = engine.record_plan(144, tc.engine)
    cal = lmo_dp.calibrate(tc, tc.engine, plan)
    assert cal.claim_accountant == "lmo_vector" and 3.9 < cal.claim_epsilon <= 4.0
    eps, _ = lmo_vector.epsilon_for(cal.noise, 1.0, "per_coordinate", plan.sample_rate, plan.steps, plan.delta)
    assert eps == pytest.approx(cal.claim_epsilon)


def config_trainer(extra: str):
    from dpaudit.run import config

    text = LMO_CONFIG.replace("[train.lmo]\nnoise = {a1 = 0.3, a2 = 0.2, a3 = 0.5, gamma_k = 2.0, gamma_theta = 0.5, "
                              "exp_rate = 5.0, u_low = 0.5, u_high = 1.5}\n", "")
    return config.parse(tomllib.loads(text + '[[variants]]\nname = "v"\n' + extra)).variants[0].trainer


def test_search_runs_when_no_shape_is_given(monkeypatch):
    from dpaudit.trainers import engine, lmo_dp

    small = {"a1": (0.5,), "a2": (0.5,), "a3": (0.5,), "gamma_k": (2.0,), "gamma_theta": (1.0,), "exp_rate": (1.0,),
             "u_low": (0.5, 1.0), "u_width": (1.0,)}
    monkeypatch.setattr(lmo_paper, "DEFAULT_GRID", small)
    tc = config_trainer("target_epsilon = 2.0\n")
    cal = lmo_dp.calibrate(tc, tc.engine, engine.record_plan(144, tc.engine))
    assert cal.search["candidates"] == 2 and cal.claim_epsilon <= 2.0 and math.isfinite(cal.claim_epsilon)
