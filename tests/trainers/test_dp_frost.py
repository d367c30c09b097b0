"""DP-FROST: partitions, PGM scores, the PGM-EST estimate, PSEL, ComputeSigma, the method in the engine."""

from __future__ import annotations

import contextlib
import io
import json
import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from dpaudit import accounting
from dpaudit.accounting import SubsampledGaussian
from dpaudit.errors import DpauditError
from dpaudit.trainers import partitions, pgm, psel
from tests.settings import TINY_RUN


@pytest.fixture(scope="module")
def tiny(tiny_model_factory):
    model, tok = tiny_model_factory(0)
    return model, tok


def _batches(tok, texts, micro=3):
    from dpaudit.tasks.sentiment import encode_text
    from dpaudit.trainers.data import collate

    t = collate([encode_text(x, tok, 24) for x in texts], tok.pad_token_id, 24).tensors
    return [tuple(x[i:i + micro] for x in t) for i in range(0, len(texts), micro)]


def test_partitions_cover_every_parameter_once(tiny):
    model, _ = tiny
    parts = partitions.partitions(model)
    names = [n for p in parts for n in p.params]
    assert sorted(names) == sorted(n for n, _ in model.named_parameters())
    by = {p.name: p for p in parts}
    assert by["transformer.h.0.attn.c_attn"].params == ("transformer.h.0.attn.c_attn.weight",
                                                       "transformer.h.0.attn.c_attn.bias")  # W with its bias
    assert by["transformer.wte"].kind == "embedding" and by["transformer.wpe"].kind == "embedding"
    assert by["transformer.h.0.ln_1"].kind == "norm" and len(by["transformer.h.0.ln_1"].params) == 2
    assert not [p for p in parts if p.kind == "head"]  # a causal LM has no new head


def test_classifier_head_is_always_trained_and_taken_from_the_budget():
    from dpaudit.tasks.models import ModelSpec, build

    model, _ = build(ModelSpec(name="tiny-bert", n_embd=32, n_layer=1, n_head=2, max_len=32))
    parts = partitions.partitions(model)
    selectable, heads = partitions.split(parts)
    assert [h.name for h in heads] == ["classifier"]
    total = sum(p.size for p in parts)
    assert partitions.budget(parts, 0.5) == int(0.5 * total) - heads[0].size
    with pytest.raises(DpauditError, match="smallest partition"):
        partitions.budget(parts, 1e-6)
    for bad in (0, -0.1, 1.5):
        with pytest.raises(DpauditError, match="frost.gamma"):
            partitions.budget(parts, bad)


def _per_example_grads(model, batches, names):
    """A plain for-loop: one backward per example."""
    out = {n: [] for n in names}
    named = dict(model.named_parameters())
    from dpaudit.trainers.loss import forward, per_sample_loss, trim

    for ids, mask, tgt in batches:
        for j in range(ids.size(0)):
            model.zero_grad()
            i, m, t = trim(ids[j:j + 1], mask[j:j + 1], tgt[j:j + 1])
            per_sample_loss(forward(model, i, m), t).sum().backward()
            for n in names:
                out[n].append(named[n].grad.detach().clone())
    return {n: torch.stack(v) for n, v in out.items()}


