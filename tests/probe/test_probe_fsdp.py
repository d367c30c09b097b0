"""The probe on an FSDP run (Opacus' FSDPOptimizerFastGradientClipping through dpaudit's trainers/fsdp.py, a tiny
Llama sharded over 2 gloo ranks standing in for 2 GPUs): attached in one line on every rank, the record saved by
rank 0. An honest run passes every check it can test; the canaries read as in one process (without noise, each
sampled inserted canary comes out at exactly one unit). Half the noise, or noise left out on the other rank's
shards, failing ``noise``: the conformance suite's ``fsdp`` rows (tests/probe/test_probe_conformance.py)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from dpaudit.accounting import SubsampledGaussian, compute
from dpaudit.claim.card import Claim, PrivacyCard
from tests.probe.test_probe import _checks
from tests.trainers.test_fsdp import _free_port, _llama, _records

N, Q, C, SIGMA = 96, 0.125, 0.5, 1.0
B = Q * N


def _worker(rank, world, port, out, bug, steps, sigma):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    from dpaudit import api
    from dpaudit.trainers import fsdp
    from dpaudit.trainers.units import RecordStep

    data = _records(N, 1)
    module, dp_opt, crit, loader, _ = _make(data, sigma)
    probe = api.attach_probe(dp_opt, sample_rate=Q, m=200, seed=0, model=module, dataset_size=N, on_fail=None)
    if bug == "half-noise":  # the optimizer adds half the noise the card (and the probe, when it attached) states
        dp_opt.noise_multiplier = sigma / 2
    if bug == "no-noise-other-ranks" and rank != 0:  # only rank 0's shards get their noise
        dp_opt.noise_multiplier = 0.0
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
    if rank == 0:
        probe.save(out)
        json.dump({"records": probe.records, "steps": probe.steps}, open(f"{out}/seen.json", "w"))
    torch.distributed.destroy_process_group()


def _make(data, sigma):
    from dpaudit.trainers import fsdp

    model = _llama()
    return fsdp.record_level(model, torch.optim.SGD(model.parameters(), lr=0.1), data, sigma=sigma, clipping_norm=C,
                             expected_batch_size=int(B), sample_rate=Q, seed=3)


def _run(tmp_path, bug=None, steps=48, sigma=SIGMA):
    out = tmp_path / f"fsdp-{bug}-{sigma}"
    out.mkdir()
    torch.multiprocessing.spawn(_worker, args=(2, _free_port(), str(out), bug, steps, sigma), nprocs=2, join=True)
    if sigma > 0:
        event = SubsampledGaussian(Q, sigma, steps, "poisson")
        PrivacyCard(claim=Claim(epsilon=compute([event], 1e-5, "prv").epsilon, delta=1e-5), events=[event],
                    clipping_norm=C, expected_batch_size=B, dataset_size=N, method="fsdp").save(out / "privacy_card.json")
    return out


@pytest.mark.slow
def test_an_honest_fsdp_run_passes_every_check_it_tests(tmp_path):
    folder = _run(tmp_path)
    checks, entry = _checks(folder)
    assert entry["optimizer"] == "FSDPOptimizerFastGradientClipping" and entry["mode"] == "ghost"
    assert {k: c["status"] for k, c in checks.items()} == {
        **dict.fromkeys(("noise", "sampling", "clipping", "steps", "divisor"), "pass"), "coverage": "not tested"}, checks
    assert checks["noise"]["values"]["rms"] == pytest.approx(1.0, rel=0.1)  # the block: rank 0's noise, x W
    seen = json.loads((folder / "seen.json").read_text())
    assert seen["steps"] == 48 and sum(seen["records"]) > 0.5 * Q * N * 48  # both ranks' records counted


@pytest.mark.slow
def test_without_noise_each_sampled_canary_comes_out_at_one_unit(tmp_path):
    folder = _run(tmp_path, steps=12, sigma=0.0)
    rec = json.loads((folder / "gradient_canaries.json").read_text())
    steps = np.load(folder / rec["steps_file"])
    signs = np.asarray(rec["signs"])
    # inserted canaries: 1 at the steps they were sampled, 0 otherwise; held-out ones 0 (no noise on the block)
    assert np.allclose(steps[:, signs < 0], 0.0, atol=1e-5)
    ins = steps[:, signs > 0]
    assert np.allclose(ins[np.abs(ins) > 0.5], 1.0, atol=1e-4) and (np.abs(ins) > 0.5).sum() > 0
    assert np.allclose(ins.sum(0), np.asarray(rec["times_sampled"])[signs > 0], atol=1e-4)


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
