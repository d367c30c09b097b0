"""The white-box probe on an external Opacus loop (dpaudit/probe/probe.py): canaries enter where a record's clipped
gradient would and come out at exactly C / B without noise, in hooks and ghost mode; clip canaries go through the
optimizer's own clipping; the mechanism checks pass an honest loop and name each planted bug; bad input is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from opacus import PrivacyEngine
from safetensors.torch import save_model
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpaudit import api
from dpaudit.claim.card import load_card
from dpaudit.errors import DpauditError
from dpaudit.evaluation import evidence, scoring
from dpaudit.probe import Probe

N, B, C = 400, 40, 0.5


def _loop(tmp_path, *, mode="hooks", sigma=1.0, steps=30, bug=None, m=200, clip=16, seed=0, record_steps=True):
    """A plain Opacus loop with the probe attached in one line; the card from the engine; both saved in tmp_path."""
    torch.manual_seed(seed)
    data = TensorDataset(torch.randn(N, 6) * 3, torch.randint(0, 3, (N,)))
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    engine = PrivacyEngine(accountant="prv")
    kw = dict(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
              data_loader=DataLoader(data, batch_size=B), noise_multiplier=sigma, max_grad_norm=C,
              poisson_sampling=True)
    if mode == "ghost":
        model, opt, crit, loader = engine.make_private(**kw, grad_sample_mode="ghost", criterion=nn.CrossEntropyLoss())
    else:
        model, opt, loader = engine.make_private(**kw)
        crit = nn.CrossEntropyLoss()
    if bug:
        _plant(opt, bug)
    probe = api.attach_probe(opt, sample_rate=loader.sample_rate, m=m, seed=seed, clip_canaries=clip,
                             record_steps=record_steps)
    done = 0
    while done < steps:
        for x, y in loader:
            if done == steps:
                break
            if len(x) == 0:
                continue
            opt.zero_grad()
            crit(model(x), y).backward()
            opt.step()
            done += 1
    out = tmp_path / f"run-{mode}-{bug}-{seed}-{record_steps}"
    out.mkdir()
    if sigma > 0:
        api.card_from_opacus(engine, loader, opt, delta=1e-5).save(out / "privacy_card.json")
    probe.save(out)
    save_model(model, str(out / "model.safetensors"))  # the weights beside the record, as a torch user saves them
    return out, probe


def _plant(opt, bug):
    from dpaudit import opacus_private as op

    if bug == "half-noise":
        def add_noise():
            for p in opt.params:
                op.check_processed(p.summed_grad)
                noise = op.generate_noise(std=opt.noise_multiplier * opt.max_grad_norm / 2, reference=p.summed_grad)
                p.grad = (p.summed_grad + noise).view_as(p)
                op.mark_processed(p.summed_grad)
        opt.add_noise = add_noise
    elif bug == "no-clip":
        def clip_and_accumulate():
            for p in opt.params:
                g = opt._get_flat_grad_sample(p).sum(0)
                p.summed_grad = g if p.summed_grad is None else p.summed_grad + g
                op.mark_processed(p.grad_sample)
        opt.clip_and_accumulate = clip_and_accumulate
    elif bug == "divisor":
        rows = {"n": 0}
        acc = opt.clip_and_accumulate

        def counting():
            rows["n"] += len(opt._get_flat_grad_sample(opt.params[0]))
            acc()

        def scale_grad():
            for p in opt.params:
                p.grad /= max(rows["n"], 1)
            rows["n"] = 0
        opt.clip_and_accumulate, opt.scale_grad = counting, scale_grad


def _checks(folder) -> dict:
    card = load_card(folder / "privacy_card.json")
    wb = scoring.whitebox(folder, card.audited_mechanism())
    (entry,) = evidence.mechanism_checks(wb, card)
    return {c.check: c.as_dict() for c in entry.checks}, entry.as_dict()


@pytest.mark.parametrize("mode", ["hooks", "ghost"])
def test_without_noise_every_canary_comes_out_at_exactly_one_unit_of_c_over_b(tmp_path, mode):
    folder, probe = _loop(tmp_path, mode=mode, sigma=0.0, steps=25)
    x = probe.canaries.step_projections().astype(np.float64)
    signs = probe.canaries.signs
    assert np.all(x[:, signs < 0] == 0)  # held out: never in the update
    ins = x[:, signs > 0]
    assert np.allclose(ins[(ins != 0)], 1.0, atol=1e-5)  # inserted: C u_i in the sum, divided by B
    assert np.allclose(ins.sum(0), probe.canaries.times_sampled[signs > 0], atol=1e-4)
    assert 0.5 * 0.1 * 25 * (signs > 0).sum() < probe.canaries.times_sampled.sum()  # sampled at about q = B / N
    r = probe.readings()
    clip, s = r["arrays"]["clip_projections"], r["arrays"]["clip_sampled"]
    assert s.any() and np.allclose(clip[s], 1.0, atol=1e-5) and np.allclose(clip[~s], 0.0, atol=1e-6)
    assert r["mode"] == mode and r["clip_multiple"] == (4.0 if mode == "hooks" else 1.0)
    assert r["arrays"]["records_per_step"].sum() > 0 and r["steps"] == 25
    assert np.all(r["arrays"]["sum_ratio"] <= 1 + 1e-4)
    assert sorted(p.name for p in folder.iterdir()) == ["gradient_canaries.json", "gradient_canaries.probe.npz",
                                                         "gradient_canaries.steps.npy", "model.safetensors"]


def test_clip_canaries_leave_an_optimizer_that_does_not_clip_at_four_c(tmp_path):
    _, probe = _loop(tmp_path, sigma=0.0, steps=20, bug="no-clip")
    r = probe.readings()["arrays"]
    assert np.allclose(r["clip_projections"][r["clip_sampled"]], 4.0, atol=1e-4)
    assert r["sum_ratio"].max() > 1.5  # the records' own unclipped sum breaks ||sum|| <= b C too


@pytest.mark.parametrize("mode", ["hooks", "ghost"])
def test_an_honest_loop_passes_every_check(tmp_path, mode):
    folder, _ = _loop(tmp_path, mode=mode, steps=40)
    checks, entry = _checks(folder)
    assert {k: c["status"] for k, c in checks.items()} == {**dict.fromkeys(
        ("noise", "sampling", "clipping", "steps", "divisor", "weights"), "pass"), "coverage": "not tested"}, checks
    assert entry["coordinates"] == "block" and entry["mode"] == mode
    assert checks["noise"]["values"]["rms"] == pytest.approx(1.0, rel=0.1)  # the block sees the noise alone
    if mode == "ghost":
        assert "ghost mode" in checks["clipping"]["finding"]


@pytest.mark.parametrize("bug,check", [("half-noise", "noise"), ("no-clip", "clipping"), ("divisor", "divisor")])
def test_each_planted_bug_fails_the_check_that_names_it(tmp_path, bug, check):
    folder, _ = _loop(tmp_path, steps=40, bug=bug)
    checks, _ = _checks(folder)
    assert checks[check]["status"] == "fail", checks[check]
    others = [k for k, c in checks.items() if c["status"] == "fail" and k != check]
    assert set(others) <= {"clipping", "noise"} if bug == "no-clip" else not others, others


def test_online_record_keeps_o_m_state_and_audits_as_the_full_record(tmp_path):
    """record_steps=False: the per-step likelihood ratio accumulated as the steps come (O(m) memory) gives the
    statistic, noise check and mechanism checks the full (T, m) record gives, on the same run."""
    full, _ = _loop(tmp_path, steps=40, m=300)
    online, probe = _loop(tmp_path, steps=40, m=300, record_steps=False)
    assert probe.canaries.steps == [] and not (online / "gradient_canaries.steps.npy").exists()
    card = load_card(full / "privacy_card.json")
    (a,), (b,) = (scoring.whitebox(f, card.audited_mechanism()) for f in (full, online))
    assert a["statistic"] == b["statistic"] == "likelihood_ratio"
    np.testing.assert_allclose(b["scores"], a["scores"], rtol=1e-9, atol=1e-9)
    assert b["noise_check"]["values"] == a["noise_check"]["values"]
    assert b["noise_check"]["sum_of_squares"] == pytest.approx(a["noise_check"]["sum_of_squares"], rel=1e-9)
    ca, cb = (evidence.mechanism_checks(w, card)[0].checks for w in ([a], [b]))
    assert [c.status for c in ca] == [c.status for c in cb] == ["pass"] * 5 + ["not tested", "pass"]  # weights last
    assert cb[4].values["p"] == ca[4].values["p"]  # the divisor test reads the same per-step sums


def test_the_engine_and_an_external_loop_share_one_probe_class():
    from dpaudit.trainers import engine

    assert "from dpaudit.probe import Probe" in open(engine.__file__).read()
    assert Probe.__module__ == "dpaudit.probe.probe"


def test_bad_input_is_refused_in_one_line(tmp_path):
    model = nn.Linear(3, 2)
    with pytest.raises(DpauditError, match="Opacus DPOptimizer"):
        api.attach_probe(torch.optim.SGD(model.parameters(), lr=0.1), sample_rate=0.1)
    folder, probe = _loop(tmp_path, sigma=0.0, steps=2)
    with pytest.raises(DpauditError, match="sample_rate"):
        api.attach_probe(probe.optimizer, sample_rate=1.5)
    with pytest.raises(DpauditError, match="coordinates"):
        api.attach_probe(probe.optimizer, sample_rate=0.1, coordinates="weights")
    with pytest.raises(DpauditError, match="not a folder"):
        probe.save(tmp_path / "missing")


def _ddp_worker(rank, world, port, out):
    import os

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    from dpaudit.trainers import distributed

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(N, 6))
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    module, dp_opt, _, loader = distributed.record_level(model, opt, data, sigma=0.0, clipping_norm=C,
                                                         expected_batch_size=B, sample_rate=B / N,
                                                         grad_sample_mode="hooks", seed=0)
    probe = api.attach_probe(dp_opt, sample_rate=B / N, m=64, seed=3, clip_canaries=8)
    mine = []
    for _, (x,) in zip(range(12), loader):
        dp_opt.zero_grad()
        module(x).pow(2).sum(1).mean().backward()
        dp_opt.step()
        mine.append(len(x))
    arrays = probe.readings()["arrays"]
    np.savez(f"{out}/rank{rank}.npz", mine=np.array(mine), proj=probe.canaries.step_projections(),
             signs=probe.canaries.signs, divisor=probe.divisor, records=arrays["records_per_step"],
             clip=arrays["clip_projections"], sampled=arrays["clip_sampled"])
    torch.distributed.destroy_process_group()


def test_distributed_dp_optimizer_on_two_gloo_ranks(tmp_path):
    from tests.trainers.test_distributed import _free_port

    torch.multiprocessing.spawn(_ddp_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (np.load(tmp_path / f"rank{r}.npz") for r in (0, 1))
    assert float(r0["divisor"]) == B  # per-rank expected batch B / 2, times the world size
    total = r0["mine"] + r1["mine"]
    for r in (r0, r1):  # both ranks count the records of the whole logical batch (all-reduced)
        assert np.array_equal(r["records"], total)
    x = r0["proj"].astype(np.float64)  # without noise: canaries exactly once (from rank 0), divided by B
    assert np.all(x[:, r0["signs"] < 0] == 0)
    ins = x[:, r0["signs"] > 0]
    assert np.allclose(ins[ins != 0], 1.0, atol=1e-5) and (ins != 0).any()
    assert np.array_equal(r0["proj"], r1["proj"])  # every rank sees the same reduced update
    clip, s = r0["clip"], r0["sampled"]
    assert np.allclose(clip[s], 1.0, atol=1e-5) and np.allclose(clip[~s], 0.0, atol=1e-6)


def test_an_online_record_resumes_from_a_snapshot_exactly():
    from dpaudit.probe.canaries import GradientCanaries

    def fresh():
        gc = GradientCanaries.plan(50, "dirac", 1, [torch.zeros(200)], 1.0, 0.2)
        gc.start(0)
        gc.go_online(0.9)
        return gc

    rng = np.random.default_rng(0)
    steps = rng.normal(size=(8, 50))
    whole, resumed = fresh(), fresh()
    for x in steps:
        whole._record(x)
    for x in steps[:5]:
        resumed._record(x)
    tensors: dict = {}
    state = resumed.snapshot("c", tensors)
    again = fresh()
    again.restore("c", state, tensors)
    for x in steps[5:]:
        again._record(x)
    a, b = whole.to_dict()["online"], again.to_dict()["online"]
    assert a == b and whole.online["heldout_ss"] == again.online["heldout_ss"]


def test_a_card_for_another_dataset_size_fails_the_divisor_check(tmp_path):
    """An Opacus loop on N records, its card written for N + 40 (the card's q N = 44 against Opacus' divisor
    int(N q) = 40, batch sizes that look alike): the gate's re-derivable divisor check names the dataset; the
    honest card passes it."""
    import dataclasses

    from dpaudit.claim.card import load_card
    from dpaudit.probe import readback

    folder, _ = _loop(tmp_path, steps=12, m=50, clip=4)
    card = load_card(folder / "privacy_card.json")
    status = {c.check: c.as_dict() for c in readback.mechanism_checks(readback.whitebox(folder), card)[0].checks}
    assert status["divisor"]["status"] != "fail", status["divisor"]
    other = dataclasses.replace(card, dataset_size=N + 40)  # its q N is 44; Opacus divided by int(N q) = 40
    status = {c.check: c.as_dict() for c in readback.mechanism_checks(readback.whitebox(folder), other)[0].checks}
    assert status["divisor"]["status"] == "fail" and f"N = {N}" in status["divisor"]["finding"], status["divisor"]
