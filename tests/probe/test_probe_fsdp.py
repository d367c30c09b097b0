"""The probe on an FSDP run (Opacus' FSDPOptimizerFastGradientClipping through dpaudit's trainers/fsdp.py, a tiny
Llama sharded over 2 gloo ranks standing in for 2 GPUs): attached in one line on every rank, the record saved by
rank 0. An honest run passes every check it can test; the canaries read as in one process (without noise, each
sampled inserted canary comes out at exactly one unit). Half the noise, or noise left out on the other rank's
shards, failing ``noise``: the conformance suite's ``fsdp`` rows (tests/probe/test_probe_conformance.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dpaudit.accounting import SubsampledGaussian, compute
from dpaudit.claim.card import Claim, PrivacyCard
from tests.probe.test_probe import _checks
from tests.trainers.test_fsdp import _free_port, _llama, _records, ranks

N, Q, C, SIGMA = 96, 0.125, 0.5, 1.0
B = Q * N


def _one_run(rank, out, steps, sigma):
    from dpaudit import api
    from dpaudit.trainers import fsdp
    from dpaudit.trainers.units import RecordStep

    data = _records(N, 1)
    module, dp_opt, crit, loader, _ = _make(data, sigma)
    probe = api.attach_probe(dp_opt, sample_rate=Q, m=200, seed=0, model=module, dataset_size=N, on_fail=None)
    step = RecordStep(module, crit, None, placeholder=fsdp.placeholder(data))
    done = 0
    while done < steps:
        for batch in loader:
            if done == steps:
                break
            dp_opt.zero_grad()
            step(batch)
            dp_opt.step()
            done += 1
    # the full state dict, gathered on every rank as a user saves an FSDP model; rank 0 saves it and gives it to
    # the probe (the honest run), or gives nothing (the no-noise run: its weights check is "not tested")
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    full = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in full.items()}, f"{out}/model.safetensors")
        probe.save(out, **({"weights": full} if sigma > 0 else {}))
        json.dump({"records": probe.records, "steps": probe.steps}, open(f"{out}/seen.json", "w"))


def _make(data, sigma):
    from dpaudit.trainers import fsdp

    model = _llama()
    return fsdp.record_level(model, torch.optim.SGD(model.parameters(), lr=0.1), data, sigma=sigma, clipping_norm=C,
                             expected_batch_size=int(B), sample_rate=Q, seed=3)


RUNS = {"honest": (48, SIGMA), "no-noise": (12, 0.0)}  # (steps, sigma)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both runs in one spawn of the 2 ranks (tests/trainers/test_fsdp.ranks)."""
    root = tmp_path_factory.mktemp("fsdp-probe")
    folders = {name: root / name for name in RUNS}
    for f in folders.values():
        f.mkdir()
    jobs = [(str(folders[name]), *RUNS[name]) for name in RUNS]
    torch.multiprocessing.spawn(ranks, args=(2, _free_port(), _one_run, jobs), nprocs=2, join=True)
    for name, (steps, sigma) in RUNS.items():
        if sigma > 0:
            event = SubsampledGaussian(Q, sigma, steps, "poisson")
            PrivacyCard(claim=Claim(epsilon=compute([event], 1e-5, "prv").epsilon, delta=1e-5), events=[event],
                        clipping_norm=C, expected_batch_size=B, dataset_size=N,
                        method="fsdp").save(folders[name] / "privacy_card.json")
    return folders


@pytest.mark.slow
def test_an_honest_fsdp_run_passes_every_check_it_tests(runs):
    folder = runs["honest"]
    checks, entry = _checks(folder)
    assert entry["optimizer"] == "FSDPOptimizerFastGradientClipping" and entry["mode"] == "ghost"
    assert {k: c["status"] for k, c in checks.items()} == {
        **dict.fromkeys(("noise", "sampling", "clipping", "steps", "divisor", "weights"), "pass"),
        "coverage": "not tested"}, checks  # weights: rank 0's full state dict, given at save
    assert "the loop gave at save" in checks["weights"]["finding"]
    # not given: each rank holds shards, so the record says how to give them
    w = json.loads((runs["no-noise"] / "gradient_canaries.json").read_text())["probe"]["weights"]
    assert "under FSDP" in w["not_recorded"] and "full_state_dict=True" in w["not_recorded"]
    assert checks["noise"]["values"]["rms"] == pytest.approx(1.0, rel=0.1)  # the block: rank 0's noise, x W
    seen = json.loads((folder / "seen.json").read_text())
    assert seen["steps"] == 48 and sum(seen["records"]) > 0.5 * Q * N * 48  # both ranks' records counted


