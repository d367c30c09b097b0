"""The journey of a team that trains with its own loop: plain transformers + Opacus, no dpaudit trainer.

Canaries from the API before training, inserted into a ``datasets.Dataset``; training with Opacus'
PrivacyEngine (Poisson sampling); the card from the engine; ``dpaudit evaluate`` on the plain Hugging Face
output folder. Then the same model with a card claiming less than the accountants prove, and a model
trained without noise whose card claims epsilon = 1: the audit must have the power to refute it, and does.
"""

from __future__ import annotations

import json
import random
import shutil

import pytest
import torch
import torch.nn.functional as F
from datasets import Dataset
from opacus import PrivacyEngine
from torch.utils.data import DataLoader, TensorDataset
from transformers import GPT2Config, GPT2LMHeadModel

from dpaudit import api
from dpaudit.cli import main
from dpaudit.tasks.models import public_bpe_tokenizer

DELTA = 1e-5
TARGET = 1.0  # below the audit's ceiling (about 3 with m = 200), so that the audit can refute it


def _data(manifest, n_public=300, seed=0):
    rng = random.Random(seed)
    words = ["alpha", "bravo", "delta", "echo", "golf", "hotel", "kilo", "lima", "oscar", "tango"]
    public = Dataset.from_dict({"text": [f"{rng.choice(words)} and {rng.choice(words)} went to {rng.choice(words)}."
                                         for _ in range(n_public)]})
    mixed = api.insert_canaries(public, manifest, column="text", seed=seed)
    assert len(mixed) == n_public + len(manifest.training_texts())
    return mixed


def _tensors(tok, texts):
    enc = tok(list(texts), padding="max_length", truncation=True, max_length=20, return_tensors="pt")
    return TensorDataset(enc["input_ids"], enc["attention_mask"])


def _model(tok):
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=24, n_embd=64, n_layer=2, n_head=2,
                                      tie_word_embeddings=False, bos_token_id=tok.eos_token_id,
                                      eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def _loss(model, ids, mask):
    pos = torch.arange(ids.shape[1]).expand_as(ids)  # per-sequence positions: Opacus needs a batch dimension
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, :-1]
    per_tok = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    m = mask[:, 1:].float()
    return ((per_tok * m).sum(1) / m.sum(1)).mean()