@pytest.mark.parametrize("tables", ["none", "tied", "untied"])
@pytest.mark.parametrize("variant,alpha", [("dp_mg", 1), ("dp_mgn", 2), ("dp_mgna", 1), ("dp_mgna", 2)])
def test_pgm_values_against_a_direct_per_example_computation(tiny, variant, alpha, tables):
    """Dense per-example gradients (Opacus) and the sparse ones of embedding tables (the position table; with
    ``untied``, the token table too, where a token repeated in a record sums its positions' gradients; a
    ``tied`` token table keeps Opacus' dense path), all against one backward pass per record."""
    import copy

    model, tok = tiny
    if tables == "untied":
        model = copy.deepcopy(model)
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    prefixes = ("transformer.h.0",) if tables == "none" else ("transformer.h.0", "transformer.wpe", "transformer.wte")
    parts = [p for p in partitions.partitions(model) if p.name.startswith(prefixes)]
    batches = _batches(tok, [f"record number {i} says hello hello hello" for i in range(7)])
    c = 0.05
    got = pgm.pgms(model, batches, parts, variant, alpha, c)
    assert all(p.requires_grad for p in model.parameters())  # flags restored
    names = [n for p in parts for n in p.params]
    g = _per_example_grads(model, batches, names)
    scale = {p.name: (1.0 if variant == "dp_mg" else p.size ** (1 / alpha)) for p in parts}
    vec = {n: g[n] / scale[p.name] for p in parts for n in p.params}
    if variant == "dp_mgna":
        vec = {n: v.abs() for n, v in vec.items()}
    flat = torch.cat([vec[n].flatten(1) for n in names], 1)
    norms = flat.abs().sum(1) if alpha == 1 else flat.norm(dim=1)
    thr = c if variant == "dp_mg" else c / (sum(p.size for p in parts) / len(parts)) ** (1 / alpha)
    f = torch.clamp(thr / norms, max=1.0)
    want = []
    for p in parts:
        s = torch.cat([(vec[n] * f.view(-1, *[1] * (vec[n].dim() - 1))).sum(0).flatten() for n in p.params])
        v = s.abs().sum() if alpha == 1 else s.norm()
        want.append(v / p.size ** (1 / alpha) if variant == "dp_mg" else v)
    assert torch.allclose(got, torch.stack(want), rtol=1e-4, atol=1e-9)
    if tables != "none":  # Opacus' dense tables: the same values
        assert torch.allclose(got, pgm.pgms(model, batches, parts, variant, alpha, c, sparse_tables=False), rtol=1e-5)
    assert pgm.sensitivity(variant, c, alpha, parts) == pytest.approx(
        c / min(p.size for p in parts) ** (1 / alpha) if variant == "dp_mg" else thr)


def test_mle_matches_a_brute_force_likelihood_maximisation():
    rng = np.random.default_rng(0)
    n, rounds, lam1, sigma = 6, 3, 0.1, 0.3
    v_true = rng.uniform(1, 5, n)
    lam_true = np.array([lam1, 0.12, 0.15])
    deltas = np.array([1.0, 0.8, 0.7])
    vt = np.full((rounds, n), np.nan)
    for j in range(rounds):
        keep = range(n) if j == 0 else range(n - j)  # partitions leave R over the rounds
        for i in keep:
            vt[j, i] = lam_true[j] * v_true[i] + rng.normal(0, sigma * deltas[j])
    v, lam = psel.pgm_est(vt, deltas, lam1, iterations=5000)
    seen = ~np.isnan(vt)

    def nll(x):
        vv, ll = x[:n], np.concatenate([[lam1], x[n:]])
        r = np.where(seen, vt - ll[:, None] * vv[None, :], 0.0)
        return float(((r / deltas[:, None]) ** 2).sum())

    best = minimize(nll, np.concatenate([vt[0] / lam1, [1.0] * (rounds - 1)]), method="BFGS", options={"gtol": 1e-10})
    assert nll(np.concatenate([v, lam[1:]])) <= best.fun + 1e-8
    np.testing.assert_allclose(v, best.x[:n], rtol=1e-4)
    np.testing.assert_allclose(lam[1:], best.x[n:], rtol=1e-4)
    sd = psel.pgm_sd(vt, deltas, lam, sigma)  # Lemma 6
    w = lam ** 2 / deltas ** 2
    assert sd[0] == pytest.approx(sigma / math.sqrt(w.sum())) and sd[-1] == pytest.approx(sigma / math.sqrt(w[0]))


def _parts(sizes):
    return [partitions.Partition(f"p{i}", (f"p{i}.w",), s, "linear") for i, s in enumerate(sizes)]


