"""A model downloaded from the hub sits in the hub cache as links: ``models--ORG--NAME/snapshots/REV/FILE`` links to
``models--ORG--NAME/blobs/SHA`` (what ``snapshot_download`` leaves). `dpaudit evaluate` refused every such folder (a
link outside the folder); a snapshot's links into its own repository's blobs are its files, audited and hashed as a
plain copy of them is. A link into another repository's blobs, or elsewhere, is still refused."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest
import torch

from dpaudit import api
from dpaudit.claim.card import Claim, PrivacyCard
from dpaudit.cli import main

pytestmark = pytest.mark.skipif(os.name != "posix", reason="symlinks as the hub cache makes them")


def _plain(ck):
    from transformers import GPT2Config, GPT2LMHeadModel

    from dpaudit.tasks.models import public_bpe_tokenizer

    tok = public_bpe_tokenizer(256)
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=1, n_head=2)).save_pretrained(ck)
    tok.save_pretrained(ck)
    PrivacyCard(claim=Claim(epsilon=None, delta=0.0, unit="record", accountant="none"), events=[],
                method="non_private").save(ck / "privacy_card.json")
    api.new_canaries(m=16, seed=3).save(ck / "canaries.json")
    return ck


def _as_hub_cache(plain, cache, repo="models--me--dp-model"):
    root = cache / repo
    snap = root / "snapshots" / "0123abcd"
    (root / "blobs").mkdir(parents=True)
    for f in sorted(plain.rglob("*")):
        if f.is_file():
            blob = root / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
            blob.write_bytes(f.read_bytes())
            link = snap / f.relative_to(plain)
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.path.relpath(blob, link.parent), link)
    return snap


def test_a_hub_cache_snapshot_is_audited_as_its_files(tmp_path, capsys):
    plain = _plain(tmp_path / "plain")
    snap = _as_hub_cache(plain, tmp_path / "hub")
    assert main(["evaluate", str(snap), "--out", str(tmp_path / "r"), "--quiet"]) == 0, capsys.readouterr().err
    assert main(["evaluate", str(plain), "--out", str(tmp_path / "r-plain"), "--quiet"]) == 0
    hashes = [json.loads((tmp_path / d / "report.json").read_text())["checkpoint"]["hash"] for d in ("r", "r-plain")]
    assert hashes[0] == hashes[1]  # the same bytes under the same names, linked or not
    capsys.readouterr()
    main(["check", str(tmp_path / "r" / "report.json"), "--checkpoint", str(snap)])
    assert "hash" not in capsys.readouterr().out


def test_a_link_out_of_its_own_repositorys_blobs_is_refused(tmp_path, capsys):
    plain = _plain(tmp_path / "plain")
    snap = _as_hub_cache(plain, tmp_path / "hub")
    other = _as_hub_cache(plain, tmp_path / "hub", repo="models--someone--else")
    card = snap / "privacy_card.json"
    card.unlink()
    os.symlink(os.path.realpath(other / "privacy_card.json"), card)  # another repository's blob
    assert main(["evaluate", str(snap), "--out", str(tmp_path / "r"), "--quiet"]) == 2
    assert "outside the folder" in capsys.readouterr().err and not (tmp_path / "r").exists()
    shutil.rmtree(tmp_path / "hub" / "models--someone--else")
