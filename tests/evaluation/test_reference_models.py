"""A reference model (--reference-model, base_model/, or a model object given to the API) must read the canaries
as the audited model's tokenizer encodes them: one with another tokenizer (a meaningless calibration, silently,
before) or a shorter context (an IndexError, exit 3, before) is refused in one line before any score."""

from __future__ import annotations

import json

import pytest
import torch

from dpaudit import api
from dpaudit.claim.card import Claim, PrivacyCard
from dpaudit.cli import main
from dpaudit.errors import DpauditError
from dpaudit.tasks.models import public_bpe_tokenizer


def _gpt2(tok, **kw):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, **kw))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("refs")
    tok = public_bpe_tokenizer(256)
    for name, model, t in (("ck", _gpt2(tok), tok), ("same", _gpt2(tok), tok),
                           ("short", _gpt2(tok, n_positions=8), tok),
                           ("othertok", _gpt2(public_bpe_tokenizer(512)), public_bpe_tokenizer(512))):
        model.save_pretrained(root / name)
        t.save_pretrained(root / name)
    PrivacyCard(claim=Claim(epsilon=None, delta=0.0, unit="record", accountant="none"), events=[],
                method="non_private").save(root / "ck" / "privacy_card.json")
    api.new_canaries(m=16, seed=3, attacks=["loss", "reference"]).save(root / "ck" / "canaries.json")
    return root


def test_the_base_with_the_same_tokenizer_calibrates(folders, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["evaluate", str(folders / "ck"), "--out", str(out), "--reference-model", str(folders / "same"),
                 "--quiet"]) == 0, capsys.readouterr().err
    assert "reference" in json.loads((out / "report.json").read_text())["attacks"]


@pytest.mark.parametrize("ref,needle", [("othertok", "has another tokenizer: it reads canary c00 as other tokens"),
                                        ("short", "has a context of 8 tokens, shorter than a canary")])
def test_a_reference_that_reads_the_canaries_otherwise_is_refused(folders, tmp_path, ref, needle, capsys):
    out = tmp_path / "r"
    capsys.readouterr()
    assert main(["evaluate", str(folders / "ck"), "--out", str(out), "--reference-model", str(folders / ref)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and not out.exists()


def test_a_reference_object_given_to_the_api_is_checked_too(folders):
    from dpaudit.tasks.models import load_dir

    model, tok = load_dir(folders / "ck")
    with pytest.raises(DpauditError, match="shorter than a canary"):
        api.evaluate(model, tok, folders / "ck" / "privacy_card.json", folders / "ck" / "canaries.json",
                     reference=_gpt2(tok, n_positions=8))