def test_noise_free_selection_picks_the_largest_pgms_within_the_budget():
    sizes = [10, 10, 10, 10, 40, 10]
    true = np.array([5.0, 1.0, 4.0, 0.5, 9.0, 3.0])
    parts = _parts(sizes)
    for rounds in (1, 5):
        cfg = psel.SelectionConfig(budget=30, rounds=rounds, sample_rate=0.1, sigma=0.0)

        def noisy(remaining, t):
            return np.array([0.1 * true[int(p.name[1:])] for p in remaining]), 1.0

        chosen = psel.psel(noisy, parts, cfg).chosen
        # p4 (the largest PGM) does not fit in 30 and is skipped; then the largest that fit
        assert set(chosen) == {"p0", "p2", "p5"}
        assert sum(sizes[int(c[1:])] for c in chosen) <= 30


def test_noisy_selection_respects_the_budget():
    rng = np.random.default_rng(1)
    sizes = list(rng.integers(5, 50, 30))
    parts = _parts(sizes)
    cfg = psel.SelectionConfig(budget=120, rounds=5, sample_rate=0.05, sigma=2.0, nu=1.0)
    for seed in range(5):
        g = np.random.default_rng(seed)

        def noisy(remaining, t, g=g):
            return np.array([0.05 * sizes[int(p.name[1:])] + g.normal(0, 2.0) for p in remaining]), 1.0

        chosen = psel.psel(noisy, parts, cfg).chosen
        assert len(set(chosen)) == len(chosen) and sum(sizes[int(c[1:])] for c in chosen) <= 120


def test_compute_sigma_composes_both_phases_within_epsilon():
    delta, q, steps = 1e-5, 0.02, 150
    s_sgd = accounting.calibrate_sigma(0.9 * 2.0, delta, q, steps, accountant="rdp")
    train = SubsampledGaussian(q, s_sgd, steps)
    for rate in (0.02, 1.0):  # the paper's text and its Alg. 3
        s_ps = accounting.calibrate_sigma_after(2.0, delta, [train], rate, 5, accountant="rdp")
        both = accounting.compute([SubsampledGaussian(rate, s_ps, 5), train], delta, "rdp").epsilon
        assert both <= 2.0 and both > 1.97  # tight: the smallest sigma that fits
    assert accounting.calibrate_sigma_after(2.0, delta, [train], 1.0, 5, "rdp") > \
        accounting.calibrate_sigma_after(2.0, delta, [train], 0.02, 5, "rdp")  # q = 1 needs far more noise
    with pytest.raises(DpauditError, match="already spend"):
        accounting.calibrate_sigma_after(0.5, delta, [train], 0.02, 5, "rdp")


def test_pval_and_random_baselines_fill_the_budget(tiny):
    model, _ = tiny
    selectable, _ = partitions.split(partitions.partitions(model))
    for rule in ("random", "pval"):
        chosen = psel.baseline(selectable, 20000, rule, model, seed=3)
        assert chosen and sum(p.size for p in selectable if p.name in chosen) <= 20000
    assert psel.baseline(selectable, 20000, "random", model, 3) == psel.baseline(selectable, 20000, "random", model, 3)
    with pytest.raises(DpauditError):
        psel.baseline(selectable, 100, "magic", model)


