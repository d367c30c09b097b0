"""Sharded DP training (trainers/fsdp.py, grad_sample_mode = "ghost_fsdp") on 2 gloo ranks standing in for 2 GPUs:
the update is the one-process update (per-example clipped sum over both ranks' records divided by B, checked
against a for-loop reference, an empty local batch included), the noise is added once with the one-process
standard deviation and never repeated across shards, the gathered checkpoint holds the trained weights, and what
it cannot train is refused in one line before any work."""

import json
import os
import socket
import subprocess
import sys

import pytest
import torch
from torch.utils.data import TensorDataset

from dpaudit.errors import DpauditError

C, B = 0.05, 6.0
V, T = 48, 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _llama(arch: str = "llama"):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if arch == "gpt2":
        return GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=16, n_layer=2, n_head=2, n_positions=T,
                                          tie_word_embeddings=False, bos_token_id=0, eos_token_id=1))
    return LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=T,
                                        tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, pad_token_id=1))


def _records(n: int, seed: int, zero: bool = False) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, V, (n, T), generator=g)
    tgt = torch.full_like(ids, -100) if zero else ids.clone()
    return TensorDataset(ids, torch.ones_like(ids), tgt)


# step 1: rank 0 has records 0-2, rank 1 records 3-4; step 2: rank 0 has 5-7, rank 1 none (an empty local batch)
STEPS = [((0, 3), (3, 5)), ((5, 8), (8, 8))]


