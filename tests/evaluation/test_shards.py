"""Sharded scoring: `evaluate --shard i/n` on every shard, then `--merge`, gives the one-process report (the
attack primitives are checked at 3 and 4 shards below)."""

import json

import numpy as np
import pytest

from dpaudit.attacks import classifier as clf_attack
from dpaudit.attacks import exposure, exposure_trie
from dpaudit.attacks.scoring import token_features
from dpaudit.cli import main

VOLATILE = ("generated_at", "timings")


def _stable(report: dict) -> dict:
    r = {k: v for k, v in report.items() if k not in VOLATILE}
    r["reproducibility"] = {k: v for k, v in r["reproducibility"].items() if k != "command"}
    return r


def test_shards_merge_to_the_one_process_report(run_dir, tmp_path):
    """Every black-box attack, the reference model and exposure over sampled references, on a DP checkpoint
    with white-box canaries: the merged report is the one-process report, number for number."""
    ck = run_dir / "dp" / "checkpoint"
    # as the run evaluated it: every attack, 200 sampled references (the sharded trie: the primitives test below)
    args = ["--batch-size", "16", "--enumerate-limit", "0", "--quiet"]
    parts = []
    for i in (1, 2):
        part = tmp_path / f"part{i}"
        assert main(["evaluate", str(ck), "--out", str(part), "--shard", f"{i}/2", *args]) in (0, None)
        parts += ["--merge", str(part)]
        meta = json.loads((part / "partial.json").read_text())
        assert (meta["metrics"] is not None) == (i == 1)  # the task metrics are measured once
        with np.load(part / "scores.npz") as z:
            share = np.isfinite(z["score/loss"]).mean()
        assert 0 < share < 1  # each shard scores part of the canaries
    assert main(["evaluate", str(ck), "--out", str(tmp_path / "merged"), *parts, "--quiet"]) in (0, None)
    one = json.loads((run_dir / "dp" / "report" / "report.json").read_text())  # the run's own, one process
    merged = json.loads((tmp_path / "merged" / "report.json").read_text())
    assert merged["timings"]["shards"] == 2
    assert _stable(merged) == _stable(one)


def test_merge_refuses_missing_duplicate_or_foreign_shards(run_dir, tmp_path, capsys):
    ck = run_dir / "non-private" / "checkpoint"
    args = ["--attacks", "loss", "--off-plan", "--quiet"]
    for i in (1, 2):
        assert main(["evaluate", str(ck), "--out", str(tmp_path / f"p{i}"), "--shard", f"{i}/2", *args]) in (0, None)
    assert main(["evaluate", str(run_dir / "dp" / "checkpoint"), "--out", str(tmp_path / "q2"), "--shard", "2/2",
                 *args]) in (0, None)
    assert main(["evaluate", str(ck), "--out", str(tmp_path / "p2b"), "--shard", "2/2", "--attacks", "zlib", "--off-plan",
                 "--quiet"]) in (0, None)
    cases = [(["--merge", str(tmp_path / "p1")], "exactly once"),
             (["--merge", str(tmp_path / "p1"), "--merge", str(tmp_path / "p1")], "exactly once"),
             (["--merge", str(tmp_path / "p1"), "--merge", str(tmp_path / "q2")], "another checkpoint"),
             (["--merge", str(tmp_path / "p1"), "--merge", str(tmp_path / "p2b")], "other options"),
             (["--merge", str(tmp_path / "p1"), "--merge", str(tmp_path / "p2"), "--attacks", "loss"],
              "cannot be combined with --merge"),
             (["--merge", str(tmp_path / "p1"), "--merge", str(tmp_path / "p2"), "--references", "300"],
              "--references cannot be combined with --merge"),
             (["--shard", "3/2"], "between 1 and n"), (["--shard", "half"], "form i/n"),
             (["--shard", "1/2", "--merge", str(tmp_path / "p1")], "two steps")]
    for extra, msg in cases:
        capsys.readouterr()
        assert main(["evaluate", str(ck), "--out", str(tmp_path / "r"), *extra]) == 2, extra
        err = capsys.readouterr().err.strip()
        assert msg in err and len(err.splitlines()) == 1, (extra, err)
        assert not (tmp_path / "r").exists()


