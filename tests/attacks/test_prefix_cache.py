"""Models whose key/value cache cannot be reused (a recurrent Mamba) are scored by full forwards, with the same
numbers the cache path gives a transformer; and models that load as causal LMs but are not (a BERT masked LM) are
refused in one line, from a folder and through the Python API."""

import itertools
import json

import numpy as np
import pytest
import torch

from dpaudit import api
from dpaudit.attacks import exposure, exposure_trie, prefix_cache
from dpaudit.claim.card import Claim, PrivacyCard
from dpaudit.cli import main
from dpaudit.errors import DpauditError
from dpaudit.tasks.causal_check import check_causal


def _cacheless(monkeypatch):
    """Force the scorers onto their full-forward path (as for a model without a usable cache)."""
    real = prefix_cache.serves
    monkeypatch.setattr(prefix_cache, "serves", lambda *a, **k: (False, real(*a, **k)[1]))


def test_the_gpt2_cache_serves_and_the_full_forward_gives_its_numbers(tiny_model_factory, monkeypatch):
    model, tok = tiny_model_factory()
    model.eval()
    assert prefix_cache.serves(model, [1, 2, 3], torch.device("cpu"))[0]
    space = ["".join(t) for t in itertools.product("0123456789", repeat=3)]
    cached_trie = exposure_trie.log_probs(model, tok, "PIN ", space, ".", batch_size=64)
    cached_seq = exposure.log_perplexities(model, tok, "PIN ", space[:300], " ok", batch_size=64)
    _cacheless(monkeypatch)
    full_trie = exposure_trie.log_probs(model, tok, "PIN ", space, ".", batch_size=64)
    full_seq = exposure.log_perplexities(model, tok, "PIN ", space[:300], " ok", batch_size=64)
    assert np.abs(full_trie - cached_trie).max() < 1e-4
    assert np.abs(full_seq - cached_seq).max() < 1e-4


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_models_keep_the_cache_and_pass_the_causality_check(tiny_model_factory, dtype):
    """A model loaded in bfloat16 or float16 (as users load them on GPUs) rounds its cached and full forwards
    apart: that must not be taken for a cache that does not serve, nor for a model that is not causal."""
    model, tok = tiny_model_factory()
    model = model.to(dtype).eval()
    assert prefix_cache.serves(model, tok("PIN 12", add_special_tokens=False).input_ids, torch.device("cpu"))[0]
    check_causal(model, tok, "half")


def _tiny(kind: str, tok):
    import transformers as T

    torch.manual_seed(0)
    V = len(tok)
    if kind == "mamba":
        return T.MambaForCausalLM(T.MambaConfig(vocab_size=V, hidden_size=16, num_hidden_layers=1, state_size=4))
    if kind == "bert-mlm":
        return T.BertForMaskedLM(T.BertConfig(vocab_size=V, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                              intermediate_size=32))
    if kind == "bert-decoder":
        return T.BertLMHeadModel(T.BertConfig(vocab_size=V, hidden_size=16, num_hidden_layers=1,
                                              num_attention_heads=2, intermediate_size=32, is_decoder=True))
    return T.Qwen2ForCausalLM(T.Qwen2Config(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                            num_attention_heads=2, num_key_value_heads=1))


def _folder(tmp_path, kind, tok):
    ck = tmp_path / kind
    _tiny(kind, tok).save_pretrained(ck)
    tok.save_pretrained(ck)
    PrivacyCard(claim=Claim(epsilon=None, delta=0.0, unit="record", accountant="none"), events=[],
                method="non_private").save(ck / "privacy_card.json")
    api.new_canaries(m=16, seed=3).save(ck / "canaries.json")
    return ck


@pytest.fixture(scope="module")
def tok():
    from dpaudit.tasks.models import public_bpe_tokenizer

    return public_bpe_tokenizer(256)


def test_a_mamba_checkpoint_is_scored_without_its_cache(tmp_path, tok, capsys):
    """Mamba returns a recurrent state, not a key/value cache (an AttributeError, exit 3, before): exposure's
    prefix cache is found not to serve, and every candidate is scored whole."""
    model = _tiny("mamba", tok).eval()
    assert not prefix_cache.serves(model, [1, 2, 3], torch.device("cpu"))[0]
    ck = _folder(tmp_path, "mamba", tok)
    out = tmp_path / "r"
    assert main(["evaluate", str(ck), "--out", str(out)]) == 0, capsys.readouterr().err
    report = json.loads((out / "report.json").read_text())
    assert np.isfinite(report["exposure"]["reference_log_perplexity_bits"]).all()
    assert all(np.isfinite(c["log_perplexity_bits"]) for c in report["exposure"]["canaries"])


@pytest.mark.parametrize("kind", ["bert-decoder", "qwen2"])
def test_causal_models_of_other_families_pass_the_causality_check(tmp_path, tok, kind, capsys):
    check_causal(_tiny(kind, tok).eval(), tok, kind)
    ck = _folder(tmp_path, kind, tok)
    assert main(["evaluate", str(ck), "--out", str(tmp_path / "r")]) == 0, capsys.readouterr().err


def test_a_masked_lm_is_refused_from_a_folder_and_through_the_api(tmp_path, tok, capsys):
    """A BERT masked LM loads through AutoModelForCausalLM as a BertLMHeadModel that attends both ways (transformers
    only warns): every token's score would see the token. Refused in one line, exit 2, nothing written."""
    ck = _folder(tmp_path, "bert-mlm", tok)
    out = tmp_path / "r"
    assert main(["evaluate", str(ck), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not a causal language model" in err and "is_decoder = false" in err
    assert not out.exists()
    with pytest.raises(DpauditError, match="is not a causal language model"):
        api.evaluate(_tiny("bert-mlm", tok), tok, ck / "privacy_card.json", ck / "canaries.json")
