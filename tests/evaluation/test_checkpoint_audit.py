"""Many-run audit over checkpoints: 8 separate non-private runs, the target canary in half of them."""

import dataclasses
import json

import numpy as np
import pytest

from dpaudit import checkpoint
from dpaudit.audit import many_run
from dpaudit.canaries.manifest import CanaryPlan, Manifest, generate
from dpaudit.claim.card import Claim, PrivacyCard
from dpaudit.cli import main
from dpaudit.errors import DpauditError
from dpaudit.evaluation import checkpoint_audit
from dpaudit.tasks import sentiment
from dpaudit.trainers import dp_adam, engine


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_factory):
    root = tmp_path_factory.mktemp("runs")
    data = sentiment.load(n_train=40, n_test=10)
    base = generate(CanaryPlan(m=2, repetitions=8, seed=3))
    paths = []
    for i in range(8):
        inserted = i % 2 == 0
        target = dataclasses.replace(base.canaries[0], inserted=inserted, sign=1 if inserted else -1,
                                     repetitions=8 if inserted else 0)
        other = dataclasses.replace(base.canaries[1], inserted=False, sign=-1, repetitions=0)
        man = Manifest(base.plan, [target, other])
        model, tok = tiny_model_factory(seed=i)
        recs = dp_adam.build_records(data, man, tok, "lm", 32, seed=i)
        model, res = engine.train(model, recs, engine.EngineConfig(epochs=8, batch_size=8, lr=5e-3, seed=i), tok.pad_token_id, 32)
        card = PrivacyCard(claim=Claim(epsilon=None, delta=0.0))
        paths.append(checkpoint.write(root / f"run{i}", model, tok, card, man, {}))
    return paths


def test_scores_separate_and_counts_feed_cp(runs):
    scores, member, text = checkpoint_audit.score_checkpoints(runs, "c0")
    assert member.sum() == 4 and text.startswith("My account number is")
    assert scores[member].min() > scores[~member].max()  # memorised 8x in every run that has it
    r = checkpoint_audit.audit(scores, member, delta=0.0)
    assert r["tp"] + r["fn"] + r["fp"] + r["tn"] == r["n_audit"] == 4
    assert r["fn"] == 0 and r["fp"] == 0
    assert r["epsilon_lb"] == many_run.clopper_pearson_epsilon(r["tp"], r["fn"], r["fp"], r["tn"], 0.0)


def test_cli_and_errors(runs, capsys):
    assert main(["audit", "checkpoints", *map(str, runs), "--canary", "c0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_checkpoints"] == 8
    assert main(["audit", "checkpoints", *map(str, runs[:3]), "--canary", "c0"]) == 2
    assert "at least 4" in capsys.readouterr().err
    assert main(["audit", "checkpoints", *map(str, runs), "--canary", "c9"]) == 2
    assert "not in its manifest" in capsys.readouterr().err
    with pytest.raises(DpauditError, match="in every one of the 4"):
        checkpoint_audit.audit(np.arange(4.0), np.array([True, True, True, True]))
    with pytest.raises(DpauditError, match="only members"):  # both sides overall, one side in a half
        checkpoint_audit.audit(np.arange(4.0), np.array([True, True, False, False]), seed=next(
            s for s in range(100) if len(set(np.array([1, 1, 0, 0])[np.random.default_rng([s, 2718]).permutation(4)[:2]])) == 1))


def test_one_run_counted_twice_is_refused(runs, capsys):
    """The same checkpoint passed twice (or a copy of it) is one training run, not two independent ones: counted
    twice, its score would enter the bound as if a second run had confirmed it."""
    import shutil

    copy = runs[0].parent / "copy-of-run0"
    shutil.copytree(runs[0], copy)
    for dup in (runs[0], copy):
        assert main(["audit", "checkpoints", *map(str, runs[:4]), str(dup), "--canary", "c0"]) == 2
        err = capsys.readouterr().err
        assert "is the same checkpoint as" in err and len(err.strip().splitlines()) == 1, err
