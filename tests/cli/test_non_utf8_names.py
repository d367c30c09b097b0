"""File and folder names that are not UTF-8 (bytes of another encoding, which Python decodes to lone surrogates):
an argument naming one is refused in one line before any work (`evaluate --out` into one crashed with a
UnicodeEncodeError, exit 3, when the report was written), and a checkpoint folder holding such a file is hashed by
the name's bytes (the hash crashed the same way)."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from dpaudit import api
from dpaudit.claim.card import Claim, PrivacyCard
from dpaudit.cli import main

pytestmark = pytest.mark.skipif(sys.platform != "linux" or sys.getfilesystemencoding() != "utf-8",
                                reason="needs a file system that takes any bytes as a name")


def _checkpoint(ck):
    from transformers import GPT2Config, GPT2LMHeadModel

    from dpaudit.tasks.models import public_bpe_tokenizer

    tok = public_bpe_tokenizer(256)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=1, n_head=2))
    model.save_pretrained(ck / "model")
    tok.save_pretrained(ck / "model")
    PrivacyCard(claim=Claim(epsilon=None, delta=0.0, unit="record", accountant="none"), events=[],
                method="non_private").save(ck / "privacy_card.json")
    api.new_canaries(m=16, seed=3).save(ck / "canaries.json")
    return ck


def test_an_argument_that_is_not_utf8_is_refused_in_one_line(tmp_path, capsys):
    bad = os.fsdecode(os.fsencode(str(tmp_path)) + b"/r\xff")
    for argv in (["evaluate", str(tmp_path / "ck"), "--out", bad], ["check", bad + "/report.json"],
                 ["card", "--epsilon", "1", "--delta", "1e-5", "--sigma", "1", "--sample-rate", "0.01", "--steps",
                  "10", "--out", bad]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "not UTF-8" in err[0], err
    assert sorted(os.listdir(os.fsencode(tmp_path))) == []


def test_a_checkpoint_holding_a_name_that_is_not_utf8_is_evaluated_and_checked(tmp_path, capsys):
    ck = _checkpoint(tmp_path / "ck")
    with open(os.fsencode(ck) + b"/notes-\xff.json", "w") as f:
        f.write("{}\n")
    assert main(["evaluate", str(ck), "--out", str(tmp_path / "r"), "--quiet"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    main(["check", str(tmp_path / "r" / "report.json"), "--checkpoint", str(ck)])
    assert "hash" not in capsys.readouterr().out  # the hash it re-derives is the report's
    with open(os.fsencode(ck) + b"/notes-\xff.json", "w") as f:
        f.write('{"edited": 1}\n')
    main(["check", str(tmp_path / "r" / "report.json"), "--checkpoint", str(ck)])
    assert "hash" in capsys.readouterr().out  # and the file's bytes are part of it
