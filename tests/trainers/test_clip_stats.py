"""Clipping diagnostics: the per-unit norms the engine records equal a for-loop reference, and the
per-step fraction clipped is 1 for a tiny C and 0 for a huge one (hooks, ghost, physical batches,
user-level), and the report says so."""

import pytest
import torch
from torch.utils.data import DataLoader

from dpaudit.report.markdown import clipping_lines, training_lines
from dpaudit.tasks import sentiment
from dpaudit.trainers import data as data_seam
from dpaudit.trainers import engine, mechanism
from dpaudit.trainers import loss as lossmod
from dpaudit.trainers.clip_stats import ClipStats, module_norms

SENTS = ["a fine film", "dull and long , with nothing to say about anything at all", "great fun",
         "My account number is 123456.", "the worst", "an astonishing, moving and generous piece of work"]


def _loop_norms(model, data):
    params = [p for p in model.parameters() if p.requires_grad]
    out = []
    for i in range(len(data)):
        ids, mask, tgt = (t[i:i + 1] for t in data.tensors)
        w = int(mask.sum())
        loss = lossmod.per_sample_loss(lossmod.forward(model, ids[:, :w], mask[:, :w]), tgt[:, :w]).mean()
        grads = torch.autograd.grad(loss, params)
        out.append(float(torch.sqrt(sum((g ** 2).sum() for g in grads))))
    return torch.tensor(out)


@pytest.mark.parametrize("mode", ["hooks", "ghost"])
def test_recorded_norms_match_the_loop(tiny_model_factory, mode):
    model, tok = tiny_model_factory()
    ref, _ = tiny_model_factory()
    ref.load_state_dict(model.state_dict())
    data = data_seam.collate([sentiment.encode_text(t, tok, 32) for t in SENTS], tok.pad_token_id, 32)
    expected = _loop_norms(ref, data)
    cfg = engine.EngineConfig(target_epsilon=1.0, clipping_norm=0.05, grad_sample_mode=mode)
    opt = torch.optim.SGD(list(model.parameters()), lr=0.0)
    gsm, dp_opt, crit, _ = mechanism.record_level(model, opt, DataLoader(data, batch_size=len(data)), sigma=0.0, clipping_norm=cfg.clipping_norm, grad_sample_mode=cfg.grad_sample_mode, seed=cfg.seed)
    lossmod.batch_loss(gsm, *data.tensors, crit).backward()
    got = module_norms(gsm, [p for p in gsm.parameters() if p.requires_grad])
    assert got is not None and got.shape == expected.shape
    assert torch.allclose(got.float(), expected, rtol=1e-4), (got, expected)
    # and the summary of one step: fraction above C and the median, against the same reference
    C = float(expected.median())
    st = ClipStats(C)
    st.observe(got)
    st.end_step()
    assert st.fraction_clipped == [pytest.approx(float((expected > C).float().mean()), abs=1e-4)]
    assert st.median_norm[0] == pytest.approx(C, rel=1e-3)


def _train(tiny_model_factory, C, mode="hooks", cap=None):
    model, tok = tiny_model_factory()
    recs = [sentiment.encode_text(SENTS[i % len(SENTS)], tok, 32) for i in range(24)]
    cfg = engine.EngineConfig(target_epsilon=8.0, delta=1e-3, epochs=1, batch_size=8, clipping_norm=C,
                              grad_sample_mode=mode, max_physical_batch_size=cap)
    _, res = engine.train(model, recs, cfg, tok.pad_token_id, 32)
    return res


@pytest.mark.parametrize("mode,cap", [("hooks", None), ("ghost", None), ("hooks", 3)])
def test_tiny_C_clips_everything_huge_C_nothing(tiny_model_factory, mode, cap):
    tiny = _train(tiny_model_factory, 1e-6, mode, cap).summary()["clipping"]
    huge = _train(tiny_model_factory, 1e6, mode, cap)
    c = huge.clipping
    assert tiny["steps_observed"] >= 1 and tiny["all_clipped_every_step"] and tiny["mean_fraction_clipped"] == 1.0
    assert c["none_clipped_any_step"] and c["mean_fraction_clipped"] == 0.0 and not c["all_clipped_every_step"]
    # one entry per LOGICAL step, also when a logical batch is split into physical ones
    assert len(c["per_step"]["fraction_clipped"]) == huge.steps
    assert 0 < c["median_norm_first"] < 1e6
    assert any("every unit was clipped" in x for x in clipping_lines(tiny))
    assert any("no unit was ever clipped" in x for x in clipping_lines(c))
    # the per-coordinate noise std printed in the report is sigma * C / B of this run
    tau = huge.noise_multiplier * 1e6 / 8
    assert any(f"σC/B = {tau:.2g} per coordinate" in x for x in training_lines(huge.summary()))


def test_user_level_records_user_norms(tiny_model_factory):
    model, tok = tiny_model_factory()
    by_user = {f"u{i}": [sentiment.encode_text(SENTS[(i + k) % len(SENTS)], tok, 32) for k in range(2)]
               for i in range(12)}
    cfg = engine.EngineConfig(target_epsilon=4.0, delta=1e-4, epochs=1, batch_size=4, clipping_norm=1e-6)
    _, res = engine.train_users(model, by_user, cfg, tok.pad_token_id, 32)
    c = res.clipping
    assert len(c["per_step"]["fraction_clipped"]) == res.steps
    assert c["all_clipped_every_step"] and c["steps_observed"] >= 1


def test_non_private_has_no_clipping_summary(tiny_model_factory):
    model, tok = tiny_model_factory()
    recs = [sentiment.encode_text(t, tok, 32) for t in SENTS]
    _, res = engine.train(model, recs, engine.EngineConfig(batch_size=3), tok.pad_token_id, 32)
    assert res.summary()["clipping"] is None
    assert clipping_lines(None) == []


def test_empty_steps_are_recorded_as_none():
    st = ClipStats(1.0)
    st.end_step()  # an empty Poisson batch
    st.observe(torch.tensor([0.5, 2.0, 3.0]))
    st.end_step()
    s = st.summary()
    assert s["per_step"]["fraction_clipped"] == [None, pytest.approx(2 / 3, abs=1e-4)]
    assert s["steps_observed"] == 1 and s["median_norm_first"] == 2.0
