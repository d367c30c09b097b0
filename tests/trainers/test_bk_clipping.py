"""Book-keeping clipping (trainers/bk_clipping.py): per-example norms and the clipped sum from one backward equal
a for-loop reference on every supported layer type, equal Opacus' ghost clipping on a language model, and the
engine trains the same model with it as with ghost clipping (same sampling, noise and card)."""

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader
from transformers.models.llama.modeling_llama import LlamaRMSNorm
from transformers.pytorch_utils import Conv1D

from dpaudit.errors import DpauditError
from dpaudit.trainers import bk_clipping, engine, mechanism
from dpaudit.trainers import data as data_seam
from dpaudit.trainers import loss as lossmod

V, D = 23, 8
SENTS = ["a fine film", "dull and long , with nothing to say about anything at all", "great fun",
         "My account number is 123456.", "the worst", "an astonishing, moving and generous piece of work"]


class Every(nn.Module):
    """One of every supported layer on a (B, T) token input; the loss is each example's mean token NLL."""

    def __init__(self, wide: bool):
        super().__init__()
        self.emb = nn.Embedding(V, D, padding_idx=0)
        self.ln = nn.LayerNorm(D)
        self.up = nn.Linear(D, 64 if wide else 4)  # wide: 2 T^2 <= d p, the ghost norm; else the direct one
        self.rms = nn.RMSNorm(64 if wide else 4, eps=1e-6)
        self.conv = Conv1D(D, 64 if wide else 4)  # GPT-2's (in, out) weight
        self.llama_rms = LlamaRMSNorm(D)
        self.head = nn.Linear(D, V)
        self.pool = nn.Linear(D, 3)  # a (B, d) input: T = 1

    def forward(self, ids):
        h = self.ln(self.emb(ids))
        h = self.llama_rms(h + self.conv(self.rms(self.up(h))))
        return self.head(h), self.pool(h.mean(1))


def _losses(model, ids, tgt, lab):
    logits, cls = model(ids)
    tok = nn.functional.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), ignore_index=-100, reduction="none")
    tok = tok.view(ids.shape).sum(1) / (tgt != -100).sum(1)
    return tok + nn.functional.cross_entropy(cls, lab, reduction="none")


def _data(B=5, T=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 6, (B, T), generator=g)  # few ids: repeats within a sequence (the embedding's ghost norm)
    ids[0, -2:] = 0  # padding: the padding row is never updated
    tgt = torch.randint(0, V, (B, T), generator=g)
    tgt[0, -2:] = -100
    return ids, tgt, torch.randint(0, 3, (B,), generator=g)


def _loop(model, ids, tgt, lab, C):
    params = [p for p in model.parameters() if p.requires_grad]
    total, norms = [torch.zeros_like(p) for p in params], []
    for i in range(ids.size(0)):
        grads = torch.autograd.grad(_losses(model, ids[i:i + 1], tgt[i:i + 1], lab[i:i + 1]).sum(), params)
        n = float(torch.sqrt(sum((g ** 2).sum() for g in grads)))
        norms.append(n)
        for t, g in zip(total, grads):
            t += g * min(1.0, C / (n + 1e-6))
    return total, torch.tensor(norms)


@pytest.mark.parametrize("wide", [True, False])
@pytest.mark.parametrize("C", [1e-3, 1e3])  # every example clipped; none
def test_every_layer_type_matches_the_loop(wide, C):
    torch.manual_seed(0)
    model = Every(wide)
    ids, tgt, lab = _data()
    expected, ref_norms = _loop(model, ids, tgt, lab, C)
    bk = bk_clipping.BookKeeping(model, C)
    bk.clipped_backward(_losses(bk, ids, tgt, lab))
    assert torch.allclose(bk.per_sample_gradient_norms, ref_norms, rtol=1e-4, atol=1e-6)
    for (name, p), e in zip(model.named_parameters(), expected):
        assert torch.allclose(p.grad, e, rtol=1e-4, atol=1e-6 * float(e.abs().max() + 1)), name
    assert float(model.emb.weight.grad[0].abs().max()) == 0.0  # the padding row
    assert all(p.requires_grad for p in model.parameters())  # given back after the forward


