"""The engine's clipped update equals a for-loop reference (per-example autodiff -> clip -> sum / B)."""

import pytest
import torch
from torch.utils.data import DataLoader

from dpaudit.tasks import models, sentiment
from dpaudit.trainers import data as data_seam
from dpaudit.trainers import engine, loop, mechanism, trainable, units
from dpaudit.trainers import loss as lossmod

SENTS = ["a fine film", "dull and long , with nothing to say about anything at all", "great fun",
         "My account number is 123456.", "the worst", "an astonishing, moving and generous piece of work"]


def _records(tok, kind="causal_lm"):
    if kind.startswith("classifier"):  # (text, label) records of a sequence classifier
        return [sentiment.encode_labelled(t, i % 2, tok, 32) for i, t in enumerate(SENTS)]
    if kind == "label_words":  # prompt + label word records (softmax over the label words) and a canary
        return ([sentiment.encode_example({"sentence": t, "label": i % 2}, tok, "label_words", 32)
                 for i, t in enumerate(SENTS) if i != 3] + [sentiment.encode_text(SENTS[3], tok, 32)])
    return [sentiment.encode_text(t, tok, 32) for t in SENTS]


def _tiny_bert(pooling="cls"):
    return models.build(models.ModelSpec(name="tiny-bert", n_embd=32, n_layer=2, n_head=2, max_len=32, pooling=pooling))


def _tiny_bert_mean():
    return _tiny_bert("mean")


def _reference(model, data, C, B, choices=None):
    params = [p for p in model.parameters() if p.requires_grad]
    total = [torch.zeros_like(p) for p in params]
    for i in range(len(data)):
        ids, mask, tgt = (t[i:i + 1] for t in data.tensors)
        w = int(mask.sum())
        model.zero_grad()
        loss = lossmod.per_sample_loss(lossmod.forward(model, ids[:, :w], mask[:, :w]), tgt[:, :w], choices).mean()
        grads = torch.autograd.grad(loss, params)
        norm = torch.sqrt(sum((g ** 2).sum() for g in grads))
        factor = min(1.0, C / (float(norm) + 1e-6))
        for t, g in zip(total, grads):
            t += g * factor
    return [t / B for t in total], params


@pytest.mark.parametrize("kind", ["causal_lm", "classifier", "classifier_mean", "label_words"])
@pytest.mark.parametrize("mode", ["hooks", "ghost", "bk"])
@pytest.mark.parametrize("which", ["full", "lora", "lora-all-linear"])
def test_clipped_update_matches_loop(tiny_model_factory, mode, which, kind):
    factory = {"classifier": _tiny_bert, "classifier_mean": _tiny_bert_mean}.get(kind, tiny_model_factory)
    targets = "all-linear" if which == "lora-all-linear" else "attention"
    which = which.split("-")[0]
    model, tok = factory()
    model, _ = trainable.apply(model, which, lora_r=4, lora_alpha=8, lora_targets=targets)
    if targets == "all-linear":  # adapters on the MLP too, not only on attention
        names = [n for n, _ in model.named_parameters() if "lora_A" in n]
        assert any(k in n for n in names for k in ("c_fc", "intermediate.dense"))
    C = 0.05  # small enough that every example is clipped
    records = _records(tok, kind)
    choices = lossmod.run_choices(records)
    assert (choices is not None) == (kind == "label_words")
    data = data_seam.collate(records, tok.pad_token_id, 32)
    ref_model, _ = factory()
    ref_model, _ = trainable.apply(ref_model, which, lora_r=4, lora_alpha=8, lora_targets=targets)
    ref_model.load_state_dict(model.state_dict())
    B = len(data)
    expected, ref_params = _reference(ref_model, data, C, B, choices)

    cfg = engine.EngineConfig(target_epsilon=1.0, clipping_norm=C, grad_sample_mode=mode)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    loader = DataLoader(data, batch_size=B)
    gsm, dp_opt, crit, _ = mechanism.record_level(model, opt, loader, sigma=0.0, clipping_norm=cfg.clipping_norm, grad_sample_mode=cfg.grad_sample_mode, seed=cfg.seed)
    ids, mask, tgt = data.tensors
    dp_opt.zero_grad()
    lossmod.batch_loss(gsm, ids, mask, tgt, crit, choices).backward()
    dp_opt.step()
    got = [p.grad for p in model.parameters() if p.requires_grad]
    assert len(got) == len(expected)
    worst = max(float((g - e).abs().max()) for g, e in zip(got, expected))
    scale = max(float(e.abs().max()) for e in expected)
    assert worst < 1e-6 + 1e-4 * scale, f"max abs error {worst} (scale {scale})"
    # clipping was active: the unclipped mean gradient is much larger than the clipped one
    assert scale < 1.0


