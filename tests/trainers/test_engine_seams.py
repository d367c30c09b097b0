"""The engine's seams: a noise installed on either mechanism is the one drawn (once per parameter per logical
step, empty and split batches included) and Opacus' own Gaussian path is reproduced exactly; the user-level
optimizer's update is the clipped sum of user gradients over B, against a loop reference; a parameter
selection trains exactly the selected parameters."""

import math

import pytest
import torch

from dpaudit import accounting
from dpaudit.errors import DpauditError
from dpaudit.tasks import sentiment
from dpaudit.trainers import data as data_seam
from dpaudit.trainers import engine, mechanism, noise, trainable, units
from dpaudit.trainers import loss as lossmod

TEXTS = ["a fine film", "dull and long , with nothing to say", "great fun", "My account number is 123456.",
         "the worst", "an astonishing, moving and generous piece of work", "ok", "see you later"]


class CountingNoise:
    """Zero noise that counts its draws and checks what it is given."""

    def __init__(self):
        self.calls = 0

    def sample(self, reference, generator, secure_mode):
        assert generator is not None and secure_mode is False
        self.calls += 1
        return torch.zeros_like(reference)


def _records(tok, n=8):
    return [sentiment.encode_text(TEXTS[i % len(TEXTS)], tok, 32) for i in range(n)]


@pytest.mark.parametrize("mode,cap", [("hooks", None), ("hooks", 3), ("ghost", None)])
def test_record_level_noise_is_drawn_once_per_parameter_per_logical_step(tiny_model_factory, mode, cap):
    model, tok = tiny_model_factory()
    if mode == "ghost":
        trainable.untie_embeddings(model)
    n_params = sum(p.requires_grad for p in model.parameters())
    counter = CountingNoise()
    cfg = engine.EngineConfig(target_epsilon=8.0, delta=1e-3, epochs=2, batch_size=2, grad_sample_mode=mode,
                              max_physical_batch_size=cap)
    _, res = engine.train(model, _records(tok), cfg, tok.pad_token_id, 32, noise=counter)
    assert counter.calls == res.steps * n_params


def test_gaussian_noise_object_reproduces_opacus_path(tiny_model_factory):
    cfg = engine.EngineConfig(target_epsilon=4.0, delta=1e-4, epochs=1, batch_size=4, clipping_norm=0.5)
    q, steps = 4 / 8, 2
    sigma = accounting.calibrate_sigma(4.0, 1e-4, q, steps, accountant=cfg.accountant)
    weights = []
    for nz in (None, noise.Gaussian(sigma * cfg.clipping_norm)):
        model, tok = tiny_model_factory()
        model, res = engine.train(model, _records(tok), cfg, tok.pad_token_id, 32, noise=nz)
        assert res.steps == steps and res.noise_multiplier == sigma
        weights.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*weights))


def test_user_level_noise_plugs_into_the_same_optimizer(tiny_model_factory):
    model, tok = tiny_model_factory()
    by_user = {f"u{i}": _records(tok, 1 + i % 3) for i in range(10)}
    counter = CountingNoise()
    cfg = engine.EngineConfig(target_epsilon=8.0, delta=1e-3, epochs=1, batch_size=5)
    _, res = engine.train_users(model, by_user, cfg, tok.pad_token_id, 32, noise=counter)
    assert counter.calls == res.steps * sum(p.requires_grad for p in model.parameters())


def test_user_dp_optimizer_step_is_clipped_sum_over_expected_users(tiny_model_factory):
    """One step of the user-level mechanism (sigma = 0): p.grad = sum_u clip_C(mean of u's record grads) / B,
    against autograd record by record."""
    model, tok = tiny_model_factory()
    ref, _ = tiny_model_factory()
    ref.load_state_dict(model.state_dict())
    by_user = {"a": _records(tok, 1), "b": [sentiment.encode_text(t, tok, 32) for t in TEXTS[2:7]]}
    users = data_seam.UserBatches(by_user, tok.pad_token_id, 32, q=1.0, seed=0)
    C, B = 0.05, 4
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.0)
    gsm, dp_opt = mechanism.user_level(model, opt, sigma=0.0, clipping_norm=C, expected_users=B, seed=0)
    dp_opt.zero_grad(set_to_none=True)
    units.UserStep(gsm, users, params, private=True, chunk=3)(["a", "b"])
    dp_opt.step()
    ref_params = list(ref.parameters())
    expected = [torch.zeros_like(p) for p in ref_params]
    for u in ("a", "b"):
        ids, mask, tgt = users.data[u]
        mean = [torch.zeros_like(p) for p in ref_params]
        for r in range(ids.size(0)):
            w = int(mask[r].sum())
            loss = lossmod.per_sample_loss(lossmod.forward(ref, ids[r:r + 1, :w], mask[r:r + 1, :w]), tgt[r:r + 1, :w])
            for m, g in zip(mean, torch.autograd.grad(loss.sum(), ref_params)):
                m += g / ids.size(0)
        norm = float(torch.sqrt(sum((m ** 2).sum() for m in mean)))
        assert norm > C  # clipping is active for both users
        for e, m in zip(expected, mean):
            e += m * min(1.0, C / (norm + 1e-6)) / B
    worst = max(float((p.grad - e).abs().max()) for p, e in zip(params, expected))
    assert worst < 1e-7


def test_selected_parameters_are_the_only_ones_trained(tiny_model_factory):
    model, tok = tiny_model_factory()
    names = [n for n, _ in model.named_parameters() if n.endswith("attn.c_attn.weight")]
    assert trainable.select(model, names) == names
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    cfg = engine.EngineConfig(target_epsilon=8.0, delta=1e-3, epochs=1, batch_size=4)
    model, res = engine.train(model, _records(tok), cfg, tok.pad_token_id, 32)
    moved = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert moved == set(names) and not math.isnan(res.epsilon)
    with pytest.raises(DpauditError, match="not in the model"):
        trainable.select(model, ["no.such.weight"])
    with pytest.raises(DpauditError, match="empty parameter selection"):
        trainable.select(model, [])


@pytest.mark.parametrize("private", [False, True])
def test_a_diverging_run_stops_at_its_first_non_finite_loss(tiny_model_factory, private):
    """A learning rate that breaks the weights stops the one loop at the first non-finite loss, in one line naming
    the step and the settings to look at. Before, the run trained to its end on NaN weights, wrote the checkpoint
    and failed at evaluation on "white-box canary scores must be finite", naming the record, not the cause."""
    model, tok = tiny_model_factory()
    cfg = engine.EngineConfig(target_epsilon=8.0 if private else math.inf, delta=1e-3, epochs=3, batch_size=4,
                              lr=1e308, seed=0)
    with pytest.raises(DpauditError, match=r"training diverged: the loss of step \d+ of \d+ is nan; lower train.lr"):
        engine.train(model, _records(tok), cfg, tok.pad_token_id, 32)
