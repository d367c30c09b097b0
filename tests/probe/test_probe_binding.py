"""White-box evidence bound to its run (docs/security.md "Evidence is bound to its origin"): the probe's record
carries its run's identity, the card names it (``card_from_opacus`` with the probed optimizer, ``probe.bind``,
dpaudit's trainers), and ``evaluate`` / ``check --checkpoint`` refuse a record another run wrote, a non-private
run's record beside a DP card, and count the records in the checkpoint's hash."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpaudit import api
from dpaudit.canaries.manifest import CanaryPlan, generate
from dpaudit.checkpoint import Checkpoint
from dpaudit.claim.card import Claim, PrivacyCard, load_card
from dpaudit.errors import DpauditError
from dpaudit.evaluation import scoring

N, B, C = 200, 20, 1.0


def _run(folder, *, seed=0, private=True, steps=12, bind=True):
    """An Opacus loop with the probe attached; the probe's record and the engine's card saved in ``folder``."""
    torch.manual_seed(seed)
    data = TensorDataset(torch.randn(N, 4), torch.randint(0, 2, (N,)))
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(data, batch_size=B)
    engine = PrivacyEngine(accountant="prv")
    if private:
        model, opt, loader = engine.make_private(module=model, optimizer=opt, data_loader=loader, noise_multiplier=1.0,
                                                 max_grad_norm=C)
    probe = api.attach_probe(opt, sample_rate=B / N, m=50, seed=seed, model=model, on_fail=None) if private else \
        _nonprivate_probe(opt)
    for _, (x, y) in zip(range(steps), loader):
        opt.zero_grad()
        if len(x):
            nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    folder.mkdir(parents=True)
    probe.save(folder)
    if private:
        card = api.card_from_opacus(engine, loader, opt, delta=1e-5)
        if not bind:  # a card written without the probe's identity (by hand, or before run identities)
            card = PrivacyCard(claim=card.claim, events=card.events, clipping_norm=card.clipping_norm,
                               expected_batch_size=card.expected_batch_size, dataset_size=card.dataset_size)
        card.save(folder / "privacy_card.json")
    return probe


def _nonprivate_probe(opt):
    from dpaudit.probe import Probe

    return Probe(opt, sample_rate=B / N, m=8, seed=0, coordinates="model", clip_canaries=0, private=False,
                 expected_batch_size=B, clipping_norm=C)


def _whitebox(folder, card_folder=None):
    card = load_card((card_folder or folder) / "privacy_card.json")
    return scoring.whitebox(folder, card.audited_mechanism(), card)


def test_the_card_names_the_probes_run_and_the_record_carries_it(tmp_path):
    probe = _run(tmp_path / "a")
    card = load_card(tmp_path / "a" / "privacy_card.json")
    rec = json.loads((tmp_path / "a" / "gradient_canaries.json").read_text())
    assert card.extra["probe_runs"] == [probe.run_id] == [rec["probe"]["run_id"]]
    (w,) = _whitebox(tmp_path / "a")
    assert w["bound_to_card"] is True
    # probe.bind names it on any card (the functional probe's users write their card themselves)
    bare = PrivacyCard(claim=Claim(epsilon=1.0, delta=1e-5))
    assert probe.bind(probe.bind(bare)).extra["probe_runs"] == [probe.run_id]


def test_a_record_from_another_run_of_the_same_card_is_refused_in_one_line(tmp_path):
    _run(tmp_path / "a", seed=0)
    _run(tmp_path / "b", seed=1)
    a, b = (json.loads((tmp_path / d / "privacy_card.json").read_text()) for d in "ab")
    assert {k: v for k, v in a.items() if k != "extra"} == {k: v for k, v in b.items() if k != "extra"}  # one card
    for f in (tmp_path / "b").glob("gradient_canaries*"):
        shutil.copy(f, tmp_path / "a" / f.name)
    with pytest.raises(DpauditError, match="from another run") as e:
        _whitebox(tmp_path / "a")
    assert "\n" not in str(e.value)


def test_a_non_private_runs_record_beside_a_dp_card_is_refused(tmp_path):
    _run(tmp_path / "dp", bind=False)  # even where the card names no probe run
    _run(tmp_path / "np", private=False)
    for f in (tmp_path / "np").glob("gradient_canaries*"):
        shutil.copy(f, tmp_path / "dp" / f.name)
    (tmp_path / "dp" / "gradient_canaries.probe.npz").unlink()  # the non-private record has no arrays
    with pytest.raises(DpauditError, match="non-private run"):
        _whitebox(tmp_path / "dp")


def test_a_card_that_names_no_run_still_evaluates_and_says_so(tmp_path):
    _run(tmp_path / "a", bind=False)
    (w,) = _whitebox(tmp_path / "a")
    assert w["bound_to_card"] is False


def test_a_card_written_by_hand_binds_the_record_it_is_given(tmp_path, capsys):
    """`dpaudit card --probe-record FILE`: the card a user writes by hand names the probe's run, so the record is
    this model's evidence; a file that is not a probe record is refused in one line, nothing written."""
    from dpaudit.cli import main

    probe = _run(tmp_path / "a", bind=False)
    c = load_card(tmp_path / "a" / "privacy_card.json")
    e = c.events[0]
    args = ["card", "--epsilon", str(c.claim.epsilon), "--delta", "1e-5", "--sigma", str(e.noise_multiplier),
            "--sample-rate", str(e.sample_rate), "--steps", str(e.steps), "--clipping-norm", str(C),
            "--dataset-size", str(N), "--out", str(tmp_path / "a" / "privacy_card.json")]
    assert main([*args, "--probe-record", str(tmp_path / "a" / "gradient_canaries.json")]) == 0
    assert load_card(tmp_path / "a" / "privacy_card.json").extra["probe_runs"] == [probe.run_id]
    (w,) = _whitebox(tmp_path / "a")
    assert w["bound_to_card"] is True
    before = (tmp_path / "a" / "privacy_card.json").read_bytes()
    capsys.readouterr()
    assert main([*args, "--probe-record", str(tmp_path / "a" / "privacy_card.json")]) == 2
    err = capsys.readouterr().err
    assert "no probe.run_id" in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "a" / "privacy_card.json").read_bytes() == before


