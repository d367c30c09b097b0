"""The checkpoint hash binds a report to the tokenizer it scored with. A folder saved without tokenizer.json (an
older transformers; Llama 2, T5 or BERT folders as the hub holds them) tokenizes from merges.txt, vocab.txt or a
SentencePiece .model; the hash read only .safetensors and .json files, so an edited merge list tokenized every
text differently and `check --checkpoint` still passed the old report."""

from __future__ import annotations

import json

import pytest
import torch

from dpaudit import api
from dpaudit.checkpoint import content_hash
from dpaudit.claim.card import Claim, PrivacyCard
from dpaudit.cli import main

TEXT = "The quick brown fox jumps over the lazy dog, 12345"


def _legacy_folder(ck):
    """A tiny GPT-2 whose tokenizer is saved as vocab.json + merges.txt (no tokenizer.json)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from dpaudit.tasks.models import public_bpe_tokenizer

    tok = public_bpe_tokenizer(512)  # 255 merges past the bytes
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=1, n_head=2)).save_pretrained(ck)
    tok.save_pretrained(ck)
    tok.backend_tokenizer.model.save(str(ck))
    (ck / "tokenizer.json").unlink()
    config = json.loads((ck / "tokenizer_config.json").read_text())
    (ck / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "GPT2Tokenizer"}))
    PrivacyCard(claim=Claim(epsilon=None, delta=0.0, unit="record", accountant="none"), events=[],
                method="non_private").save(ck / "privacy_card.json")
    api.new_canaries(m=16, seed=3).save(ck / "canaries.json")
    return ck


def _drop_merges(ck):
    lines = (ck / "merges.txt").read_text().splitlines()
    (ck / "merges.txt").write_text(lines[0] + "\n")  # the header alone: every text as single bytes


def test_an_edited_merge_list_changes_the_hash_and_fails_the_gate(tmp_path, capsys):
    from transformers import AutoTokenizer

    ck = _legacy_folder(tmp_path / "ck")
    before = AutoTokenizer.from_pretrained(ck)(TEXT).input_ids
    assert main(["evaluate", str(ck), "--out", str(tmp_path / "r"), "--quiet"]) == 0, capsys.readouterr().err
    report = str(tmp_path / "r" / "report.json")
    capsys.readouterr()
    main(["check", report, "--checkpoint", str(ck)])  # fails the default policy (no claim), never by its hash
    assert "hash" not in capsys.readouterr().out
    _drop_merges(ck)
    assert AutoTokenizer.from_pretrained(ck)(TEXT).input_ids != before  # the edit is one the model would see
    assert main(["check", report, "--checkpoint", str(ck)]) == 1
    assert "hash" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["merges.txt", "vocab.txt", "tokenizer.model", "spiece.model", "qwen.tiktoken",
                                  "source.spm"])
def test_every_tokenizer_vocabulary_file_is_hashed(tmp_path, name):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / name).write_bytes(b"one vocabulary")
    before = content_hash(tmp_path, tmp_path.glob("*"))
    (tmp_path / name).write_bytes(b"another vocabulary")
    assert content_hash(tmp_path, tmp_path.glob("*")) != before
    (tmp_path / "notes.txt").write_text("the user's own notes are not what was audited")
    assert content_hash(tmp_path, tmp_path.glob("*")) == content_hash(tmp_path, [tmp_path / "model.safetensors",
                                                                                 tmp_path / name])