def _save(folder, model, tok, manifest, card):
    folder.mkdir(parents=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    manifest.save(folder / "canaries.json")
    card.save(folder / "privacy_card.json")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("external")
    tok = public_bpe_tokenizer(512)
    manifest = api.new_canaries(m=200, repetitions=1, seed=11, length=4, n_references=300)  # 10^4 secrets: exposure
    # ranks each canary over the whole space quickly (the 10^6 trie is tested in test_exposure_trie.py)
    data = _tensors(tok, _data(manifest)["text"])

    # DP: Opacus picks sigma for epsilon = 1 over 6 epochs; Poisson sampling through its DPDataLoader
    model = _model(tok)
    engine = PrivacyEngine(accountant="prv")
    model, opt, loader = engine.make_private_with_epsilon(
        module=model, optimizer=torch.optim.Adam(model.parameters(), lr=3e-3),
        data_loader=DataLoader(data, batch_size=50, shuffle=True), target_epsilon=TARGET, target_delta=DELTA,
        epochs=6, max_grad_norm=1.0)
    for _ in range(6):
        for ids, mask in loader:
            if len(ids):
                opt.zero_grad()
                _loss(model, ids, mask).backward()
                opt.step()
    card = api.card_from_opacus(engine, loader, opt, delta=DELTA)
    _save(root / "dp", model._module, tok, manifest, card)

    # non-private: the same data, plain Adam, long enough to memorise the canaries
    model = _model(tok)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(40):
        for ids, mask in DataLoader(data, batch_size=32, shuffle=True):
            opt.zero_grad()
            _loss(model, ids, mask).backward()
            opt.step()
    (root / "np").mkdir()
    model.save_pretrained(root / "np")
    tok.save_pretrained(root / "np")
    manifest.save(root / "np" / "canaries.json")
    ev = card.events[0]
    assert main(["card", "--epsilon", str(TARGET), "--delta", str(DELTA), "--sigma", str(ev.noise_multiplier),
                 "--sample-rate", str(ev.sample_rate), "--steps", str(ev.steps), "--dataset-size",
                 str(card.dataset_size), "--out", str(root / "np" / "privacy_card.json")]) == 0
    return root, card, manifest


def _evaluate(folder, out, *extra):
    rc = main(["evaluate", str(folder), "--out", str(out), "--references", "300", "--quiet", *map(str, extra)])
    assert rc == 0
    return json.loads((out / "report.json").read_text())


def test_card_records_what_opacus_did(trained):
    _, card, _ = trained
    ev = card.events[0]
    assert ev.sampler == "poisson" and card.clipping_norm == 1.0 and card.claim.accountant == "prv"
    n = card.dataset_size
    assert ev.sample_rate == pytest.approx(1 / -(-n // 50))  # Opacus' q = 1 / len(loader), not 50 / n
    assert ev.steps == 6 * -(-n // 50)
    assert card.claim.epsilon == pytest.approx(TARGET, rel=0.05)


def test_dp_model_is_consistent(trained, tmp_path):
    root, card, _ = trained
    r = _evaluate(root / "dp", tmp_path / "dp")
    v = r["verdict"]
    assert v["status"] == "consistent", v["reason"]
    assert v["accounting"]["status"] == "verified" and v["empirical"]["status"] == "consistent"
    assert v["empirical"]["ceiling"] >= card.claim.epsilon
    assert main(["check", str(tmp_path / "dp" / "report.json"), "--policy", "configs/policy.toml"]) == 0


def test_under_claim_is_an_accounting_mismatch(trained, tmp_path):
    root, card, _ = trained
    folder = tmp_path / "under"
    shutil.copytree(root / "dp", folder)
    d = json.loads((folder / "privacy_card.json").read_text())
    d["claim"]["epsilon"] = 0.8 * card.claim.epsilon
    (folder / "privacy_card.json").write_text(json.dumps(d))
    assert main(["account", "--card", str(folder / "privacy_card.json")]) == 1
    v = _evaluate(folder, tmp_path / "under-report")["verdict"]
    assert v["status"] == "accounting-mismatch" and v["accounting"]["status"] == "under-claim"


def test_non_private_model_claiming_epsilon_one_is_violated(trained, tmp_path):
    root, _, _ = trained
    assert main(["account", "--card", str(root / "np" / "privacy_card.json")]) == 0  # the card itself is fine
    r = _evaluate(root / "np", tmp_path / "np")
    v = r["verdict"]
    assert v["empirical"]["ceiling"] > TARGET  # the audit had the power to refute epsilon = 1 ...
    assert v["status"] == "violated" and v["empirical"]["epsilon_lb"] > TARGET  # ... and did
    assert main(["check", str(tmp_path / "np" / "report.json")]) == 1


def test_canaries_are_scored_as_the_model_saw_them(trained, tmp_path):
    """The loop above fed tokenizer(text) (no BOS for this tokenizer); scoring BOS + text + EOS shifts every
    position of a model with learned absolute positions, and the memorised canaries are much harder to see."""
    root, _, _ = trained
    auc = {}
    for framing in ("tokenizer", "bos_eos"):
        out = tmp_path / framing
        assert main(["evaluate", str(root / "np"), "--out", str(out), "--attacks", "loss", "--off-plan", "--canary-framing", framing,
                     "--quiet"]) == 0
        r = json.loads((out / "report.json").read_text())
        assert r["canary_plan"]["framing"] == framing
        # the user's word for a loop dpaudit cannot see: the report says it was stated, not verified
        assert r["canary_plan"]["framing_source"] == "option"
        assert f"(`--canary-framing {framing}`, not verified)" in (out / "REPORT.md").read_text()
        auc[framing] = r["attacks"]["loss"]["auc"]
    assert auc["tokenizer"] > 0.9 and auc["bos_eos"] < auc["tokenizer"] - 0.2, auc


def test_lora_adapter_folder_with_local_base(trained, tmp_path, capsys):
    from peft import LoraConfig, get_peft_model

    root, card, manifest = trained
    tok = public_bpe_tokenizer(512)
    base_dir = tmp_path / "base"
    _model(tok).save_pretrained(base_dir)
    tok.save_pretrained(base_dir)
    from transformers import AutoModelForCausalLM

    peft = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir),
                          LoraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True))
    _save(tmp_path / "adapter", peft, tok, manifest, card)
    cfg = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == str(base_dir)
    # a path the checkpoint names outside itself is never followed on its own: the user names the base
    assert main(["evaluate", str(tmp_path / "adapter"), "--out", str(tmp_path / "x"), "--quiet"]) == 2
    assert f"--base-model {base_dir}" in capsys.readouterr().err and not (tmp_path / "x").exists()
    r = _evaluate(tmp_path / "adapter", tmp_path / "adapter-report", "--base-model", base_dir)
    assert "reference" in r["attacks"]  # the adapter's local base calibrates the reference attack
    # the base outside the folder is recorded, and its bytes are part of the hash: another base, another hash
    from dpaudit import checkpoint

    assert r["checkpoint"]["base_model"] == str(base_dir.resolve())
    assert checkpoint.load(tmp_path / "adapter", base_dir).hash() == r["checkpoint"]["hash"]
    assert main(["check", str(tmp_path / "adapter-report" / "report.json"), "--checkpoint",
                 str(tmp_path / "adapter")]) != 2  # the re-derivation reads the base the report recorded
    assert "was not made from this model" not in capsys.readouterr().out
    other = _model(tok)
    with torch.no_grad():
        next(other.parameters()).add_(0.01)
    other.save_pretrained(base_dir)
    assert checkpoint.load(tmp_path / "adapter", base_dir).hash() != r["checkpoint"]["hash"]
    cfg["base_model_name_or_path"] = "some-org/not-here"
    (tmp_path / "adapter" / "adapter_config.json").write_text(json.dumps(cfg))
    assert main(["evaluate", str(tmp_path / "adapter"), "--out", str(tmp_path / "x"), "--quiet"]) == 2
    assert "--base-model FOLDER" in capsys.readouterr().err and not (tmp_path / "x").exists()
    # the base shipped inside the folder needs no option
    shutil.copytree(base_dir, tmp_path / "adapter" / "base_model")
    assert main(["evaluate", str(tmp_path / "adapter"), "--out", str(tmp_path / "y"), "--quiet",
                 "--base-model", str(base_dir)]) == 2
    assert "base_model/" in capsys.readouterr().err
    r = _evaluate(tmp_path / "adapter", tmp_path / "y")
    assert "base_model" not in r["checkpoint"]


def test_python_evaluate_on_objects(trained):
    root, card, manifest = trained
    from dpaudit.tasks.models import load_dir

    model, tok = load_dir(root / "dp")
    r = api.evaluate(model, tok, card, manifest, attacks=("loss", "zlib"), n_references=50, off_plan=True)
    assert r["verdict"]["status"] == "consistent" and r["checkpoint"]["path"] is None
    assert len(r["checkpoint"]["hash"]) == 16
