"""New-token canaries in checkpoints trained outside dpaudit, in the shapes users save them: a vocabulary padded
beyond its tokenizer (Pythia, Qwen, Phi), a base model saved before the canaries' tokens were added (base_model/,
--reference-model: the reference attack and seeded initial rows read it), a LoRA adapter that trains the output
rows (peft's modules_to_save, or trainable_token_indices under tied embeddings), and canaries whose secret is the record's first token (nothing predicts it)."""

from __future__ import annotations

import json
import random

import pytest
import torch

from dpaudit import api
from dpaudit.canaries import new_tokens
from dpaudit.claim.card import Claim, PrivacyCard
from dpaudit.cli import main
from dpaudit.errors import DpauditError

ZERO = dict(init="zero", random_prefix=40, train_on="secret")


def _model(tok, pad: int = 0, tied: bool = False, seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=len(tok) + pad, n_positions=64, n_embd=16, n_layer=1, n_head=2,
                     tie_word_embeddings=tied, bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                     pad_token_id=tok.eos_token_id)
    return GPT2LMHeadModel(cfg)


def _without_base(folder, to):
    """A copy of the checkpoint ``folder`` without its base_model/ (the files at its root only)."""
    to.mkdir()
    for f in folder.iterdir():
        if f.is_file():
            (to / f.name).write_bytes(f.read_bytes())
    return to


def _tok():
    from dpaudit.tasks.models import public_bpe_tokenizer

    return public_bpe_tokenizer(256)


def _manifest(m: int = 24, **design):
    return api.new_canaries(m=m, seed=3, template="{secret}", design="new-token", length=1,
                            attacks=["loss", "final_weights"], **design)


def _train(model, tok, man, steps: int = 40, lr: float = 3e-2):
    """A plain torch loop (no dpaudit trainer): each inserted canary's loss on its token."""
    texts = man.training_texts()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    model.train()
    for s in range(steps):
        for t in random.Random(s).sample(texts, min(8, len(texts))):
            ids = tok(t).input_ids
            labels = api.canary_labels(ids, tok, man) if man.plan.train_on == "secret" else ids
            (model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels])).loss / 8).backward()
        opt.step()
        opt.zero_grad()
    return model


def _save(folder, model, tok, man):
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    PrivacyCard(claim=Claim(epsilon=None, delta=0.0, unit="record", accountant="none"), events=[],
                method="non_private").save(folder / "privacy_card.json")
    man.save(folder / "canaries.json")
    return folder


@pytest.mark.parametrize("pad,init", [(16, "zero"), (16, "seeded"), (4, "zero")])
def test_a_padded_vocabulary_gives_its_spare_rows_to_the_new_tokens(pad, init):
    tok = _tok()
    model = _model(tok, pad=pad)
    rows = len(tok) + pad
    before = model.get_output_embeddings().weight[:len(tok)].detach().clone()
    man = _manifest(m=8 if pad == 16 else 12, **(ZERO if init == "zero" else dict(init="seeded", random_prefix=8)))
    known = len(tok)
    assert new_tokens.add(model, tok, man) == len(man.canaries)
    ids = new_tokens.token_ids(tok, man)
    assert ids == list(range(known, known + len(man.canaries)))
    w = model.get_output_embeddings().weight
    assert w.shape[0] == max(rows, known + len(man.canaries))  # grown only where the spare rows did not suffice
    assert torch.equal(w[:known], before)  # the tokenizer's own rows untouched
    assert bool((w[ids] == 0).all()) == (init == "zero")
    if init == "seeded":  # drawn from the seed and the tokenizer's own rows only: another pad gives the same rows
        other_tok, other = _tok(), _model(_tok(), pad=0)
        other.get_output_embeddings().weight.data[:known] = before
        other.get_input_embeddings().weight.data[:known] = model.get_input_embeddings().weight[:known]
        new_tokens.add(other, other_tok, man)
        assert torch.allclose(other.get_output_embeddings().weight[ids], w[ids])
    assert new_tokens.add(model, tok, man) == 0  # already extended


def test_a_tokenizer_larger_than_the_embedding_is_refused():
    tok = _tok()
    model = _model(tok)
    model.resize_token_embeddings(len(tok) - 1)
    with pytest.raises(DpauditError, match=rf"has {len(tok)} tokens but the model embeds {len(tok) - 1}"):
        new_tokens.add(model, tok, _manifest(**ZERO))


