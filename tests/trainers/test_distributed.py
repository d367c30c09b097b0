"""Data-parallel DP under torchrun, on 2 gloo ranks standing in for 2 GPUs: the noise of the summed update is one
process's (added once, not once per rank), the ranks' Poisson draws are independent and together one Poisson
sample of the data, and `dpaudit run` under torchrun writes the card a single process writes."""

import json
import os
import socket
import subprocess
import sys

import pytest
import torch

from tests.trainers.test_resume import RUN


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SIGMA, C, B = 1.3, 0.5, 8.0


def _noise_worker(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    from torch.utils.data import TensorDataset

    from dpaudit.trainers import distributed

    model = torch.nn.Linear(400, 250, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    data = TensorDataset(torch.zeros(64, 400))  # zero inputs: zero per-sample gradients, the update is the noise
    module, dp_opt, _, loader = distributed.record_level(model, opt, data, sigma=SIGMA, clipping_norm=C,
                                                         expected_batch_size=int(B), sample_rate=B / 64,
                                                         grad_sample_mode="hooks", seed=0)
    before = model.weight.detach().clone()  # after DPDDP's broadcast of rank 0's weights
    x = data.tensors[0][:3]
    dp_opt.zero_grad()
    module(x).sum().backward()
    dp_opt.step()
    delta = (before - model.weight.detach()).reshape(-1)
    masks = [next(iter(loader.batch_sampler)) for _ in range(200)]  # this rank's Poisson draws
    torch.save({"delta": delta, "n_local": len(loader.dataset), "masks": masks}, f"{out}/rank{rank}.pt")
    torch.distributed.destroy_process_group()


def test_noise_is_added_once_per_logical_batch_across_ranks(tmp_path):
    torch.multiprocessing.spawn(_noise_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1))
    assert torch.equal(r0["delta"], r1["delta"])  # one update, the same on every rank
    std = float(r0["delta"].std())
    expected = SIGMA * C / B  # one process: N(0, sigma^2 C^2) on the sum, divided by B
    assert abs(std / expected - 1) < 0.02, (std, expected)  # noise on both ranks would give sqrt(2) x
    # each rank samples its own shard (32 records each) with its own stream: independent draws, rate q each
    assert r0["n_local"] == r1["n_local"] == 32
    same = sum(a == b for a, b in zip(r0["masks"], r1["masks"]))
    assert same < 20  # one seed on both ranks would make every pair identical
    sizes = [len(m) for m in r0["masks"] + r1["masks"]]
    assert abs(sum(sizes) / len(sizes) - 32 * B / 64) < 0.5  # expected local batch q * N / W = 4
    assert min(sizes) == 0 or len(sizes) == 400  # empty local batches are yielded, not skipped


@pytest.mark.slow
def test_dpaudit_run_under_torchrun_writes_the_single_process_card(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(RUN)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one = subprocess.run([sys.executable, "-m", "dpaudit.cli", "run", str(cfg), "--out", str(tmp_path / "one"),
                          "--quiet", "--train-only"], env=env, capture_output=True, text=True, timeout=600)  # its card
    assert one.returncode == 0, one.stderr
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          "-m", "dpaudit.cli", "run", str(cfg), "--out", str(tmp_path / "two"), "--quiet"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = (json.loads((tmp_path / d / "dp" / "checkpoint" / "privacy_card.json").read_text()) for d in ("one", "two"))
    assert a == b
    ra, rb = (json.loads((tmp_path / d / "dp" / "checkpoint" / "run.json").read_text())["train_result"]
              for d in ("one", "two"))
    assert ra["events"] == rb["events"] and ra["epsilon"] == rb["epsilon"] and ra["steps"] == rb["steps"]
    assert (tmp_path / "two" / "dp" / "report" / "report.json").exists()
    assert len(json.loads((tmp_path / "two" / "dp" / "checkpoint" / "gradient_canaries.json").read_text())["scores"]) == 16
