"""The README's Opacus block runs as written: the test supplies only what the block leaves to the user (the
base model and tokenizer, the training data as a datasets.Dataset, the PrivacyEngine, a loader and one epoch of
training, named ``your_loader`` and ``your_training`` there), executes the block's own text, and checks what it
promised: the model, card, canaries and probe records saved in my-model/, and a report whose claim is the engine's
epsilon with the intended target recorded."""

import json
import random
import re
from pathlib import Path

import torch
import torch.nn.functional as F
from datasets import Dataset
from opacus import PrivacyEngine
from torch.utils.data import DataLoader, TensorDataset
from transformers import GPT2Config, GPT2LMHeadModel

from dpaudit.tasks.models import public_bpe_tokenizer

ROOT = Path(__file__).resolve().parents[2]


def _block() -> str:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    (block,) = [b for b in blocks if "attach_probe" in b and "card_from_opacus" in b]
    return block


def test_the_readme_opacus_block_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tokenizer = public_bpe_tokenizer(512)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                       tie_word_embeddings=False, bos_token_id=tokenizer.eos_token_id,
                                       eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id,
                                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    rng = random.Random(0)
    words = ["river", "market", "window", "garden", "engine", "letter", "summer", "silver"]
    train_ds = Dataset.from_dict({"text": [f"The {rng.choice(words)} was {rng.choice(words)} today."
                                           for _ in range(300)]})
    engine = PrivacyEngine(accountant="prv")

    def your_loader(ds):
        enc = tokenizer(list(ds["text"]), padding="max_length", truncation=True, max_length=24, return_tensors="pt")
        return DataLoader(TensorDataset(enc["input_ids"], enc["attention_mask"]), batch_size=64)

    def your_training(model, optimizer, loader):
        for ids, mask in loader:
            pos = torch.arange(ids.shape[1]).expand_as(ids)  # per-sequence positions (Opacus, docs/pitfalls.md)
            logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, :-1]
            tok = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
            m = mask[:, 1:].float()
            optimizer.zero_grad()
            ((tok * m).sum(1) / m.sum(1).clamp(min=1)).mean().backward()
            optimizer.step()

    scope = dict(train_ds=train_ds, engine=engine, model=model, optimizer=optimizer, tokenizer=tokenizer,
                 your_loader=your_loader, your_training=your_training)
    exec(compile(_block(), "README.md (the Opacus block)", "exec"), scope)  # noqa: S102 - the README, as written
    for f in ("canaries.json", "privacy_card.json", "config.json", "model.safetensors"):
        assert (tmp_path / "my-model" / f).is_file(), f
    assert any((tmp_path / "my-model").glob("*probe*")), "the probe's records beside the model"
    report = json.loads((tmp_path / "my-model-report" / "report.json").read_text())
    assert report["claim"]["epsilon"] <= 1.0 + 1e-6 and report["claim"]["intended_epsilon"] == 1.0
    assert report["verdict"]["accounting"]["status"] == "verified"
    assert report["canary_plan"]["m"] == 500