def ranks(rank, world, port, run, jobs):
    """One spawned rank: the gloo process group once, then ``run(rank, *job)`` for each job (each builds its own
    model from its seed), the ranks meeting after each. Starting a rank costs more than these tests' runs."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    for job in jobs:
        run(rank, *job)
        torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def _one_run(rank, out, sigma, zero, arch, steps):
    from dpaudit.trainers import fsdp
    from dpaudit.trainers.units import RecordStep

    model = _llama(arch)
    data = _records(8, 1, zero)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    module, dp_opt, crit, _, sharded = fsdp.record_level(model, opt, data, sigma=sigma, clipping_norm=C,
                                                         expected_batch_size=int(B), sample_rate=0.5, seed=3)
    step = RecordStep(module, crit, None, placeholder=fsdp.placeholder(data))
    for parts in steps:
        a, b = parts[rank]
        dp_opt.zero_grad()
        step([t[a:b] for t in data.tensors])
        dp_opt.step()
    released = fsdp.release(sharded)
    if rank == 0:
        torch.save({k: v.detach().clone() for k, v in released.state_dict().items()}, f"{out}/released.pt")
        released.save_pretrained(f"{out}/ckpt")


# the sharded runs the tests read, all in one spawn of the 2 ranks: (sigma, zero targets, architecture, steps)
RUNS = {"update-llama": (0.0, False, "llama", STEPS), "noise": (2.0, True, "llama", STEPS[:1])}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fsdp")
    jobs = [(str(root / name), *RUNS[name]) for name in RUNS]
    for name in RUNS:
        (root / name).mkdir()
    torch.multiprocessing.spawn(ranks, args=(2, _free_port(), _one_run, jobs), nprocs=2, join=True)
    return {name: (root / name, torch.load(root / name / "released.pt", weights_only=True)) for name in RUNS}


@pytest.mark.parametrize("arch", ["llama"])
def test_sharded_update_is_the_per_example_clipped_sum_over_both_ranks(runs, arch):
    folder, got = runs[f"update-{arch}"]
    model = _llama(arch)
    data = _records(8, 1)
    params = dict(model.named_parameters())
    for parts in STEPS:  # for-loop reference: each record's gradient, clipped to C, summed, / B, SGD at lr 1
        idx = [i for a, b in parts for i in range(a, b)]
        acc = {n: torch.zeros_like(p) for n, p in params.items()}
        for i in idx:
            model.zero_grad()
            ids = data.tensors[0][i:i + 1]
            logits = model(input_ids=ids).logits
            torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:]).backward()
            norm = torch.sqrt(sum((p.grad ** 2).sum() for p in params.values()))
            for n, p in params.items():
                acc[n] += p.grad * min(1.0, C / (float(norm) + 1e-6))
        with torch.no_grad():
            for n, p in params.items():
                p -= acc[n] / B
    ref = model.state_dict()
    assert set(got) == set(ref)
    worst = max(float((got[k] - ref[k]).abs().max()) for k in ref)
    moved = max(float((got[k] - _llama(arch).state_dict()[k]).abs().max()) for k in ref)
    assert worst < 1e-6 and moved > 1e-3, (worst, moved)
    # the checkpoint rank 0 wrote is an ordinary unsharded model with those weights
    back = type(model).from_pretrained(folder / "ckpt")
    assert all(torch.equal(back.state_dict()[k], got[k]) for k in got)


def test_sharded_noise_is_added_once_and_never_repeated(runs):
    sigma = RUNS["noise"][0]
    _, got = runs["noise"]  # zero targets: zero gradients, the update is the noise
    init = _llama().state_dict()
    delta = torch.cat([(init[k] - got[k]).reshape(-1) for k in sorted(got)])
    std = float(delta.std())
    assert abs(std / (sigma * C / B) - 1) < 0.03, std  # noise on both ranks would give sqrt(2) x, none 0
    w = init["model.layers.0.mlp.up_proj.weight"] - got["model.layers.0.mlp.up_proj.weight"]  # (32, 16): dim 0 sharded
    half = w.size(0) // 2
    assert not torch.allclose(w[:half], w[half:])  # each rank's slice of one draw, not one draw per rank
    corr = torch.corrcoef(torch.stack([w[:half].reshape(-1), w[half:].reshape(-1)]))[0, 1]
    assert abs(float(corr)) < 0.2


def test_what_sharded_training_cannot_do_is_refused_in_one_line():
    from dpaudit.run import config
    from dpaudit.trainers import distributed, fsdp

    cfg = config.parse({"train": {"grad_sample_mode": "ghost_fsdp"}, "variants": [{"name": "dp", "target_epsilon": 3}]})
    with pytest.raises(DpauditError, match="run under torchrun --nproc_per_node N"):
        distributed.check_variants(cfg.variants)  # one process
    for train, why in [({"trainable": "lora"}, "trainable = 'lora' is not supported sharded"),
                       ({"gradient_canaries": 8}, "gradient_canary_coordinates = 'block'"),
                       ({"method": "lmo_dp"}, "only private record-level dp_adam")]:
        v = config.parse({"train": {"grad_sample_mode": "ghost_fsdp", **train},
                          "variants": [{"name": "dp", "target_epsilon": 3}]}).variants[0]
        with pytest.raises(DpauditError, match=why):
            distributed.check_fsdp_variant(v.name, v.trainer)
    with pytest.raises(DpauditError, match=r"cannot clip layer 'transformer.h.0.attn.c_attn' \(GPT-2's Conv1D\)"):
        fsdp.check_layers(_llama("gpt2"))  # its ghost norms under FSDP disagree with the for-loop reference: refused
    bn = _llama()
    bn.model.layers[0].mlp.act_fn = torch.nn.BatchNorm1d(32)
    with pytest.raises(DpauditError, match="Opacus cannot clip this model per sample"):
        fsdp.check_layers(bn)
    tied = _llama()
    tied.lm_head.weight = tied.model.embed_tokens.weight
    with pytest.raises(DpauditError, match="shares its weights"):
        fsdp.check_layers(tied)
    fsdp.check_layers(_llama())


@pytest.mark.slow
def test_dpaudit_run_sharded_writes_the_one_process_card(tmp_path):
    """`torchrun --nproc_per_node 2 -m dpaudit.cli run` with ghost_fsdp on a Llama-style model folder: the card of
    one process with 'ghost', a checkpoint that evaluates, and the probe's block canaries and checks as in one
    process."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from dpaudit.tasks import models

    tok = models.public_bpe_tokenizer(512)
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                 tie_word_embeddings=False, bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                                 pad_token_id=tok.eos_token_id)).save_pretrained(tmp_path / "llama")
    tok.save_pretrained(tmp_path / "llama")
    text = f"""
[task]
n_train = 64
n_test = 16
[model]
path = "{tmp_path / 'llama'}"
max_len = 32
[canaries]
m = 10
[train]
gradient_canaries = 200
gradient_canary_coordinates = "block"
grad_sample_mode = "MODE"
delta = 1e-5
epochs = 1
batch_size = 8
lr = 1e-3
[evaluate]
attacks = ["loss"]
n_references = 20
enumerate_limit = 0
[[variants]]
name = "dp"
target_epsilon = 4
"""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    (tmp_path / "one.toml").write_text(text.replace("MODE", "ghost"))
    (tmp_path / "two.toml").write_text(text.replace("MODE", "ghost_fsdp"))
    # the one-process reference trains only: the test compares its card and run record, and its report's checks are
    # the one-process probe's (tests/probe); the sharded run is evaluated in full
    one = subprocess.run([sys.executable, "-m", "dpaudit.cli", "run", str(tmp_path / "one.toml"), "--out",
                          str(tmp_path / "one"), "--quiet", "--train-only"], env=env, capture_output=True, text=True,
                         timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          "-m", "dpaudit.cli", "run", str(tmp_path / "two.toml"), "--out", str(tmp_path / "two"),
                          "--quiet"], env=env, capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    ra, rb = (json.loads((tmp_path / d / "dp" / "checkpoint" / "run.json").read_text())["train_result"]
              for d in ("one", "two"))
    assert ra["events"] == rb["events"] and ra["epsilon"] == rb["epsilon"] and ra["steps"] == rb["steps"]
    a, b = (json.loads((tmp_path / d / "dp" / "checkpoint" / "privacy_card.json").read_text()) for d in ("one", "two"))
    for c in (a, b):  # each run's white-box record is its own (its run identity; grad_sample_mode differs)
        assert len(c["extra"].pop("probe_runs")) == 1
    assert {k: v for k, v in a.items() if k != "training"} == {k: v for k, v in b.items() if k != "training"}
    assert (tmp_path / "two" / "dp" / "report" / "report.json").exists()
    # the white-box probe rode along sharded, as in one process: every check it can test passes
    rep = json.loads((tmp_path / "two" / "dp" / "report" / "report.json").read_text())
    (entry,) = rep["mechanism_checks"]
    statuses = {c["check"]: c["status"] for c in entry["checks"]}
    assert {k for k, v in statuses.items() if v != "pass"} <= {"coverage", "divisor"}, statuses  # sharded
    assert statuses["weights"] == "pass"  # rank 0's gathered model, the one the checkpoint holds
    assert "whitebox_gradient" in rep["attacks"]
    assert entry["optimizer"] == "FSDPOptimizerFastGradientClipping" and entry["coordinates"] == "block"