def _selection_audit(sigma: float, trials: int = 60) -> tuple[dict, float]:
    """Many selection runs with and without one target record whose gradient sits entirely in partition p4 (the
    others' gradients are tiny and spread over p0..p3); the guess, fixed in advance: member iff p4 is chosen.
    Returns (the many-run audit's JSON, the selection's own accounted epsilon)."""
    from dpaudit.cli import main

    parts = _parts([10] * 5)
    cfg = psel.SelectionConfig(budget=10, rounds=3, sample_rate=0.5, sigma=sigma, nu=2.0)
    rng = np.random.default_rng(0)
    normal = [{f"p{i}.w": torch.tensor(rng.uniform(0, 1e-4, (1, 10)), dtype=torch.float64) if i < 4 else
               torch.zeros(1, 10, dtype=torch.float64) for i in range(5)} for _ in range(60)]
    target = {f"p{i}.w": torch.zeros(1, 10, dtype=torch.float64) if i < 4 else torch.ones(1, 10, dtype=torch.float64)
              for i in range(5)}
    params = {f"p{i}.w": torch.zeros(10, dtype=torch.float64) for i in range(5)}
    counts = {"tp": 0, "fn": 0, "fp": 0, "tn": 0}
    for trial in range(2 * trials):
        member = trial % 2 == 0
        data = normal + ([target] if member else [])
        g = torch.Generator().manual_seed(trial)

        def pgm_fn(remaining, t, data=data, g=g):
            acc = pgm.Accumulator(remaining, params, cfg.variant, cfg.alpha, cfg.clipping_norm)
            take = torch.rand(len(data), generator=g) < cfg.sample_rate  # the round's Poisson sample
            for x, keep in zip(data, take):
                if keep:
                    acc.add({n: x[n].view(1, 10) for p in remaining for n in p.params})
            return acc.values()

        chosen = psel.psel(psel.gaussian_release(pgm_fn, cfg, g), parts, cfg).chosen
        guess = "p4" in chosen
        counts[("tp" if guess else "fn") if member else ("fp" if guess else "tn")] += 1
    delta = 1e-5
    eps_sel = (accounting.compute([SubsampledGaussian(cfg.sample_rate, sigma, cfg.rounds)], delta, "rdp").epsilon
               if sigma > 0 else math.inf)
    argv = ["audit", "many-run", *[f"--{k}={v}" for k, v in counts.items()], "--delta", str(delta), "--json"]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    return {**json.loads(buf.getvalue()), **counts}, eps_sel


def test_selection_alone_leaks_without_noise_and_not_beyond_its_accounting_with_it():
    leak, _ = _selection_audit(0.0)
    assert leak["tp"] > 0.8 * 60 and leak["fp"] == 0
    # the choice alone proves epsilon > 1 at 95% from 60 trials a side: more than a whole epsilon = 1 budget, let
    # alone the ~10% that DP-FROST gives its selection
    assert leak["epsilon_lb"] > 1.0, leak
    sigma = accounting.calibrate_sigma(1.0, 1e-5, 0.5, 3, accountant="rdp")  # selection noise accounted for eps = 1
    safe, eps_sel = _selection_audit(sigma)
    assert eps_sel <= 1.0 + 1e-6 and safe["epsilon_lb"] <= eps_sel, (safe, eps_sel)


FROST_CONFIG = TINY_RUN + """
[train]
method = "dp_frost"
delta = 1e-5
epochs = 1
batch_size = 24
lr = 5e-3
[train.frost]
gamma = 0.3
sample_rate = 0.25
rounds = 3
"""


def _fit(tmp_path, extra: str, name: str = "v"):
    import tomllib

    from dpaudit.canaries import manifest as canaries
    from dpaudit.checkpoint import load
    from dpaudit.run import config
    from dpaudit.tasks import registry
    from dpaudit.trainers import dp_frost

    cfg = config.parse(tomllib.loads(FROST_CONFIG + f'[[variants]]\nname = "{name}"\n' + extra))
    data = registry.load_data(cfg.task.__dict__)
    ck = dp_frost.fit(cfg, cfg.variants[0], data, canaries.generate(cfg.canaries), tmp_path / name)
    return cfg, load(ck)


def _changed(cfg, ck):
    from dpaudit.tasks.models import build

    init = dict(build(cfg.model)[0].named_parameters())
    trained = dict(ck.load_model()[0].named_parameters())
    return {n for n in init if not torch.equal(init[n].detach(), trained[n].detach())}


@pytest.mark.parametrize("extra", ['target_epsilon = 2.0\n', 'target_epsilon = 2.0\n[variants.frost]\nrate_reading = "alg3"\n',
                                   'target_epsilon = 2.0\n[variants.frost]\nreselect = 2\nselection = "single"\n'])