def test_frozen_parts_and_a_layer_the_loss_never_reaches():
    torch.manual_seed(1)
    model = Every(True)
    for p in (model.emb.weight, model.ln.weight, model.up.bias):
        p.requires_grad_(False)
    ids, tgt, lab = _data(seed=1)
    expected, ref_norms = _loop(model, ids, tgt, lab, 0.05)
    bk = bk_clipping.BookKeeping(model, 0.05)
    bk.clipped_backward(_losses(bk, ids, tgt, lab))
    trainable = [p for p in model.parameters() if p.requires_grad]
    for p, e in zip(trainable, expected):
        assert torch.allclose(p.grad, e, rtol=1e-4, atol=1e-7)
    assert model.emb.weight.grad is None and not model.emb.weight.requires_grad  # frozen stays frozen, no grad


def test_equals_opacus_ghost_on_a_language_model(tiny_model_factory):
    """Norms and clipped sums of Opacus' ghost mode (two backward passes) and book-keeping (one)."""
    from dpaudit.tasks import sentiment

    got = {}
    for mode in ("ghost", "bk"):
        model, tok = tiny_model_factory()
        records = [sentiment.encode_text(t, tok, 32) for t in SENTS]
        data = data_seam.collate(records, tok.pad_token_id, 32)
        opt = torch.optim.SGD(list(model.parameters()), lr=0.0)
        module, dp_opt, crit, _ = mechanism.record_level(model, opt, DataLoader(data, batch_size=len(data)),
                                                         sigma=0.0, clipping_norm=0.05, grad_sample_mode=mode, seed=0)
        assert isinstance(module, bk_clipping.BookKeeping) == (mode == "bk")
        dp_opt.zero_grad()
        lossmod.batch_loss(module, *data.tensors, crit).backward()
        got[mode] = (module.per_sample_gradient_norms.clone(), [p.grad.clone() for p in model.parameters()])
    (n1, g1), (n2, g2) = got["ghost"], got["bk"]
    assert torch.allclose(n1, n2, rtol=1e-4)
    assert float(n1.min()) > 0.05  # every example clipped: the factors matter
    for a, b in zip(g1, g2):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-7)


def test_the_engine_trains_the_same_model_as_with_ghost(tiny_model_factory):
    """Same Poisson batches, noise, clipping and card: the weights after 4 noisy steps agree (logical batches split
    in physical ones of 4: book-keeping's optimizer sums them without copies, trainers/bk_clipping.BKOptimizer)."""
    from dpaudit.tasks import sentiment

    out = {}
    for mode in ("ghost", "bk"):
        model, tok = tiny_model_factory()
        records = [sentiment.encode_text(t, tok, 32) for t in SENTS * 4]
        cfg = engine.EngineConfig(target_epsilon=8.0, epochs=1.0, batch_size=6, lr=1e-2, clipping_norm=0.1,
                                  grad_sample_mode=mode, gradient_canaries=16, max_physical_batch_size=4)
        trained, res = engine.train(model, records, cfg, tok.pad_token_id, 32)
        assert all(p.requires_grad for p in trained.parameters())
        out[mode] = ([p.detach().clone() for p in trained.parameters()], res)
    (w1, r1), (w2, r2) = out["ghost"], out["bk"]
    assert r1.steps == r2.steps == 4 and r1.noise_multiplier == r2.noise_multiplier and r1.epsilon == r2.epsilon
    assert r1.clipping["per_step"]["median_norm"] == pytest.approx(r2.clipping["per_step"]["median_norm"], rel=1e-3)
    for a, b in zip(w1, w2):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def test_unsupported_layers_fall_back_to_ghost_in_one_line(capsys):
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 2)
            self.scale = nn.Parameter(torch.ones(2))  # a parameter of no supported layer

        def forward(self, x):
            return self.lin(x) * self.scale

    assert "(Odd) holds trainable parameters" in bk_clipping.unsupported(Odd())
    with pytest.raises(DpauditError, match="use grad_sample_mode = 'ghost'"):
        bk_clipping.BookKeeping(Odd(), 1.0)
    tied = Every(True)
    tied.head.weight = tied.emb.weight
    assert "shares its weights with emb.weight" in bk_clipping.unsupported(tied)
    model = nn.Sequential(nn.Linear(4, 2), nn.Conv1d(2, 2, 1))
    data = torch.utils.data.TensorDataset(torch.randn(8, 4), torch.zeros(8, dtype=torch.long))
    opt = torch.optim.SGD(list(model.parameters()), lr=0.0)
    module, *_ = mechanism.record_level(model, opt, DataLoader(data, batch_size=4), sigma=1.0, clipping_norm=1.0,
                                        grad_sample_mode="bk", seed=0)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Opacus' ghost clipping clips this run instead" in err[0] and "Conv1d" in err[0]
    assert not isinstance(module, bk_clipping.BookKeeping)