def test_tokens_added_after_peft_wrapped_the_model_are_refused_in_words():
    """get_peft_model first, add_canary_tokens second: transformers' resize failed on peft's wrapper with a
    TypeError; now one DpauditError naming the order that works."""
    from peft import LoraConfig, get_peft_model

    tok = _tok()
    model = get_peft_model(_model(tok), LoraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True,
                                                   modules_to_save=["lm_head"]))
    with pytest.raises(DpauditError, match="call it before get_peft_model"):
        api.add_canary_tokens(model, tok, _manifest(**ZERO))


def test_a_canary_label_on_the_first_token_only_is_refused():
    tok = _tok()
    model = _model(tok)
    man = _manifest(**ZERO)
    new_tokens.add(model, tok, man)
    secret = tok.convert_tokens_to_ids(man.canaries[0].secret)
    with pytest.raises(DpauditError, match="only as its first token"):
        api.canary_labels([secret, 5, 6], tok, man)


@pytest.fixture(scope="module")
def seeded_with_base(tmp_path_factory):
    """A full fine-tune with seeded new rows, its base saved before the tokens were added (base_model/)."""
    root = tmp_path_factory.mktemp("ext")
    tok = _tok()
    model = _model(tok)
    (root / "ck" / "base_model").mkdir(parents=True)
    model.save_pretrained(root / "ck" / "base_model")
    tok.save_pretrained(root / "ck" / "base_model")
    man = _manifest(init="seeded", random_prefix=40)
    new_tokens.add(model, tok, man)
    return _save(root / "ck", _train(model, tok, man), tok, man)


def test_a_base_saved_before_the_tokens_serves_the_reference_attack_and_the_seeded_rows(seeded_with_base, tmp_path,
                                                                                       capsys):
    out = tmp_path / "r"
    assert main(["evaluate", str(seeded_with_base), "--out", str(out), "--attacks", "loss,reference,final_weights",
                 "--off-plan"]) == 0, capsys.readouterr().err
    report = json.loads((out / "report.json").read_text())
    text = (out / "REPORT.md").read_text()
    assert "final weights: ε ≥" in text and "scores skipped" not in text and "attack skipped" not in text
    assert {"reference", "final_weights"} <= set(report["attacks"])
    fw = report["attacks"]["final_weights"]
    members = [s for s, sign in zip(fw["scores"], fw["signs"]) if sign == 1]
    others = [s for s, sign in zip(fw["scores"], fw["signs"]) if sign == -1]
    assert min(members) > max(others)  # memorised without noise: the rows read against the rebuilt initial state


def test_the_reference_model_option_extends_a_base_that_predates_the_tokens(seeded_with_base, tmp_path, capsys):
    bare = _without_base(seeded_with_base, tmp_path / "ck")
    out = tmp_path / "r"
    assert main(["evaluate", str(bare), "--out", str(out), "--reference-model",
                 str(seeded_with_base / "base_model")]) == 0, capsys.readouterr().err
    assert "final weights: ε ≥" in (out / "REPORT.md").read_text()
    out2 = tmp_path / "r2"  # without any base: the final-weights test is skipped, saying why, the loss test runs
    assert main(["evaluate", str(bare), "--out", str(out2)]) == 0
    assert "seeded initial state needs the base model" in (out2 / "REPORT.md").read_text()


def test_a_lora_adapter_that_trains_the_output_rows_is_read_from_its_final_weights(tmp_path, capsys):
    from peft import LoraConfig, get_peft_model

    tok = _tok()
    model = _model(tok)
    ck = tmp_path / "lora"
    (ck / "base_model").mkdir(parents=True)
    model.save_pretrained(ck / "base_model")  # the base as downloaded: before the canaries' tokens
    tok.save_pretrained(ck / "base_model")
    man = _manifest(**ZERO)
    new_tokens.add(model, tok, man)
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True,
                                             modules_to_save=["lm_head"]))
    _save(ck, _train(model, tok, man), tok, man)
    out = tmp_path / "r"
    assert main(["evaluate", str(ck), "--out", str(out)]) == 0, capsys.readouterr().err
    assert "final weights: ε ≥" in (out / "REPORT.md").read_text()