def _one_logical_step(tiny_model_factory, cap, sigma=0.0):
    model, tok = tiny_model_factory()
    data = data_seam.collate(_records(tok), tok.pad_token_id, 32)
    cfg = engine.EngineConfig(target_epsilon=1.0, clipping_norm=0.05, max_physical_batch_size=cap)
    opt = torch.optim.SGD(list(model.parameters()), lr=0.0)
    loader = DataLoader(data, batch_size=len(data))  # q = 1: every record in the (Poisson) batch
    gsm, dp_opt, crit, dp_loader = mechanism.record_level(model, opt, loader, sigma=sigma, clipping_norm=cfg.clipping_norm, grad_sample_mode=cfg.grad_sample_mode, seed=cfg.seed)
    calls = []
    orig = dp_opt.add_noise
    dp_opt.add_noise = lambda: (calls.append(1), orig())[1]
    loop.run(gsm, dp_opt, data_seam.Poisson(dp_loader, dp_opt, cfg.max_physical_batch_size), units.RecordStep(gsm, crit), 1)
    return [p.grad.clone() for p in model.parameters()], len(calls)


def test_physical_batches_accumulate_to_the_same_update(tiny_model_factory):
    full, n_full = _one_logical_step(tiny_model_factory, cap=None)
    split, n_split = _one_logical_step(tiny_model_factory, cap=2)  # 6 records in 3 physical batches
    assert n_full == n_split == 1  # noise added once per logical batch
    assert max(float((a - b).abs().max()) for a, b in zip(full, split)) < 1e-7


@pytest.mark.parametrize("mode", ["hooks", "ghost", "bk"])
def test_loss_is_recorded_once_per_logical_step(tiny_model_factory, mode):
    """One loss per logical step, the mean over its records, whatever the physical split, private or not:
    otherwise a "final training loss" means different things for a DP and a non-private run."""
    model, tok = tiny_model_factory()
    data = data_seam.collate(_records(tok), tok.pad_token_id, 32)
    ids, mask, tgt = data.tensors
    with torch.no_grad():
        direct = float(lossmod.per_sample_loss(lossmod.forward(model, ids, mask), tgt).mean())
    got = []
    for cap in (None, 2):
        cfg = engine.EngineConfig(target_epsilon=1.0, max_physical_batch_size=cap, grad_sample_mode=mode)
        m, _ = tiny_model_factory()
        opt = torch.optim.SGD(list(m.parameters()), lr=0.0)
        gsm, dp_opt, crit, dp_loader = mechanism.record_level(m, opt, DataLoader(data, batch_size=len(data)), sigma=0.0, clipping_norm=cfg.clipping_norm, grad_sample_mode=cfg.grad_sample_mode, seed=cfg.seed)
        got.append(loop.run(gsm, dp_opt, data_seam.Poisson(dp_loader, dp_opt, cfg.max_physical_batch_size), units.RecordStep(gsm, crit), 1))
        m, _ = tiny_model_factory()
        opt = torch.optim.SGD(list(m.parameters()), lr=0.0)
        got.append(loop.run(m, opt, DataLoader(data, batch_size=len(data)), units.RecordStep(m, split_cap=cfg.max_physical_batch_size), 1))
    for losses in got:
        assert len(losses) == 1 and losses[0] == pytest.approx(direct, rel=1e-5)


def test_final_loss_is_the_last_tenth_of_the_steps():
    assert engine.final_loss([5.0] * 18 + [1.0, 3.0]) == (2.0, 2)
    assert engine.final_loss([4.0, 2.0, float("nan")]) == (None, 1)  # the last step drew no record
    assert engine.final_loss([3.0] * 20 + [float("nan"), 1.0, 2.0]) == (1.5, 3)  # NaN: an empty Poisson batch
    assert engine.final_loss([]) == (None, 1)
    res = engine.TrainResult(private=False, steps=3, dataset_size=10, sample_rate=0.5, noise_multiplier=None,
                             delta=None, epsilon=None, losses=[2.0, float("nan"), 1.0])
    d = res.summary()
    assert d["loss_per_step"] == [2.0, None, 1.0] and d["final_loss"] == 1.0 and d["final_loss_steps"] == 1