def test_the_checkpoint_hash_covers_the_white_box_records(tmp_path):
    _run(tmp_path / "a", seed=0)
    _run(tmp_path / "b", seed=1)
    card = load_card(tmp_path / "a" / "privacy_card.json")
    ck = Checkpoint(path=tmp_path / "a", card=card, manifest=generate(CanaryPlan(m=4, repetitions=1)), run={})
    before = ck.hash()
    arrays = tmp_path / "a" / "gradient_canaries.steps.npy"
    arrays.write_bytes(arrays.read_bytes()[:-4] + b"\0\0\0\0")  # the last projection changed
    assert ck.hash() != before
    for f in (tmp_path / "a").glob("gradient_canaries*"):
        f.unlink()
    assert ck.hash() not in (before,)  # without records: the model's files alone


def test_check_checkpoint_names_a_swapped_record(tmp_path):
    from dpaudit.gate.rederive import _unbound_records

    _run(tmp_path / "a", seed=0)
    _run(tmp_path / "b", seed=1)
    card = load_card(tmp_path / "a" / "privacy_card.json")
    ck = Checkpoint(path=tmp_path / "a", card=card, manifest=generate(CanaryPlan(m=4, repetitions=1)), run={})
    assert _unbound_records(ck) == []
    shutil.copy(tmp_path / "b" / "gradient_canaries.json", tmp_path / "a" / "gradient_canaries.json")
    (line,) = _unbound_records(ck)
    assert "from another run" in line


def test_a_resumed_probe_keeps_its_run_identity(tmp_path):
    probe = _run(tmp_path / "a", steps=3)
    tensors = {}
    state = probe.snapshot("p", tensors)
    json.dumps(state)  # trainers/snapshot.py writes it into state.json
    other = _run(tmp_path / "b", steps=3)
    assert other.run_id != probe.run_id
    other.restore("p", state, tensors)
    assert other.run_id == probe.run_id


def test_dpaudits_seeded_runs_derive_their_identity_from_settings_and_data():
    from dpaudit.trainers.engine import EngineConfig, run_identity

    data = TensorDataset(torch.arange(12).reshape(4, 3))
    cfg = EngineConfig(target_epsilon=4.0, delta=1e-5, gradient_canaries=8)
    assert run_identity(cfg, data) == run_identity(cfg, TensorDataset(torch.arange(12).reshape(4, 3)))
    assert run_identity(cfg, data) != run_identity(cfg, TensorDataset(torch.arange(1, 13).reshape(4, 3)))
    assert run_identity(cfg, data) != run_identity(EngineConfig(target_epsilon=4.0, delta=1e-5, gradient_canaries=8,
                                                                seed=1), data)
    secure = EngineConfig(target_epsilon=4.0, delta=1e-5, gradient_canaries=8, secure_rng=True)
    assert run_identity(secure, data) != run_identity(secure, data)  # a secret-noise run: random