def test_dp_frost_trains_only_its_choice_and_accounts_the_composition(tmp_path, extra):
    import json

    from dpaudit.claim.reaccount import reaccount

    cfg, ck = _fit(tmp_path, extra)
    run = json.loads((ck.path / "run.json").read_text())
    sels = run["trainer"]["selection"]
    chosen = {n for s in sels for p in s["chosen"] for n in (f"{p}.weight", f"{p}.bias")}
    assert _changed(cfg, ck) <= chosen and _changed(cfg, ck)  # a frozen partition does not change
    card = ck.card
    sel_ev, train_ev = card.events
    k = cfg.variants[0].trainer.frost.reselect
    rounds = 1 if cfg.variants[0].trainer.frost.selection == "single" else 3
    assert sel_ev.steps == k * rounds and sel_ev.sample_rate == (1.0 if "alg3" in extra else 0.25)
    assert card.extra["frost"]["rate_reading"] == ("alg3" if "alg3" in extra else "text")
    assert card.claim.epsilon <= 2.0 and card.method == "dp_frost"
    acct = reaccount(card)
    assert acct.status == "verified" and acct.findings == ()
    # the training phase alone stays at r_eps x epsilon, the composition at epsilon
    alone = accounting.compute([train_ev], card.claim.delta, "prv").epsilon
    assert alone <= 0.9 * 2.0 + 1e-6 < card.claim.epsilon


def test_data_independent_baselines_cost_no_selection(tmp_path):
    cfg, ck = _fit(tmp_path, 'target_epsilon = 2.0\n[variants.frost]\nselection = "pval"\n')
    assert len(ck.card.events) == 1 and ck.card.claim.epsilon <= 2.0
    cfg, ck = _fit(tmp_path, 'target_epsilon = inf\n', "np")
    assert not ck.card.is_private and ck.card.extra["frost"]["sigma_ps"] == 0.0


@pytest.mark.parametrize("extra,needle", [
    ("[variants.frost]\ngamma = 0", "frost.gamma"), ("[variants.frost]\ngamma = 1.5", "frost.gamma"),
    ("[variants.frost]\nrounds = 0", "frost.rounds"), ("[variants.frost]\nr_eps = 1.0", "frost.r_eps"),
    ("[variants.frost]\nr_eps = 0", "frost.r_eps"), ('[variants.frost]\npgm = "x"', "frost.pgm"),
    ('trainable = "lora"', "dp_frost"), ("frost_gamma = 0.5", "moved to its method's section"),
])
def test_bad_frost_settings_fail_before_training(extra, needle):
    import tomllib

    from dpaudit.run import config

    with pytest.raises(DpauditError, match=needle):
        config.parse(tomllib.loads(FROST_CONFIG + f'[[variants]]\nname = "v"\ntarget_epsilon = 1.0\n{extra}\n'))


def test_budget_smaller_than_every_partition_fails_before_training(tmp_path):
    with pytest.raises(DpauditError, match="smallest partition"):
        _fit(tmp_path, "target_epsilon = 1.0\n[variants.frost]\ngamma = 0.0001\n")
    assert not (tmp_path / "v").exists()


def test_frost_options_refused_for_other_methods():
    import tomllib

    from dpaudit.run import config

    text = FROST_CONFIG.replace('method = "dp_frost"', 'method = "dp_adam"')
    with pytest.raises(DpauditError, match="dp_frost"):
        config.parse(tomllib.loads(text + '[[variants]]\nname = "v"\n'))


def test_pgms_of_a_model_in_eval_mode(tiny):
    """from_pretrained models come in eval mode, where Opacus records no activations: the PGMs switch to training
    mode (as the training phase) and give the mode back."""
    model, tok = tiny
    parts = [p for p in partitions.partitions(model) if p.name.startswith("transformer.h.1")]
    batches = _batches(tok, ["one record", "another record"])
    model.eval()
    try:
        got = pgm.pgms(model, batches, parts)
        assert not model.training
    finally:
        model.train()
    assert torch.allclose(got, pgm.pgms(model, batches, parts))  # no dropout in this model: same values