def test_ghost_on_tied_embeddings_after_untying(tiny_model_factory):
    """A tied model (SmolLM2-style) fails under ghost clipping until its LM head is untied."""
    from transformers import GPT2Config, GPT2LMHeadModel

    _, tok = tiny_model_factory()
    tied = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=32, n_embd=32, n_layer=1, n_head=2,
                                      tie_word_embeddings=True))
    assert tied.lm_head.weight is tied.transformer.wte.weight
    assert trainable.untie_embeddings(tied)
    assert tied.lm_head.weight is not tied.transformer.wte.weight
    assert torch.equal(tied.lm_head.weight, tied.transformer.wte.weight)
    assert not trainable.untie_embeddings(tied)  # already untied
    data = data_seam.collate(_records(tok), tok.pad_token_id, 32)
    cfg = engine.EngineConfig(target_epsilon=1.0, clipping_norm=0.05, grad_sample_mode="ghost")
    opt = torch.optim.SGD(tied.parameters(), lr=0.0)
    gsm, dp_opt, crit, _ = mechanism.record_level(tied, opt, DataLoader(data, batch_size=len(data)), sigma=0.0, clipping_norm=cfg.clipping_norm, grad_sample_mode=cfg.grad_sample_mode, seed=cfg.seed)
    ids, mask, tgt = data.tensors
    lossmod.batch_loss(gsm, ids, mask, tgt, crit).backward()
    dp_opt.step()
    assert all(torch.isfinite(p.grad).all() for p in tied.parameters())


def test_ghost_on_tied_embeddings_frozen_matches_the_loop(tiny_model_factory):
    """Freezing the tied matrix instead: ghost clipping runs, the shared matrix gets no gradient, and
    the clipped update of the other parameters equals the per-example loop's."""
    from transformers import GPT2Config, GPT2LMHeadModel

    _, tok = tiny_model_factory()

    def make():
        torch.manual_seed(0)
        m = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=32, n_embd=32, n_layer=1, n_head=2,
                                       tie_word_embeddings=True, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
        trainable.prepare_tied(m, "freeze", "ghost", "full")
        return m

    model, ref = make(), make()
    assert not model.transformer.wte.weight.requires_grad and model.lm_head.weight is model.transformer.wte.weight
    data = data_seam.collate(_records(tok), tok.pad_token_id, 32)
    expected, _ = _reference(ref, data, 0.05, len(data))
    cfg = engine.EngineConfig(target_epsilon=1.0, clipping_norm=0.05, grad_sample_mode="ghost")
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.0)
    gsm, dp_opt, crit, _ = mechanism.record_level(model, opt, DataLoader(data, batch_size=len(data)), sigma=0.0, clipping_norm=cfg.clipping_norm, grad_sample_mode=cfg.grad_sample_mode, seed=cfg.seed)
    ids, mask, tgt = data.tensors
    lossmod.batch_loss(gsm, ids, mask, tgt, crit).backward()
    dp_opt.step()
    assert model.transformer.wte.weight.grad is None
    worst = max(float((p.grad - e).abs().max()) for p, e in zip(params, expected))
    assert worst < 1e-6


def test_empty_poisson_batches_still_add_noise(tiny_model_factory):
    """With q*N small, Poisson sampling draws empty batches; each must still be a noisy step."""
    import math

    model, tok = tiny_model_factory()
    recs = [sentiment.encode_text(x, tok, 32) for x in ["a b", "c d", "e f", "g h"]]
    calls = []
    orig = mechanism.record_level

    def spy(*a, **k):
        out = orig(*a, **k)
        add = out[1].add_noise
        out[1].add_noise = lambda: (calls.append(1), add())[1]
        return out

    mechanism.record_level = spy
    try:
        _, res = engine.train(model, recs, engine.EngineConfig(target_epsilon=8.0, delta=1e-3, epochs=5, batch_size=1), tok.pad_token_id, 32)
    finally:
        mechanism.record_level = orig
    assert any(math.isnan(x) for x in res.losses)  # some batches were empty
    assert len(calls) == res.steps  # and every step, empty or not, added noise
