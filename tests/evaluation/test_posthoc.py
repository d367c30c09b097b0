"""Post-hoc audits of checkpoints trained without planted canaries (dpaudit/evaluation/posthoc.py): natural
identifiers and a stated random split, through the CLI on tiny GPT-2s trained here, their refusals, and the
paired one-run game on a simulated mechanism whose truth is known."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dpaudit.audit import one_run
from dpaudit.cli import main
from dpaudit.evaluation import posthoc, posthoc_fit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))
import final_weights_validity as sim  # noqa: E402


def _records(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = ("order", "ticket", "account", "session", "request")
    return [f"Your {rng.choice(words)} id is {posthoc.draw('uuid4', rng)} thanks" for _ in range(n)]


def _train(folder: Path, texts: list[str], epochs: int, epsilon: float | None) -> Path:
    """A tiny GPT-2 trained (non-privately, whatever the card says) on ``texts``, saved with a privacy card."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from dpaudit.claim.card import Claim, PrivacyCard
    from dpaudit.tasks.models import public_bpe_tokenizer

    torch.manual_seed(0)
    tok = public_bpe_tokenizer(512)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=64, n_layer=2, n_head=2,
                                       bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    enc = [torch.tensor(tok(t).input_ids[:64]) for t in texts]
    for _ in range(epochs):
        for i in torch.randperm(len(enc)).tolist():
            opt.zero_grad()
            model(input_ids=enc[i][None], labels=enc[i][None]).loss.backward()
            opt.step()
    folder.mkdir(parents=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    if epsilon:  # an honest card of a full-batch Gaussian mechanism (the untrained model ran none: no leak at all)
        from dpaudit import accounting
        from dpaudit.accounting import SubsampledGaussian

        event = SubsampledGaussian(1.0, 4.0, 1, "poisson")
        eps = accounting.compute([event], 1e-5, "prv").epsilon
        card = PrivacyCard(claim=Claim(epsilon=eps, delta=1e-5, accountant="prv"), events=[event], clipping_norm=1.0,
                           method="external")
    else:
        card = PrivacyCard(claim=Claim(epsilon=None, delta=0.0, accountant="none"), method="non_private")
    card.save(folder / "privacy_card.json")
    return folder


@pytest.fixture(scope="module")
def memorised(tmp_path_factory):
    d = tmp_path_factory.mktemp("ids")
    texts = _records(60, 1)
    (d / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return _train(d / "model", texts, 12, None), d / "train.jsonl", texts


def test_a_memorising_model_shows_its_identifiers_with_the_assumption_beside_the_bound(memorised, tmp_path):
    model, data, _ = memorised
    assert main(["audit", "identifiers", str(model), "--training-data", str(data), "--format", "uuid4",
                 "--out", str(tmp_path / "r"), "--guess-fraction", "0.5", "--quiet"]) == 0
    r = json.loads((tmp_path / "r" / "report.json").read_text())
    assert r["posthoc"]["kind"] == "natural identifiers" and r["posthoc"]["sources"]["pairs"] == 60
    assert r["attacks"]["loss"]["auc"] > 0.9  # the true identifier is likelier than a fresh one in its context
    best = r["empirical_best"]
    assert best["group_size"] == 2 and best["tier"] == "outputs only" and best["epsilon_lb"] > 0.3
    assert "only if" in (tmp_path / "r" / "REPORT.md").read_text()


def test_an_untrained_model_shows_nothing_and_accuses_no_one(tmp_path):
    texts = _records(60, 2)
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    model = _train(tmp_path / "model", texts, 0, epsilon=1.0)
    assert main(["audit", "identifiers", str(model), "--training-data", str(tmp_path / "train.jsonl"),
                 "--format", "uuid4", "--out", str(tmp_path / "r"), "--quiet"]) == 0
    r = json.loads((tmp_path / "r" / "report.json").read_text())
    assert r["verdict"]["status"] != "violated" and r["empirical_best"]["epsilon_lb"] < 1.0


def test_a_split_needs_the_stated_coin_and_a_split_a_coin_could_give(memorised, tmp_path, capsys):
    model, _, texts = memorised
    ins, outs = tmp_path / "in.txt", tmp_path / "out.txt"
    ins.write_text("\n".join(texts[:30]))
    outs.write_text("\n".join(_records(30, 9)))
    args = ["audit", "split", str(model), "--members", str(ins), "--non-members", str(outs), "--out",
            str(tmp_path / "r"), "--quiet"]
    assert main(args) == 2 and "--fair-coin" in capsys.readouterr().err
    assert main([*args, "--fair-coin"]) == 0
    r = json.loads((tmp_path / "r" / "report.json").read_text())
    assert r["posthoc"]["kind"] == "stated random split" and r["canary_plan"]["m"] == 60
    assert r["attacks"]["loss"]["auc"] > 0.75  # the whole record's loss: the template words dilute the identifier
    outs.write_text("\n".join(_records(3, 9)))
    assert main([*args[:-3], "--out", str(tmp_path / "r2"), "--fair-coin", "--quiet"]) == 2
    assert "not drawn by a fair coin" in capsys.readouterr().err


def test_evaluate_names_the_post_hoc_paths_for_a_checkpoint_without_canaries(memorised, tmp_path, capsys):
    model, _, _ = memorised
    assert main(["evaluate", str(model), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "dpaudit audit identifiers" in err and "dpaudit audit split" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("fmt", ["uuid4", "hex32", "digits16"])
def test_fresh_draws_match_their_format_and_never_repeat_the_data(fmt):
    import re

    rng = random.Random(0)
    got = {posthoc.draw(fmt, rng) for _ in range(500)}
    assert len(got) == 500 and all(re.fullmatch(posthoc.pattern(fmt), x) for x in got)
    texts = [f"key {x} end" for x in list(got)[:50]] + [f"twice {list(got)[60]} and {list(got)[60]}"]
    pairs, dropped = posthoc.identifier_pairs(texts, fmt, seed=3)
    assert len(pairs) == 50 and dropped["repeated identifiers (a group, not one record)"] == 1
    assert all(fresh not in got for _, _, fresh in pairs)


@pytest.mark.parametrize("fmt", ["hex8", "uuid", "digits4"])
def test_formats_too_short_or_unknown_are_refused(fmt):
    from dpaudit.errors import DpauditError

    with pytest.raises(DpauditError, match="unknown identifier format"):
        posthoc.pattern(fmt)


def test_the_paired_game_stays_below_a_known_replace_one_epsilon():
    """Pairs whose coin decides which of two exchangeable records was in: y_i = (+1/2 if A in, -1/2 if B in) +
    N(0, sigma^2) is mu-GDP under replace-one with mu = 1 / sigma. The one-run bound on the pair scores exceeds that
    truth in few of 60 audits (at a true rate <= 5%, 9 or more of 60 has probability 1.6%) and has power."""
    delta, mu = 1e-5, 2.0
    truth = sim.gdp_epsilon(mu, delta)
    rng = np.random.default_rng(4)
    bounds = []
    for _ in range(60):
        coins = rng.integers(0, 2, size=1000).astype(bool)
        y = np.where(coins, 0.5, -0.5) + rng.normal(0, 1 / mu, size=1000)
        r = one_run.audit(y, coins, 50, 50, delta=delta, confidence=0.95)
        bounds.append(r.epsilon_lb)
    bounds = np.array(bounds)
    assert np.mean(bounds > truth) <= 8 / 60 and np.median(bounds) > 0.3 * truth


def test_the_gate_rederives_a_post_hoc_report_from_its_folder(tmp_path, capsys):
    """`dpaudit check --checkpoint` on a post-hoc report of a private model: hash, claim and accounting re-derived
    from the folder (no canaries.json needed); another folder's report is caught."""
    texts = _records(100, 3)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    model = _train(tmp_path / "model", texts, 0, epsilon=1.0)
    out = tmp_path / "r"
    assert main(["audit", "identifiers", str(model), "--training-data", str(data), "--format", "uuid4",
                 "--out", str(out), "--guess-fraction", "0.5", "--quiet"]) == 0
    assert main(["check", str(out / "report.json"), "--checkpoint", str(model)]) == 0
    other = _train(tmp_path / "other", _records(30, 5), 1, None)
    capsys.readouterr()
    assert main(["check", str(out / "report.json"), "--checkpoint", str(other)]) == 1
    assert "hash" in capsys.readouterr().out


def test_the_paired_game_is_tight_enough_that_an_inflated_bound_fails():
    """Randomised response per pair (exactly epsilon-DP under replace-one) with every pair guessed: the bound stays
    below the truth in at least 95% of 40 audits, and the same bounds inflated by 10% cross it in most of them, so
    the validity check above would catch a 10% inflation (a mutation check beside it)."""
    import math

    eps, m = 1.0, 4000
    keep = math.exp(eps) / (1 + math.exp(eps))
    rng = np.random.default_rng(8)
    bounds = []
    for _ in range(40):
        coins = rng.integers(0, 2, size=m).astype(bool)
        said = np.where(rng.random(m) < keep, coins, ~coins)
        scores = said + 1e-9 * rng.standard_normal(m)
        bounds.append(one_run.audit(scores, coins, m // 2, m // 2, delta=0.0, confidence=0.95).epsilon_lb)
    bounds = np.array(bounds)
    assert np.mean(bounds > eps) <= 2 / 40
    assert np.mean(1.1 * bounds > eps) >= 0.5


def test_a_fresh_draw_takes_its_identifiers_case_and_mixed_case_is_left_out():
    """Uppercase identifiers (.NET, Windows logs) paired with lowercase draws differ by their case, not by
    membership: a model that learnt the case from any text prefers the data's side of every pair. Each draw is
    written in its identifier's case; positions are the record's own even where lower() would change its length."""
    rng = random.Random(0)
    ids = [posthoc.draw("uuid4", rng) for _ in range(30)]
    texts = [f"İstanbul order {x.upper()} done" for x in ids[:10]] + [f"order {x} done" for x in ids[10:20]]
    texts += [f"order {x[:9].upper() + x[9:]} done" for x in ids[20:]]  # mixed case
    pairs, dropped = posthoc.identifier_pairs(texts, "uuid4", seed=1)
    assert len(pairs) == 20 and dropped["identifiers of mixed case (their case is not known to be random)"] == 10
    for ctx, real, fresh in pairs:
        assert ctx.endswith("order ") and real.lower() in ids
        assert (real.isupper() and fresh.isupper()) or (real.islower() and fresh.islower())


def test_uppercase_identifiers_never_seen_in_training_accuse_no_one(tmp_path):
    """A model trained on other uppercase identifiers of the format (public text), never on the audited records:
    with lowercase draws every pair's real side won (violated, 1.28 > 0.94 at 200 pairs); in its case, no leak."""
    rng = random.Random(1)
    audited = [f"Your order id is {posthoc.draw('uuid4', rng).upper()} thanks" for _ in range(200)]
    public = [f"Your order id is {posthoc.draw('uuid4', random.Random(99 + i)).upper()} thanks" for i in range(100)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in audited))
    model = _train(tmp_path / "model", public, 3, epsilon=1.0)
    assert main(["audit", "identifiers", str(model), "--training-data", str(tmp_path / "train.jsonl"),
                 "--format", "uuid4", "--out", str(tmp_path / "r"), "--guess-fraction", "0.2", "--quiet"]) == 0
    r = json.loads((tmp_path / "r" / "report.json").read_text())
    assert r["verdict"]["status"] != "violated" and r["attacks"]["loss"]["auc"] < 0.7


def test_training_data_is_read_as_every_task_source_is(tmp_path, capsys):
    """CSV/TSV columns (quoted commas and line breaks inside a field), a save_to_disk folder, JSONL through the one
    reader of task data (a line nested past recursion is one line, exit 2); a missing column names --text-column."""
    import csv

    import datasets

    rng = random.Random(5)
    texts = [f'Ticket "{i}", id {posthoc.draw("uuid4", rng)}\nsee you' for i in range(30)]
    with open(tmp_path / "d.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["user", "body"])
        w.writerows([["u", t] for t in texts])
    got, digest = posthoc.read_texts(tmp_path / "d.csv", "body")
    assert got == texts and len(digest) == 64
    pairs, _ = posthoc.identifier_pairs(got, "uuid4", seed=0)
    assert len(pairs) == 30 and all(ctx.startswith("Ticket") for ctx, _, _ in pairs)
    datasets.Dataset.from_dict({"body": texts}).save_to_disk(str(tmp_path / "ds"))
    assert posthoc.read_texts(tmp_path / "ds", "body")[0] == texts
    from dpaudit.errors import DpauditError

    with pytest.raises(DpauditError, match="--text-column"):
        posthoc.read_texts(tmp_path / "d.csv", "text")
    with pytest.raises(DpauditError, match="--text-column"):
        posthoc.read_texts(tmp_path / "ds", "text")
    (tmp_path / "deep.jsonl").write_text("[" * 100000 + "\n")
    with pytest.raises(DpauditError, match="line 1 is not valid JSON"):
        posthoc.read_texts(tmp_path / "deep.jsonl")
    (tmp_path / "chat.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    with pytest.raises(DpauditError, match="'messages' is not text"):
        posthoc.read_texts(tmp_path / "chat.jsonl", "messages")
    (tmp_path / "d.json").write_text('{"text": "x"}\n')  # JSON Lines in a .json file (datasets' to_json)
    assert posthoc.read_texts(tmp_path / "d.json")[0] == ["x"]
    (tmp_path / "deep.json").write_text("[" * 100000 + "\n")
    with pytest.raises(DpauditError, match="not valid JSON .nested too deeply"):
        posthoc.read_texts(tmp_path / "deep.json")


def test_records_and_contexts_longer_than_the_model_are_fitted_to_it_not_refused_or_crashed(memorised, tmp_path):
    """A 64-position model: an identifier after 60 words of context (IndexError, exit 3, before), a split record of
    400 tokens (refused with advice for planted canaries) and a one-token record (nothing to score). The context is
    cut from the left for both sides of a pair; a long record is cut to its first 64 tokens; a one-token record is
    left out. All three rules read the text alone, never the coin; the report counts them."""
    from dpaudit.tasks.models import public_bpe_tokenizer

    model, _, texts = memorised
    rng = random.Random(4)
    long = [" ".join(rng.choice(("the", "customer", "asked", "again")) for _ in range(60)) + f" {t}" for t in texts]
    (tmp_path / "long.txt").write_text("\n".join(long))
    assert main(["audit", "identifiers", str(model), "--training-data", str(tmp_path / "long.txt"), "--format",
                 "uuid4", "--out", str(tmp_path / "ri"), "--guess-fraction", "0.5", "--quiet"]) == 0
    r = json.loads((tmp_path / "ri" / "report.json").read_text())
    assert r["posthoc"]["sources"]["pairs"] == 60 and r["attacks"]["loss"]["auc"] > 0.6  # still scored on the identifier
    tok = public_bpe_tokenizer(512)
    single = next(w for w in ("a", "e", "x", ".") if len(tok(w).input_ids) == 1)
    ins = [single] + [" ".join(["word"] * 200)] + texts[:28]
    (tmp_path / "in.txt").write_text("\n".join(ins))
    (tmp_path / "out.txt").write_text("\n".join(_records(30, 9)))
    assert main(["audit", "split", str(model), "--members", str(tmp_path / "in.txt"), "--non-members",
                 str(tmp_path / "out.txt"), "--fair-coin", "--out", str(tmp_path / "rs"), "--quiet"]) == 0
    r = json.loads((tmp_path / "rs" / "report.json").read_text())
    assert r["canary_plan"]["m"] == 59 and r["posthoc"]["sources"]["max_tokens"] == 64
    assert list(r["posthoc"]["dropped"].values()) == [0, 1, 1]  # none repeated, one of one token, one cut
    kept, cut, short = posthoc_fit.fit_records(tok, ins, 64)
    assert (cut, short) == (1, 1) and len(tok(kept[0]).input_ids) <= 64 and kept[0].startswith("word word")


def test_a_classifier_is_refused_by_both_post_hoc_audits_in_one_line(memorised, tmp_path, capsys):
    from transformers import GPT2Config, GPT2ForSequenceClassification

    from dpaudit.claim.card import Claim, PrivacyCard
    from dpaudit.tasks.models import public_bpe_tokenizer

    _, data, texts = memorised
    tok = public_bpe_tokenizer(512)
    folder = tmp_path / "cls"
    GPT2ForSequenceClassification(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=1, n_head=2,
                                             pad_token_id=tok.eos_token_id)).save_pretrained(folder)
    tok.save_pretrained(folder)
    PrivacyCard(claim=Claim(epsilon=None, delta=0.0, accountant="none"), method="non_private").save(
        folder / "privacy_card.json")
    (tmp_path / "in.txt").write_text("\n".join(texts[:30]))
    (tmp_path / "out.txt").write_text("\n".join(_records(30, 9)))
    capsys.readouterr()
    for args in (["identifiers", "--training-data", str(data), "--format", "uuid4"],
                 ["split", "--members", str(tmp_path / "in.txt"), "--non-members", str(tmp_path / "out.txt"),
                  "--fair-coin"]):
        assert main(["audit", args[0], str(folder), *args[1:], "--out", str(tmp_path / "r"), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert "sequence classifier" in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / "r").exists()


def test_the_gate_rederives_a_post_hoc_verdict_and_refuses_one_edited_to_pass(tmp_path, capsys):
    """A memorising model under a DP card: its identifiers show the violation. The report edited to hide it (every
    bound 0, verdict underpowered) passed `check --checkpoint` before (the post-hoc evidence was not re-derived);
    the signs flipped to other coins than the seed draws are caught by name."""
    texts = _records(60, 3)
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    model = _train(tmp_path / "model", texts, 12, epsilon=1.0)
    assert main(["audit", "identifiers", str(model), "--training-data", str(tmp_path / "train.jsonl"), "--format",
                 "uuid4", "--out", str(tmp_path / "r"), "--guess-fraction", "0.5", "--quiet"]) == 0
    report = tmp_path / "r" / "report.json"
    r = json.loads(report.read_text())
    assert r["verdict"]["status"] == "violated"
    capsys.readouterr()
    assert main(["check", str(report), "--checkpoint", str(model)]) == 1  # the policy fails a violation
    out = capsys.readouterr().out
    assert "violated" in out and "re-derived from" not in out  # ... and nothing re-derived differs
    hidden = json.loads(report.read_text())
    for row in hidden["empirical"] + [hidden["empirical_best"]]:
        row["epsilon_lb"] = 0.0
    hidden["verdict"]["status"] = "underpowered"
    (tmp_path / "hidden.json").write_text(json.dumps(hidden))
    assert main(["check", str(tmp_path / "hidden.json"), "--checkpoint", str(model)]) == 1
    assert "re-derived from" in capsys.readouterr().out
    flipped = json.loads(report.read_text())
    flipped["attacks"]["loss"]["signs"] = [-s for s in flipped["attacks"]["loss"]["signs"]]
    (tmp_path / "flipped.json").write_text(json.dumps(flipped))
    assert main(["check", str(tmp_path / "flipped.json"), "--checkpoint", str(model)]) == 1
    assert "not the coins its seed" in capsys.readouterr().out


def test_the_assumption_travels_with_the_bound_to_the_model_card_and_the_gate(tmp_path, capsys):
    texts = _records(60, 6)
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    model = _train(tmp_path / "model", texts, 0, epsilon=1.0)
    assert main(["audit", "identifiers", str(model), "--training-data", str(tmp_path / "train.jsonl"), "--format",
                 "uuid4", "--out", str(tmp_path / "r"), "--guess-fraction", "0.5", "--quiet"]) == 0
    assert main(["model-card", str(tmp_path / "r" / "report.json"), "--to", str(tmp_path / "README.md")]) == 0
    card = (tmp_path / "README.md").read_text()
    assert "holds **only if** every uuid4 identifier" in card and "planted canaries" not in card
    capsys.readouterr()
    assert main(["check", str(tmp_path / "r" / "report.json")]) == 0
    assert "post-hoc audit (natural identifiers)" in capsys.readouterr().out


def test_a_repeated_record_is_left_out_of_the_split_wherever_it_fell(memorised, tmp_path, capsys):
    """A text twice in the pool is a group (one coin moves both copies' scores): left out on both sides by a rule on
    the pool, never on the side a copy fell on. Before, a copy on each side refused the whole split, two copies in
    the members were counted as two independent units."""
    model, _, texts = memorised
    ins, outs = texts[:30] + [texts[0], texts[1]], _records(30, 9) + [texts[2]]
    pins, pouts, n = posthoc_fit.drop_repeated(ins, outs)
    assert n == 6 and texts[0] not in pins and texts[2] not in pins + pouts and len(pins) == 27 and len(pouts) == 30
    (tmp_path / "in.txt").write_text("\n".join(ins))
    (tmp_path / "out.txt").write_text("\n".join(outs))
    args = ["audit", "split", str(model), "--members", str(tmp_path / "in.txt"), "--fair-coin", "--quiet"]
    assert main([*args, "--non-members", str(tmp_path / "out.txt"), "--out", str(tmp_path / "r")]) == 0
    r = json.loads((tmp_path / "r" / "report.json").read_text())
    assert r["canary_plan"]["m"] == 57 and r["posthoc"]["dropped"]["repeated records (a group, not one record)"] == 6
    capsys.readouterr()
    assert main([*args, "--non-members", str(tmp_path / "in.txt"), "--out", str(tmp_path / "r2")]) == 2
    assert "hold the same records" in capsys.readouterr().err and not (tmp_path / "r2").exists()
    (tmp_path / "twice.txt").write_text("\n".join(texts[:30] * 2))  # every member repeated (an IndexError, exit 3)
    assert main([*args, "--members", str(tmp_path / "twice.txt"), "--non-members", str(tmp_path / "out.txt"),
                 "--out", str(tmp_path / "r3")]) == 2
    assert "0 members and 30 non-members are left to score" in capsys.readouterr().err  # texts[2]: a group


def test_rescore_reads_the_named_files_again_and_catches_scores_forged_consistently(memorised, tmp_path, monkeypatch,
                                                                                   capsys):
    """A report whose identifier scores were replaced before its evidence was derived (consistent: every bound
    follows from the forged scores) passes `check --checkpoint`, which takes the scores from the report; `--rescore`
    reads the training data again (its digest checked), rebuilds the pairs by the same seed and scores them with the
    model. Before, --rescore refused every post-hoc report."""
    model, data, _ = memorised
    args = ["audit", "identifiers", str(model), "--training-data", str(data), "--format", "uuid4",
            "--guess-fraction", "0.5", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "honest")]) == 0
    real = posthoc.pair_scores
    monkeypatch.setattr(posthoc, "pair_scores", lambda *a, **k: np.random.default_rng(0).normal(size=len(a[2])))
    assert main([*args, "--out", str(tmp_path / "forged")]) == 0
    monkeypatch.setattr(posthoc, "pair_scores", real)
    forged = tmp_path / "forged" / "report.json"
    check = ["check", str(forged), "--checkpoint", str(model)]
    capsys.readouterr()
    assert main(check) == 1 and "re-derived from" not in capsys.readouterr().out  # consistent: only the policy
    assert main([*check, "--rescore"]) == 1
    assert "of the report's 60 loss scores are not the model's" in capsys.readouterr().out
    assert main(["check", str(tmp_path / "honest" / "report.json"), "--checkpoint", str(model), "--rescore"]) == 1
    out = capsys.readouterr().out
    assert "rescored from" not in out and "re-derived from" not in out  # the honest one fails the policy only


def test_identifiers_that_are_not_uniform_draws_are_refused_before_any_score():
    """Card numbers (a Luhn check digit, an issuer prefix), phone numbers and sequential ids are not uniform draws
    of digitsN: a model that learnt their structure prefers every real one over a fresh uniform draw, an honest model
    accused. Refused from the identifiers alone (never their membership); uniform sets pass (0 of 100 refused)."""
    from dpaudit.errors import DpauditError
    from dpaudit.evaluation import identifier_checks as ic

    rng = random.Random(0)

    def luhn(prefix):
        return next(prefix + d for d in "0123456789" if ic.luhn_valid(prefix + d))
    cards = [luhn("".join(rng.choice("0123456789") for _ in range(15))) for _ in range(200)]  # no fixed prefix
    texts = [f"paid with {c} today" for c in cards]
    with pytest.raises(DpauditError, match="pass the Luhn check"):
        posthoc.identifier_pairs(texts, "digits16", seed=0)
    with pytest.raises(DpauditError, match="character 1 is '1'"):
        ic.check_uniform("digits12", ["1555" + "".join(rng.choice("0123456789") for _ in range(8)) for _ in range(200)])
    with pytest.raises(DpauditError, match="not uniform draws"):
        ic.check_uniform("digits12", [f"{i:012d}" for i in range(5000, 5200)])
    for t in range(100):
        r = random.Random(t)
        ic.check_uniform("uuid4", [posthoc.draw("uuid4", r) for _ in range(400)])
        ic.check_uniform("digits16", [posthoc.draw("digits16", r) for _ in range(200)])


def test_the_gate_derives_the_post_hoc_section_again_and_audit_split_takes_its_own_confidence(tmp_path, capsys):
    """What follows from a post-hoc audit's kind is derived again by `check --checkpoint`: an edited assumption,
    fair-coin p-value below the refusal threshold, token limit, seed or confidence fails it (before, all passed:
    found by editing every leaf of a split report). `--rescore` also compares what the report says it left out
    with what the files give now. Before, `audit split --confidence 0.9` was refused as a departure from a plan
    "fixed in canaries.json" that a post-hoc audit does not have."""
    from dpaudit.gate import rederive

    texts = _records(80, 4)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:40]))
    (tmp_path / "out.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[40:]))
    model = _train(tmp_path / "model", texts[:40], 2, epsilon=1.0)
    assert main(["audit", "split", str(model), "--members", str(tmp_path / "in.jsonl"), "--non-members",
                 str(tmp_path / "out.jsonl"), "--fair-coin", "--quiet", "--confidence", "0.9",
                 "--out", str(tmp_path / "r")]) == 0
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["audit_plan"]["used"]["confidence"] == 0.9 and report["audit_plan"]["status"] == "as planned"
    assert rederive.mismatches(report, model) == []
    edits = {("posthoc", "assumption"): "each record was chosen at random", ("posthoc", "sources", "fair_coin_p"): 1e-5,
             ("posthoc", "sources", "max_tokens"): 32, ("posthoc", "sources", "seed"): "0",
             ("audit_plan", "used", "confidence"): 0.95, ("accounting", "reason"): "consistent",
             ("accounting", "tolerance"): 0.5}
    for path, value in edits.items():
        r = json.loads(json.dumps(report))
        d = r
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
        assert rederive.mismatches(r, model), path
    r = json.loads(json.dumps(report))
    r["posthoc"]["dropped"]["repeated records (a group, not one record)"] = 2
    (tmp_path / "dropped.json").write_text(json.dumps(r))
    capsys.readouterr()
    assert main(["check", str(tmp_path / "dropped.json"), "--checkpoint", str(model)]) == 0  # not derivable: said
    assert "the records it left out as it says (--rescore reads them again)" in capsys.readouterr().out
    assert main(["check", str(tmp_path / "dropped.json"), "--checkpoint", str(model), "--rescore"]) == 1
    assert "records left out: the report has" in capsys.readouterr().out
    assert main(["check", str(tmp_path / "r" / "report.json"), "--checkpoint", str(model), "--rescore"]) == 0


def test_too_few_identifiers_to_pair_says_what_was_left_out(memorised, tmp_path, capsys):
    """Identifiers that all repeat, or are all of mixed case, leave none to pair: the refusal says which rule left
    them out (it read "0 identifiers that occur once" for 30 that each occurred once in mixed case)."""
    model, _, _ = memorised
    rng = random.Random(2)
    ids = [posthoc.draw("uuid4", rng) for _ in range(30)]
    for name, rows, needle in (("twice", ids + ids, "30 repeated identifiers"),
                               ("mixed", [u[:8].upper() + u[8:] for u in ids], "identifiers of mixed case")):
        f = tmp_path / f"{name}.txt"
        f.write_text("".join(f"ticket {u} opened\n" for u in rows))
        capsys.readouterr()
        assert main(["audit", "identifiers", str(model), "--training-data", str(f), "--format", "uuid4", "--out",
                     str(tmp_path / name), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert "uuid4 identifiers to pair (at least 20" in err and needle in err and not (tmp_path / name).exists()
