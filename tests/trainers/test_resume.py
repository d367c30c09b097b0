"""Snapshots and resume: a run interrupted at any step and resumed gives the same weights, card, ledger, canary
record, losses and clipping statistics as an uninterrupted one (same machine); another run's snapshot is
refused; `dpaudit run --resume` survives a SIGKILL."""

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from dpaudit.errors import DpauditError
from dpaudit.tasks import sentiment
from dpaudit.trainers import engine
from dpaudit.trainers.engine import EngineConfig
from dpaudit.trainers.snapshot import Snapshots


class Crash(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class CrashingSnapshots(Snapshots):
    """Dies right after logical step ``crash_at`` (between snapshots: the steps since the last one are lost)."""

    crash_at: int = -1

    def due(self, step, last):
        if step == self.crash_at:
            raise Crash(step)
        return super().due(step, last)


def _records(tok, n=48):
    return [sentiment.encode_text(e["sentence"], tok, 32) for e in sentiment.load(n_train=n).train]


def _users(tok):
    recs = _records(tok, 60)
    return {f"u{i:02d}": recs[i::12] for i in range(12)}


CASES = {
    "record-dp": dict(target_epsilon=4.0, delta=1e-5, gradient_canaries=8),
    "record-dp-physical": dict(target_epsilon=4.0, delta=1e-5, max_physical_batch_size=5, gradient_canaries=8,
                               gradient_canary_kind="dirac+dense"),
    "record-nonprivate": dict(gradient_canaries=8, epochs=2.5),
    "user-dp": dict(target_epsilon=4.0, delta=1e-5, gradient_canaries=8, batch_size=3, epochs=3),
    # book-keeping with its block-wise noise draw (thresholds lowered below: the tiny model has 2^22 coordinates
    # nowhere near), drawn by three threads
    "record-dp-bk-blocks": dict(target_epsilon=4.0, delta=1e-5, gradient_canaries=8, grad_sample_mode="bk"),
}


def _train(tiny_model_factory, case, snapshots=None):
    model, tok = tiny_model_factory()
    cfg = EngineConfig(**{"epochs": 1.5, "batch_size": 8, "lr": 1e-3, "seed": 3, **CASES[case]})
    if case.startswith("user"):
        return engine.train_users(model, _users(tok), cfg, tok.pad_token_id, 32, snapshots=snapshots)
    return engine.train(model, _records(tok), cfg, tok.pad_token_id, 32, snapshots=snapshots)


def _same(a, b):
    (ma, ra), (mb, rb) = a, b
    for (na, pa), (nb, pb) in zip(ma.state_dict().items(), mb.state_dict().items()):
        assert na == nb and torch.equal(pa, pb), na
    da, db = ra.summary(), rb.summary()
    for d in (da, db):
        d.pop("seconds"), d.pop("resumed_at")
    assert da == db  # events (the ledger), epsilon, losses per step, clipping statistics
    for ca, cb in zip([ra.gradient_canaries, *ra.gradient_canaries_more], [rb.gradient_canaries,
                                                                          *rb.gradient_canaries_more]):
        if ca is None:
            assert cb is None
            continue
        assert ca["scores"] == cb["scores"] and ca["times_sampled"] == cb["times_sampled"]
        assert np.array_equal(ca["step_projections"], cb["step_projections"])
        pa, pb = ((c.get("probe") or {}).get("arrays") or {} for c in (ca, cb))
        for k in ("noise_ss_step", "noise_cross_step", "noise_ss_tensor", "records_per_step"):  # the probe's readings
            assert (k in pa) == (k in pb) and (k not in pa or np.array_equal(pa[k], pb[k])), k


@pytest.mark.parametrize("case", list(CASES))
def test_interrupted_run_resumes_to_the_uninterrupted_result(tiny_model_factory, tmp_path, case, monkeypatch):
    if case.endswith("bk-blocks"):
        from dpaudit.trainers import noise

        monkeypatch.setattr(noise, "PARALLEL_MIN", 1000)
        monkeypatch.setattr(noise, "BLOCK", 4096)
        calls = []
        real = noise.add_gaussian_
        monkeypatch.setattr(noise, "add_gaussian_", lambda *a: (calls.append(1), real(*a)))
        monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    ref = _train(tiny_model_factory, case)
    if case.endswith("bk-blocks"):
        assert calls  # the block-wise draw ran
    steps = ref[1].steps
    assert steps >= 8
    crash_at = random.Random(case).randrange(4, steps - 1)  # a step after the first snapshot, not one of them
    if crash_at % 3 == 0:
        crash_at += 1
    fp = "run-" + case
    with pytest.raises(Crash):
        _train(tiny_model_factory, case, CrashingSnapshots(tmp_path / "s", 3, fp, crash_at=crash_at))
    state = json.loads((Snapshots(tmp_path / "s", 3, fp).latest() / "state.json").read_text())
    assert state["step"] == crash_at // 3 * 3 and state["ledger"]["steps"] == state["step"]
    resumed = _train(tiny_model_factory, case, Snapshots(tmp_path / "s", 3, fp, resume=True))
    assert resumed[1].resumed_at == [state["step"]]
    _same(ref, resumed)


def test_snapshot_of_another_run_is_refused(tiny_model_factory, tmp_path):
    with pytest.raises(Crash):
        _train(tiny_model_factory, "record-dp", CrashingSnapshots(tmp_path / "s", 2, "A", crash_at=5))
    with pytest.raises(DpauditError, match="belongs to a different run"):
        _train(tiny_model_factory, "record-dp", Snapshots(tmp_path / "s", 2, "B", resume=True))


def test_a_snapshot_edited_to_fewer_steps_is_refused(tiny_model_factory, tmp_path):
    """Fewer steps in the ledger would make the resumed run's card claim fewer steps than ran (an under-reported ε):
    the snapshot's digest finds the edit, and where the digest is recomputed too, the optimizer's own step count."""
    import json

    from dpaudit.trainers import snapshot

    with pytest.raises(Crash):
        _train(tiny_model_factory, "record-dp", CrashingSnapshots(tmp_path / "s", 2, "A", crash_at=5))
    d = tmp_path / "s" / (tmp_path / "s" / "LATEST").read_text().strip()
    state = json.loads((d / "state.json").read_text())
    k = state["step"] - 2
    state.update(step=k, losses=state["losses"][:k], ledger={**state["ledger"], "steps": k})
    state["ledger"]["events"][0]["steps"] = k
    (d / "state.json").write_text(json.dumps(state))
    with pytest.raises(DpauditError, match="changed after it was written"):
        _train(tiny_model_factory, "record-dp", Snapshots(tmp_path / "s", 2, "A", resume=True))
    state["digest"] = snapshot._digest(state, d / "tensors.safetensors")  # a careful edit recomputes the digest
    (d / "state.json").write_text(json.dumps(state))
    with pytest.raises(DpauditError, match="optimizer state took"):
        _train(tiny_model_factory, "record-dp", Snapshots(tmp_path / "s", 2, "A", resume=True))


def test_a_half_written_snapshot_never_becomes_the_latest(tmp_path):
    s = Snapshots(tmp_path / "s", 1, "A", resume=True)
    s.save(1, {"x": 1}, {"t": torch.zeros(2)})
    (tmp_path / "s" / ".step-000000002.tmp").mkdir()  # a save that died before its rename
    state, tensors = s.load()
    assert state["step"] == 1 and torch.equal(tensors["t"], torch.zeros(2))
    (tmp_path / "s" / "LATEST").write_text("step-000000009")
    with pytest.raises(DpauditError, match="incomplete"):
        s.load()


RUN = """
[task]
n_train = 96
n_test = 24
[model]
name = "tiny-gpt2"
vocab_size = 512
n_embd = 32
n_layer = 2
n_head = 2
max_len = 32
[canaries]
m = 20
[train]
gradient_canaries = 16
delta = 1e-5
epochs = 2
batch_size = 8
lr = 2e-3
[evaluate]
attacks = ["loss"]
n_references = 50
enumerate_limit = 0
[[variants]]
name = "dp"
target_epsilon = 4
"""


def _cli(*args, **kw):
    """The CLI in a subprocess. The runs compared bit for bit use one fixed thread count: MKL/OpenMP may otherwise
    use fewer threads when the machine is loaded (MKL_DYNAMIC), and another reduction order changes the model's
    last bits (the flaky "model bytes differ" of a loaded machine)."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MKL_DYNAMIC": "FALSE"}
    return subprocess.Popen([sys.executable, "-m", "dpaudit.cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


@pytest.mark.slow
def test_dpaudit_run_resumes_after_sigkill(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(RUN)
    ref = _cli("run", str(cfg), "--out", str(tmp_path / "ref"), "--quiet", "--snapshot-every", "0", "--train-only")
    assert ref.wait(timeout=600) == 0, ref.stderr.read()
    target = random.Random(7).randrange(2, 6) * 4  # a snapshot at a random step, then killed
    p = _cli("run", str(cfg), "--out", str(tmp_path / "out"), "--quiet", "--snapshot-every", "4")
    latest = tmp_path / "out" / "dp" / "train_state" / "LATEST"
    t0 = time.time()
    while time.time() - t0 < 600:
        if latest.exists() and int(latest.read_text().split("-")[1]) >= target:
            break
        assert p.poll() is None, "the run ended before it could be killed"
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert not (tmp_path / "out" / "dp" / "checkpoint").exists()
    again = _cli("run", str(cfg), "--out", str(tmp_path / "out"), "--quiet")  # without --resume: refused
    assert again.wait(timeout=120) == 2 and "--resume" in again.stderr.read()
    res = _cli("run", str(cfg), "--out", str(tmp_path / "out"), "--quiet", "--resume", "--snapshot-every", "4")
    assert res.wait(timeout=600) == 0, res.stderr.read()
    a, b = tmp_path / "ref" / "dp" / "checkpoint", tmp_path / "out" / "dp" / "checkpoint"
    assert json.loads((a / "privacy_card.json").read_text()) == json.loads((b / "privacy_card.json").read_text())
    ra, rb = (json.loads((d / "run.json").read_text())["train_result"] for d in (a, b))
    assert ra["events"] == rb["events"] and ra["loss_per_step"] == rb["loss_per_step"]
    assert rb["resumed_at"] and rb["resumed_at"][0] >= target
    assert (a / "model" / "model.safetensors").read_bytes() == (b / "model" / "model.safetensors").read_bytes()
    assert json.loads((a / "gradient_canaries.json").read_text())["scores"] == \
        json.loads((b / "gradient_canaries.json").read_text())["scores"]
    assert not (tmp_path / "out" / "dp" / "train_state").exists()
