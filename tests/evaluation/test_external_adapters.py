"""peft adapters of every kind a user saves, read by `dpaudit evaluate` from the adapter folder and its base:
weight adapters (IA3, DoRA, VeRA, LoRA on all linear maps) are merged and audited; prompt-learning adapters
(prompt tuning, prefix tuning: virtual tokens before every input, nothing to merge) are refused in one line, exit
2, nothing written (an AttributeError on merge_and_unload, exit 3, before)."""

from __future__ import annotations

import pytest
import torch

from dpaudit import api
from dpaudit.claim.card import Claim, PrivacyCard
from dpaudit.cli import main


def _config(kind: str):
    import peft

    return {"ia3": lambda: peft.IA3Config(target_modules=["c_attn", "c_proj"], feedforward_modules=["c_proj"],
                                          fan_in_fan_out=True),
            "dora": lambda: peft.LoraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True, use_dora=True),
            "vera": lambda: peft.VeraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True),
            "all-linear": lambda: peft.LoraConfig(r=4, target_modules="all-linear", fan_in_fan_out=True),
            "prompt": lambda: peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4),
            "prefix": lambda: peft.PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4)}[kind]()


def _adapter_folder(tmp_path, kind: str):
    import peft
    from transformers import GPT2Config, GPT2LMHeadModel

    from dpaudit.tasks.models import public_bpe_tokenizer

    tok = public_bpe_tokenizer(256)
    torch.manual_seed(0)
    base = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=1, n_head=2))
    ck = tmp_path / kind
    base.save_pretrained(ck / "base_model")
    tok.save_pretrained(ck / "base_model")
    model = peft.get_peft_model(base, _config(kind))
    with torch.no_grad():  # trained weights (the adapter's initialisation is often the identity)
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.01 * torch.randn_like(p))
    model.save_pretrained(ck)
    tok.save_pretrained(ck)
    PrivacyCard(claim=Claim(epsilon=None, delta=0.0, unit="record", accountant="none"), events=[],
                method="non_private").save(ck / "privacy_card.json")
    api.new_canaries(m=16, seed=3).save(ck / "canaries.json")
    return ck


@pytest.mark.parametrize("kind", ["ia3", "dora", "vera", "all-linear"])
def test_weight_adapters_are_merged_and_audited(tmp_path, kind, capsys):
    ck = _adapter_folder(tmp_path, kind)
    assert main(["evaluate", str(ck), "--out", str(tmp_path / "r"), "--quiet"]) == 0, capsys.readouterr().err
    assert (tmp_path / "r" / "report.json").is_file()


@pytest.mark.parametrize("kind,name", [("prompt", "prompt_tuning"), ("prefix", "prefix_tuning")])
def test_prompt_learning_adapters_are_refused_in_one_line(tmp_path, kind, name, capsys):
    ck = _adapter_folder(tmp_path, kind)
    out = tmp_path / "r"
    capsys.readouterr()
    assert main(["evaluate", str(ck), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"is {name} (virtual tokens before every input)" in err
    assert not out.exists()