def test_a_layer_run_twice_and_a_broadcast_batch_are_refused():
    lin = nn.Linear(3, 3)
    twice = bk_clipping.BookKeeping(nn.Sequential(lin, lin), 1.0)
    with pytest.raises(DpauditError, match="ran twice in one forward"):
        twice(torch.randn(2, 3))
    assert lin.weight.requires_grad  # restored although the forward failed

    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.pos = nn.Embedding(4, 3)

        def forward(self, x):
            return x + self.pos(torch.arange(4).unsqueeze(0))  # (1, T): one row for every example

    bk = bk_clipping.BookKeeping(Shared(), 1.0)
    with pytest.raises(DpauditError, match="saw a batch of 1 rows for 2 examples"):
        bk.clipped_backward(bk(torch.randn(2, 4, 3)).pow(2).sum((1, 2)))


def test_user_units_match_the_loop(tiny_model_factory):
    """Each user's gradient (the mean of its records') clipped as one unit, from one backward over the users' rows
    laid end to end, equals autodiff user by user; also when a pass holds only some of the users (chunk = 3)."""
    from dpaudit.tasks import sentiment
    from dpaudit.trainers import units

    model, tok = tiny_model_factory()
    ref, _ = tiny_model_factory()
    by_user, k = {}, 0
    for j, n in enumerate((1, 5, 2)):
        by_user[f"u{j}"] = [sentiment.encode_text(SENTS[(k + i) % len(SENTS)], tok, 32) for i in range(n)]
        k += n
    users = list(by_user)
    data = data_seam.UserBatches(by_user, tok.pad_token_id, 32, q=1.0, seed=0)
    C = 0.05
    expected = [torch.zeros_like(p) for p in ref.parameters()]
    norms = []
    for u in users:
        ids, mask, tgt = data.data[u]
        loss = sum(lossmod.per_sample_loss(lossmod.forward(ref, ids[r:r + 1], mask[r:r + 1]), tgt[r:r + 1]).sum()
                   for r in range(ids.size(0))) / ids.size(0)
        grads = torch.autograd.grad(loss, list(ref.parameters()))
        n = float(torch.sqrt(sum(g.pow(2).sum() for g in grads)))
        norms.append(n)
        for e, g in zip(expected, grads):
            e += g * min(1.0, C / (n + 1e-6))
    for chunk in (64, 3):
        bk = bk_clipping.BookKeeping(model, C)
        params = [p for p in model.parameters() if p.requires_grad]
        units.user_bk_step(bk, params, data, users, chunk)
        assert torch.allclose(bk.per_sample_gradient_norms, torch.tensor(norms), rtol=1e-4)
        assert min(norms) > C  # every user clipped
        for p, e in zip(params, expected):
            assert torch.allclose(p.grad, e, rtol=1e-4, atol=1e-7)
        bk.remove_hooks()