@pytest.mark.parametrize("tied", [True, False])
def test_peft_trainable_token_indices_trains_the_rows_under_tied_embeddings_only(tied, tmp_path, capsys):
    """peft's trainable_token_indices on the input embedding (docs/canary_designs.md): under tied embeddings the
    canary rows it trains are the output rows too, read like a full fine-tune's; untied, the output rows never
    move and the final-weights test is skipped, saying why."""
    from peft import LoraConfig, get_peft_model

    tok = _tok()
    model = _model(tok, tied=tied)
    ck = tmp_path / "lora"
    (ck / "base_model").mkdir(parents=True)
    model.save_pretrained(ck / "base_model")
    tok.save_pretrained(ck / "base_model")
    man = _manifest(**ZERO)
    new_tokens.add(model, tok, man)
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True,
                                             trainable_token_indices={"wte": new_tokens.token_ids(tok, man)}))
    _save(ck, _train(model, tok, man), tok, man)
    out = tmp_path / "r"
    assert main(["evaluate", str(ck), "--out", str(out)]) == 0, capsys.readouterr().err
    text = (out / "REPORT.md").read_text()
    assert ("final weights: ε ≥" in text) == tied
    assert ("no new token's output row moved in training" in text) == (not tied)


def test_canaries_with_nothing_before_their_secret_are_refused_in_one_line(tmp_path, capsys):
    tok = _tok()
    model = _model(tok)
    man = _manifest(init="seeded")  # no random prefix: the record is its secret alone, and GPT-2 adds no BOS
    new_tokens.add(model, tok, man)
    ck = _save(tmp_path / "ck", model, tok, man)
    out = tmp_path / "r"
    assert main(["evaluate", str(ck), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no token to score under framing 'tokenizer'" in err
    assert "--random-prefix" in err and not out.exists()
    assert main(["evaluate", str(ck), "--out", str(out), "--canary-framing", "bos_eos", "--attacks", "loss",
                 "--off-plan"]) == 0  # a loop that fed BOS + text: the secret is predicted from BOS


def test_rescore_recomputes_seeded_rows_from_the_folders_own_base_and_names_a_given_one(seeded_with_base, tmp_path,
                                                                                         capsys):
    """`check --rescore` reads the final-weights scores' seeded initial rows from the base that gave them: the
    folder's own base_model/ (recomputed; a forged score is named), or a --reference-model the report records as
    given (taken from the report, said so; a KeyError, exit 3, before)."""
    policy = tmp_path / "policy.toml"
    policy.write_text('[rules]\nrequire_claim = false\nallowed_verdicts = ["no-claim"]\n')
    out = tmp_path / "r"
    assert main(["evaluate", str(seeded_with_base), "--out", str(out)]) == 0
    capsys.readouterr()
    check = ["check", str(out / "report.json"), "--checkpoint", str(seeded_with_base), "--rescore", "--policy",
             str(policy)]
    assert main(check) == 0 and "loss, final_weights recomputed" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    report["attacks"]["final_weights"]["scores"][0] += 1.0
    (out / "report.json").write_text(json.dumps(report))
    assert main(check) == 1 and "final_weights scores" in capsys.readouterr().out
    bare = _without_base(seeded_with_base, tmp_path / "bare")
    out2 = tmp_path / "r2"
    assert main(["evaluate", str(bare), "--out", str(out2), "--reference-model",
                 str(seeded_with_base / "base_model")]) == 0
    assert json.loads((out2 / "report.json").read_text())["checkpoint"]["reference_model"] == "given"
    capsys.readouterr()
    assert main(["check", str(out2 / "report.json"), "--checkpoint", str(bare), "--rescore", "--policy",
                 str(policy)]) == 0
    assert "final_weights taken from the report" in capsys.readouterr().out


def test_canaries_new_says_when_nothing_precedes_the_secret(tmp_path, capsys):
    args = ["canaries", "new", "--m", "10", "--design", "new-token", "--length", "1", "--template", "{secret}"]
    assert main([*args, "--out", str(tmp_path / "a.json")]) == 0
    assert "secret starts its record" in capsys.readouterr().out
    assert main([*args, "--random-prefix", "40", "--out", str(tmp_path / "b.json")]) == 0
    assert "secret starts its record" not in capsys.readouterr().out