@pytest.mark.slow
def test_without_noise_each_sampled_canary_comes_out_at_one_unit_as_in_one_process(runs, tmp_path):
    folder = runs["no-noise"]
    rec = json.loads((folder / "gradient_canaries.json").read_text())
    steps = np.load(folder / rec["steps_file"])
    signs = np.asarray(rec["signs"])
    # inserted canaries: 1 at the steps they were sampled, 0 otherwise; held-out ones 0 (no noise on the block)
    assert np.allclose(steps[:, signs < 0], 0.0, atol=1e-5)
    ins = steps[:, signs > 0]
    assert np.allclose(ins[np.abs(ins) > 0.5], 1.0, atol=1e-4) and (np.abs(ins) > 0.5).sum() > 0
    assert np.allclose(ins.sum(0), np.asarray(rec["times_sampled"])[signs > 0], atol=1e-4)
    # record for record what one process records of the same mechanism (the same q, m, seed and steps, no noise):
    # the same canaries, signs, sampled steps and per-step projections, in the same format
    one = _one_process(tmp_path, steps=12)
    ref = json.loads((one / "gradient_canaries.json").read_text())
    assert ref["signs"] == rec["signs"] and ref["times_sampled"] == rec["times_sampled"]
    assert np.allclose(np.load(one / ref["steps_file"]), steps, atol=1e-4)
    assert set(ref) == set(rec) and set(ref["probe"]) == set(rec["probe"])
    same = ("kind", "m", "seed", "clipping_norm", "sample_rate", "steps")
    assert {k: rec[k] for k in same} == {k: ref[k] for k in same}
    assert np.allclose(rec["scores"], ref["scores"], atol=1e-4)


def _one_process(tmp_path, steps):
    """One process, Opacus' ghost clipping, no noise, the probe as the FSDP ranks attach it (q, m, seed, C)."""
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    from dpaudit import api

    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3)
    data = TensorDataset(torch.randn(N, 6), torch.randint(0, 3, (N,)))
    model, opt, crit, loader = PrivacyEngine(accountant="prv").make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), data_loader=DataLoader(data, batch_size=int(B)),
        noise_multiplier=0.0, max_grad_norm=C, poisson_sampling=True, grad_sample_mode="ghost",
        criterion=torch.nn.CrossEntropyLoss())
    assert loader.sample_rate == Q
    probe = api.attach_probe(opt, sample_rate=Q, m=200, seed=0, model=model, dataset_size=N, on_fail=None)
    done = 0
    while done < steps:
        for x, y in loader:
            if done == steps:
                break
            opt.zero_grad()
            crit(model(x), y).backward()
            opt.step()
            done += 1
    out = tmp_path / "one-process"
    out.mkdir()
    probe.save(out)
    return out


def test_under_fsdp_the_probe_asks_for_the_ghost_module_in_one_line():
    """Records are counted from the ghost-clipping module's per-sample norms: without it, a one-line refusal naming
    the fix, before any step (a plain module has no norms to read)."""
    from dpaudit.errors import DpauditError
    from dpaudit.probe import sharded

    for model in (None, torch.nn.Linear(2, 2)):
        with pytest.raises(DpauditError, match="pass model=") as e:
            sharded.check_model(model)
        assert "\n" not in str(e.value)
    assert sharded.rows(torch.nn.Linear(2, 2)) == 0  # no norms read yet: no records


def test_the_committed_fsdp_bound_is_its_json_and_meets_the_target():
    """reports/probe_fsdp (experiments/fsdp_whitebox.py): the honest FSDP runs' median bound is >= 90% of the card
    mechanism's median limit, and each FSDP record is one process's of the same config and seed."""
    from pathlib import Path
    from statistics import median

    root = Path(__file__).resolve().parents[2] / "reports" / "probe_fsdp"
    got = json.loads((root / "results.json").read_text())
    fsdp = [r for k, r in got["rows"].items() if k.startswith("fsdp-2-ranks")]
    assert len(fsdp) >= 5 and all(r["optimizer"] == "FSDPOptimizerFastGradientClipping" for r in fsdp)
    share = median(r["bound"] / r["limit"] for r in fsdp)
    assert share >= 0.9 and f"FSDP on 2 ranks **{share:.0%}**" in (root / "README.md").read_text()
    assert all(r["same_record"]["signs"] and r["same_record"]["times_sampled"]
               and r["same_record"]["max_projection_difference"] < 1e-4 for r in fsdp)
    assert all(set(r["checks"].values()) <= {"pass", "not tested"} for r in got["rows"].values())
