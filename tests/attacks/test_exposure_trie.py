"""Exact exposure by token trie: the same numbers as a plain forward pass of every candidate, on a 10^4 space."""

import itertools

import numpy as np
import pytest
import torch

from dpaudit.attacks import exposure_trie
from dpaudit.attacks.scoring import encode


def _brute_force(model, tok, prefix, secrets, suffix, framing):
    """-log2 P(secret tokens | prefix), one plain forward of each whole candidate, batched with padding."""
    _, _, paths = exposure_trie.secret_paths(tok, prefix, secrets, suffix, framing)
    seqs, masks = encode(tok, [prefix + s + suffix for s in secrets], [len(prefix)] * len(secrets), None, framing)
    out = np.empty(len(secrets))
    with torch.inference_mode():
        for a in range(0, len(secrets), 512):
            rows = []
            for j in range(a, min(a + 512, len(secrets))):
                first, n = masks[j].index(True), int((paths[j] >= 0).sum())
                rows.append((seqs[j][: first + n], first))
            width = max(len(r) for r, _ in rows)
            ids = torch.tensor([r + [0] * (width - len(r)) for r, _ in rows])
            att = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r, _ in rows])
            lp = torch.log_softmax(model(input_ids=ids, attention_mask=att).logits.float(), -1)
            for k, (r, first) in enumerate(rows):
                out[a + k] = -sum(float(lp[k, t - 1, r[t]]) for t in range(first, len(r))) / np.log(2)
    return out


@pytest.mark.parametrize("framing", ["bos_eos", "tokenizer"])
def test_trie_equals_brute_force_on_a_ten_thousand_space(tiny_model_factory, framing):
    model, tok = tiny_model_factory()
    model.eval()
    prefix, suffix = "My account number is ", "."
    space = ["".join(t) for t in itertools.product("0123456789", repeat=4)]
    stats = {}
    trie = exposure_trie.log_probs(model, tok, prefix, space, suffix, batch_size=97, framing=framing, stats=stats)
    brute = _brute_force(model, tok, prefix, space, suffix, framing)
    assert np.abs(trie - brute).max() < 1e-3
    # identical ranks wherever two secrets are not tied within float error
    order = np.argsort(trie, kind="stable")
    assert (np.diff(brute[order]) > -1e-3).all()
    assert stats["nodes"] < len(space) / 2  # forward passes only for internal nodes


def test_paths_stop_at_the_secret_and_share_the_prefix(tiny_model_factory):
    _, tok = tiny_model_factory()
    shared, group_of, paths = exposure_trie.secret_paths(tok, "PIN: ", ["0123", "9999"], " ok")
    for i, s in enumerate(["0123", "9999"]):
        toks = [int(t) for t in paths[i] if t >= 0]
        assert s in tok.decode(toks) and "ok" not in tok.decode(toks)
        assert tok.decode(list(shared[group_of[i]]) + toks).endswith(s)


def test_evaluate_ranks_exposure_over_the_whole_space_when_asked(tiny_model_factory, tmp_path):
    """Opt-in (`--enumerate-limit N`; the default samples reference secrets): `dpaudit evaluate` ranks every canary
    among all other secrets of a 10^4 space, says the suffix was not scored, and its canary bits are the trie's."""
    from dpaudit import checkpoint
    from dpaudit.canaries.manifest import CanaryPlan, generate
    from dpaudit.claim.card import Claim, PrivacyCard
    from dpaudit.evaluation.options import EvalOptions
    from dpaudit.evaluation.steps import evaluate

    model, tok = tiny_model_factory()
    man = generate(CanaryPlan(m=20, length=4))
    card = PrivacyCard(claim=Claim(epsilon=None, delta=0.0), events=[], clipping_norm=1.0, expected_batch_size=8,
                       dataset_size=100)
    ck = checkpoint.write(tmp_path / "ck", model, tok, card, man, {})
    assert evaluate(ck, EvalOptions(attacks=("exposure",)))["exposure"]["enumerated"] is False  # opt-in
    r = evaluate(ck, EvalOptions(attacks=("exposure",), enumerate_limit=10 ** 4))
    ex = r["exposure"]
    assert ex["enumerated"] and ex["suffix_scored"] is False and ex["n_references"] == 10 ** 4 - 20
    want = exposure_trie.log_probs(model.eval(), tok, man.plan.prefix, [c.secret for c in man.canaries],
                                   man.plan.suffix, framing=r["canary_plan"]["framing"])
    np.testing.assert_allclose([c["log_perplexity_bits"] for c in ex["canaries"]], want, atol=1e-3)
    assert evaluate(ck, EvalOptions(attacks=("exposure",), enumerate_limit=0))["exposure"]["enumerated"] is False


def test_the_progress_total_is_known_before_the_forward_passes(tiny_model_factory):
    """The whole-space pass tells its bar how many forward passes it will make (each group's trie is built first):
    the bar ends at its total instead of counting "nodes" without one."""
    model, tok = tiny_model_factory()
    space = ["".join(t) for t in itertools.product("0123456789", repeat=3)]
    seen = {"total": 0, "done": 0}
    exposure_trie.log_probs(model.eval(), tok, "the code is ", space, ".",
                            progress=lambda n: seen.__setitem__("done", seen["done"] + n),
                            on_total=lambda n: seen.__setitem__("total", seen["total"] + n))
    assert seen["total"] == seen["done"] > 100