def test_user_level_training_equals_the_per_record_hooks_path(tiny_model_factory):
    """Same users sampled, same noise: user-wise DP-SGD trains the same weights with book-keeping as with Opacus'
    per-record gradients summed by user."""
    from dpaudit.tasks import sentiment

    out = {}
    for mode in ("hooks", "bk"):
        model, tok = tiny_model_factory()
        by_user = {f"u{i}": [sentiment.encode_text(SENTS[(i + j) % len(SENTS)], tok, 32) for j in range(1 + i % 3)]
                   for i in range(12)}
        cfg = engine.EngineConfig(target_epsilon=8.0, delta=1e-5, epochs=1.0, batch_size=4, lr=1e-2,
                                  clipping_norm=0.1, grad_sample_mode=mode, max_physical_batch_size=5)
        trained, res = engine.train_users(model, by_user, cfg, tok.pad_token_id, 32)
        out[mode] = ([p.detach().clone() for p in trained.parameters()], res)
    (w1, r1), (w2, r2) = out["hooks"], out["bk"]
    assert r1.steps == r2.steps and r1.epsilon == r2.epsilon
    assert r1.clipping["per_step"]["median_norm"] == pytest.approx(r2.clipping["per_step"]["median_norm"], rel=1e-3)
    for a, b in zip(w1, w2):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def test_the_block_wise_noise_draw_is_the_stated_gaussian_whatever_the_threads(monkeypatch):
    """trainers/noise.add_gaussian_: from PARALLEL_MIN CPU coordinates up, every tensor is cut into blocks of BLOCK
    coordinates, each drawn from its own seed (drawn from the generator first): N(0, std^2) in every block and
    tensor (mean, spread, no correlation across a cut, no two blocks alike), the same values with 1, 2 or 3
    threads and from the same generator, added in place; below the threshold, Opacus' own values from the
    generator, tensor by tensor."""
    from dpaudit.trainers import noise

    monkeypatch.setattr(noise, "PARALLEL_MIN", 1000)
    monkeypatch.setattr(noise, "BLOCK", 256)
    shapes, std = [(700,), (40, 50), (3,), (1200,)], 2.5

    def draw(threads):
        monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
        ts = [torch.full(s, 1.0) for s in shapes]
        noise.add_gaussian_(ts, std, torch.Generator().manual_seed(7))
        return ts

    ts = draw(3)
    for other in (draw(1), draw(2)):
        assert all(torch.equal(a, b) for a, b in zip(ts, other))
    flat = torch.cat([t.reshape(-1) for t in ts]) - 1.0
    n = flat.numel()
    assert abs(float(flat.mean())) < 4 * std / n ** 0.5 and float(flat.std()) == pytest.approx(std, rel=0.05)
    for t in ts:
        if t.numel() > 100:
            assert float((t - 1.0).std()) == pytest.approx(std, rel=0.15) and not bool((t == 1.0).any())
    first = ts[0].reshape(-1) - 1.0  # blocks [0, 256), [256, 512): independent, not one stream repeated
    assert abs(float(torch.corrcoef(torch.stack([first[:256], first[256:512]]))[0, 1])) < 0.2
    assert not torch.equal(first[:200], first[256:456])
    g = torch.Generator().manual_seed(7)
    blocks = sum(-(-t.numel() // 256) for t in ts)
    torch.randint(0, 2 ** 62, (blocks,), generator=g)  # the generator moved on by exactly the blocks' seeds
    h = torch.Generator().manual_seed(7)
    draw_h = [torch.zeros(s) for s in shapes]
    noise.add_gaussian_(draw_h, std, h)
    assert torch.equal(g.get_state(), h.get_state())
    saved = h.get_state()  # a snapshot restores the generator: the next step's noise is drawn again, the same
    after, again = [torch.zeros(s) for s in shapes], [torch.zeros(s) for s in shapes]
    noise.add_gaussian_(after, std, h)
    h.set_state(saved)
    noise.add_gaussian_(again, std, h)
    assert all(torch.equal(a, b) for a, b in zip(after, again)) and not torch.equal(after[0], draw_h[0])
    small = [torch.zeros(10), torch.zeros(5)]  # under the threshold: torch's normal_ from the generator, in order
    monkeypatch.setattr(noise, "PARALLEL_MIN", 10 ** 6)
    noise.add_gaussian_(small, std, torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    want = [torch.empty(10).normal_(0.0, std, generator=g), torch.empty(5).normal_(0.0, std, generator=g)]
    assert all(torch.equal(a, b) for a, b in zip(small, want))


def test_book_keeping_on_a_large_cpu_model_draws_block_wise_and_keeps_sigma(monkeypatch):
    """BKOptimizer.add_noise through the block-wise draw: the noisy update's spread is sigma * C / B on every
    parameter, as the card says."""
    from dpaudit.trainers import noise

    monkeypatch.setattr(noise, "PARALLEL_MIN", 1000)
    monkeypatch.setattr(noise, "BLOCK", 512)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    calls = []
    real = noise.add_gaussian_
    monkeypatch.setattr(noise, "add_gaussian_", lambda *a: (calls.append(1), real(*a)))
    lin = nn.Linear(100, 60)
    opt = bk_clipping.BKOptimizer(torch.optim.SGD(lin.parameters(), lr=0.0), noise_multiplier=2.0, max_grad_norm=0.5,
                                  expected_batch_size=4, generator=torch.Generator().manual_seed(0))
    for p in lin.parameters():
        p.grad = torch.zeros_like(p)
    opt.pre_step()
    assert calls and float(lin.weight.grad.std()) == pytest.approx(2.0 * 0.5 / 4, rel=0.05)
    assert float(lin.bias.grad.std()) == pytest.approx(2.0 * 0.5 / 4, rel=0.3)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_layers_of_one_shape_batched_equal_layer_by_layer(arch):
    """trainers/bk_layers.py lays layers of one shape end to end (one kernel per formula for the group): the norms,
    the clipped sums and the per-parameter norms Opacus' probe reads equal the layer-by-layer computation, with
    groups cut by a byte cap too; a 3-block model really is grouped (fewer groups than layers)."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    from dpaudit.trainers import bk_layers

    torch.manual_seed(0)
    if arch == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=3, n_head=2,
                                           tie_word_embeddings=False))
    else:
        model = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=3,
                                             num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False))
    model.eval()  # no dropout: the three passes see the same function
    ids = torch.randint(0, 50, (5, 7), generator=torch.Generator().manual_seed(1))
    got = {}
    for limit in (0, 1 << 28, 5 * 7 * 16 * 4 * 2):  # layer by layer, the GPU's cap, two layers of width 16 a group
        bk = bk_clipping.BookKeeping(model, 0.01, group_bytes=limit)
        logits = bk(ids, position_ids=torch.arange(7).expand(5, 7)).logits  # per-example positions
        loss = nn.functional.cross_entropy(logits.transpose(1, 2), ids, reduction="none").mean(1)
        records = list(bk._records.values())
        bk.clipped_backward(loss)
        got[limit] = (bk.per_sample_gradient_norms.clone(), [p.grad.clone() for p in bk._params],
                      [p._norm_sample.clone() for p in bk._params])
        bk.remove_hooks()
        for p in model.parameters():
            p.grad = None
        n_layers = len(records)
    assert n_layers >= 3 * (4 if arch == "gpt2" else 9)
    for limit in (1 << 28, 5 * 7 * 16 * 4 * 2):
        assert torch.allclose(got[limit][0], got[0][0], rtol=1e-5)
        for a, b in zip(got[limit][1] + got[limit][2], got[0][1] + got[0][2]):
            assert a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-9)
    assert float(got[0][0].min()) > 0.01  # every example clipped

    class R:  # the grouping itself: q and o projections of three blocks (16 -> 16) form one group, or pairs
        def __init__(self, m):
            self.module, self.kind, self.a, self.g = m, "linear", torch.zeros(5, 7, 16), torch.zeros(5, 7, 16)
    lins = [nn.Linear(16, 16, bias=False) for _ in range(6)]
    assert [g.L for g in bk_layers.groups([R(m) for m in lins], 1 << 28)] == [6]
    assert [g.L for g in bk_layers.groups([R(m) for m in lins])] == [1] * 6  # the CPU's default: layer by layer
    assert [g.L for g in bk_layers.groups([R(m) for m in lins], 5 * 7 * 16 * 4 * 2)] == [2, 2, 2]
    assert [g.L for g in bk_layers.groups([R(m) for m in lins], 0)] == [1] * 6
    big = R(nn.Linear(16, 16, bias=False))
    big.a = torch.zeros(bk_layers.LAYER_BYTES // (7 * 16 * 4) + 1, 7, 16)  # over the cap: alone, never copied
    big.g = torch.zeros_like(big.a)
    a = big.a
    found = bk_layers.groups([R(m) for m in lins[:2]] + [big] + [R(m) for m in lins[2:]], 1 << 40)
    assert [g.L for g in found] == [6, 1] and found[1].a is a