def test_sharded_attack_primitives_equal_one_process(tiny_model_factory):
    """Token features, exposure over sampled secrets and the whole-space trie (sharded at its top level): each
    entry computed by exactly one shard, bitwise equal to one process."""
    model, tok = tiny_model_factory()
    model.eval()
    texts = [f"record {i} says {'x' * (i % 7)} {i * 37}" for i in range(23)]
    whole = token_features(model, tok, texts, batch_size=4, moments=True)
    seen = np.zeros(len(texts), dtype=int)
    for i in range(3):
        for j, f in enumerate(token_features(model, tok, texts, batch_size=4, moments=True, shard=(i, 3))):
            if f is not None:
                seen[j] += 1
                assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in
                           ((f.logp, whole[j].logp), (f.mu, whole[j].mu), (f.sigma, whole[j].sigma)))
    assert (seen == 1).all()

    secrets = [f"{a}{b}{c}" for a in "0123456789" for b in "0123456789" for c in "0123"]
    for fn in (exposure.log_perplexities, exposure_trie.log_probs):
        one = fn(model, tok, "my pin is ", secrets, ".", batch_size=3)
        parts = np.stack([fn(model, tok, "my pin is ", secrets, ".", batch_size=3, shard=(i, 3)) for i in range(3)])
        assert (np.isfinite(parts).sum(0) == 1).all() and (np.isfinite(parts).sum(1) > 0).all(), fn.__name__
        assert np.array_equal(np.nansum(parts, 0), one), fn.__name__


def test_sharded_classifier_label_log_probs_equal_one_process():
    from tests.tasks.test_classifier import _tiny_bert

    model, tok = _tiny_bert()
    texts = [f"review {i} {'good ' * (i % 4)}" for i in range(11)]
    labels = [i % 2 for i in range(11)]
    one = clf_attack.label_log_probs(model.eval(), tok, texts, labels, batch_size=3)
    parts = np.stack([clf_attack.label_log_probs(model, tok, texts, labels, batch_size=3, shard=(i, 2))
                      for i in range(2)])
    assert (np.isfinite(parts).sum(0) == 1).all()
    assert np.array_equal(np.nansum(parts, 0), one)


@pytest.mark.parametrize("bad", ["0/3", "4/3", "1/0", "a/b", "1"])
def test_shard_spec_errors_name_the_form(bad):
    from dpaudit.errors import DpauditError
    from dpaudit.evaluation import shards

    with pytest.raises(DpauditError, match="--shard"):
        shards.parse(bad)


def test_edited_damaged_or_bomb_partials_are_refused_at_the_merge(run_dir, tmp_path, capsys):
    """A partial carries the digest of its metadata and scores: raising a score, changing the accuracy or
    truncating the metadata is found at the merge; a compressed member (a decompression bomb) is refused before it
    is inflated."""
    import json
    import shutil
    import zipfile

    import numpy as np

    ck = run_dir / "non-private" / "checkpoint"
    args = ["--attacks", "loss", "--off-plan", "--quiet"]
    for i in (1, 2):
        assert main(["evaluate", str(ck), "--out", str(tmp_path / f"p{i}"), "--shard", f"{i}/2", *args]) in (0, None)

    def variant(name, edit):
        d = tmp_path / name
        shutil.copytree(tmp_path / "p1", d)
        edit(d)
        return d

    def raise_scores(d):
        with np.load(d / "scores.npz") as z:
            arrays = {k: z[k] + 5.0 for k in z.files}
        np.savez(d / "scores.npz", **arrays)

    def raise_accuracy(d):
        meta = json.loads((d / "partial.json").read_text())
        meta["metrics"]["accuracy"] = 0.99
        (d / "partial.json").write_text(json.dumps(meta))

    def truncate(d):
        meta = json.loads((d / "partial.json").read_text())
        del meta["options"]
        (d / "partial.json").write_text(json.dumps(meta))

    def bomb(d):
        with zipfile.ZipFile(d / "scores.npz", "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr("score/loss.npy", b"\0" * 10_000_000)

    cases = [(raise_scores, "changed after the shard wrote them"), (raise_accuracy, "changed after the shard wrote them"),
             (truncate, "'options' is missing"), (bomb, "compressed or larger than the file")]
    for k, (edit, msg) in enumerate(cases):
        bad = variant(f"bad{k}", edit)
        capsys.readouterr()
        assert main(["evaluate", str(ck), "--out", str(tmp_path / "r"), "--merge", str(bad), "--merge",
                     str(tmp_path / "p2"), "--quiet"]) == 2, edit.__name__
        err = capsys.readouterr().err.strip()
        assert msg in err and len(err.splitlines()) == 1, (edit.__name__, err)
        assert not (tmp_path / "r").exists()
