"""A hand-written DP-SGD loop (per-sample gradients with ``torch.func``, as in PyTorch's per-sample-gradients
tutorial; no Opacus optimizer) audited by dpaudit's functional probe: two calls around the noise.

    python examples/dp_sgd_torch_func.py --out out/torch-func                  # about 30 s on 2 CPU cores
    dpaudit evaluate out/torch-func/model --out out/torch-func/report          # the same audit from the CLI
    dpaudit check out/torch-func/report/report.json                            # the CI gate

The loop samples each record with probability q (Poisson), computes every record's gradient with
``vmap(grad(loss))``, clips each to norm C, sums them, adds N(0, sigma^2 C^2) and divides by the expected batch
size B = q N. The probe goes in two places (docs/probe.md "Any loop"):

    clipped_sum = probe.add_canaries(clipped_sum, records=b)     # before the noise: b records in this batch
    update = [(s + noise) / B for s, noise in ...]                # the mechanism, unchanged
    probe.observe(update)                                         # after it: what the optimizer applies

``--bug`` plants a bug in the hand-written mechanism (the card is written as if it were not there):
``half-noise``, ``no-clip`` (per-sample clipping left out), ``divisor`` (the noisy sum divided by the actual batch
size), ``noise-some-tensors`` (no noise on the bias tensors). Each makes ``dpaudit check`` exit 1 with a FAIL line
naming the mechanism check it broke. The text canaries, data and tiny GPT-2 are those of
examples/audit_external_opacus.py (the four steps of an external audit are the same).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from datasets import Dataset
from torch.func import functional_call, grad, vmap
from transformers import GPT2LMHeadModel

from dpaudit import accounting, api
from dpaudit.accounting import SubsampledGaussian
from dpaudit.claim.card import Claim, PrivacyCard
from dpaudit.tasks.models import public_bpe_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from audit_external_opacus import audit, public_texts, tiny_gpt2  # noqa: E402  (the same data, model and step 4)

BUGS = ("none", "half-noise", "no-clip", "divisor", "noise-some-tensors")


def record_loss(model, params, buffers, ids, mask):
    """One record's mean next-token loss, as a function of the parameters (what torch.func differentiates). The
    attention mask is all ones, made inside the function: the padding is on the right, so causal attention never
    lets a real token see it (the loss leaves it out), and transformers branches on a mask's values, which vmap
    cannot trace through a per-record mask."""
    ids, mask = ids.unsqueeze(0), mask.unsqueeze(0)
    pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
    ones = torch.ones(ids.shape, dtype=torch.long, device=ids.device)
    logits = functional_call(model, (params, buffers), (ids,), {"attention_mask": ones, "position_ids": pos}).logits
    tok = F.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="none")
    m = mask[0, 1:].to(tok.dtype)
    return (tok * m).sum() / m.sum().clamp(min=1)


def dp_step(per_sample: dict, C: float, sigma: float, B: float, probe, bug: str, gen) -> dict:
    """Clip every record's gradient to C, sum, (probe) add the canaries, add Gaussian noise, divide by B."""
    names = list(per_sample)
    b = next(iter(per_sample.values())).shape[0]
    norms = torch.stack([g.reshape(b, -1).norm(dim=1) for g in per_sample.values()]).norm(dim=0)
    factor = torch.ones_like(norms) if bug == "no-clip" else (C / (norms + 1e-6)).clamp(max=1.0)
    clipped_sum = {n: torch.einsum("i,i...->...", factor, per_sample[n]) for n in names}
    if probe is not None:
        clipped_sum = probe.add_canaries(clipped_sum, records=b)
    std = sigma * C / (2 if bug == "half-noise" else 1)
    divisor = max(b, 1) if bug == "divisor" else B
    update = {}
    for n in names:
        noise = torch.normal(0.0, std, clipped_sum[n].shape, generator=gen, device=clipped_sum[n].device)
        if bug == "noise-some-tensors" and n.endswith(".bias"):
            noise = torch.zeros_like(noise)
        update[n] = (clipped_sum[n] + noise) / divisor
    if probe is not None:
        probe.observe(update)
    return update


def train(args):
    """Canaries, the hand-written DP-SGD loop with the probe, the card and the probe's records; returns
    (model, tokenizer, card, manifest, model folder)."""
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    manifest = api.new_canaries(m=args.canaries, repetitions=1, seed=args.seed, length=args.secret_length,
                                n_references=args.references)
    model_dir = args.out / "model"
    model_dir.mkdir(exist_ok=True)
    manifest.save(model_dir / "canaries.json")
    texts = api.insert_canaries(Dataset.from_dict({"text": public_texts(args.records, args.seed)}), manifest,
                                column="text", seed=args.seed)["text"]
    tok = public_bpe_tokenizer(512)
    enc = tok(list(texts), padding="max_length", truncation=True, max_length=24, return_tensors="pt")
    ids_all, mask_all = enc["input_ids"].to(device), enc["attention_mask"].to(device)
    N = len(texts)
    # eager attention: vmap has no batching rule for the fused SDPA kernels (it would fall back, slowly, with warnings)
    model = GPT2LMHeadModel._from_config(tiny_gpt2(tok, args.width), attn_implementation="eager").to(device)
    params = {n: p.detach() for n, p in model.named_parameters()}
    buffers = {n: b.detach() for n, b in model.named_buffers()}
    q = args.batch_size / N
    steps = args.epochs * round(1 / q)
    sigma = accounting.calibrate_sigma(args.epsilon, args.delta, q, steps) if args.sigma is None else args.sigma
    B, C = q * N, args.clipping_norm
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    per_sample_grads = vmap(grad(lambda p, b_, i, m_: record_loss(model, p, b_, i, m_)), in_dims=(None, None, 0, 0))
    probe = api.functional_probe({n: p.shape for n, p in params.items()}, sample_rate=q, clipping_norm=C,
                                 noise_multiplier=sigma, expected_batch_size=B, m=args.probe_canaries,
                                 seed=args.seed, dataset_size=N) if args.probe else None
    gen = torch.Generator(device=device).manual_seed(args.seed + 1)
    sampler = torch.Generator().manual_seed(args.seed + 2)
    for step in range(steps):
        batch = torch.nonzero(torch.rand(N, generator=sampler) < q).flatten().to(device)  # Poisson sampling
        if batch.numel():
            g = per_sample_grads(params, buffers, ids_all[batch], mask_all[batch])
        else:  # an empty batch is still a noisy step
            g = {n: torch.zeros((0, *p.shape), device=device) for n, p in params.items()}
        update = dp_step(g, C, sigma, B, probe, args.bug, gen)
        for n, p in model.named_parameters():
            p.grad = update[n]
        optimizer.step()
        if (step + 1) % max(steps // 4, 1) == 0:
            online = "" if probe is None else ", probe: " + ", ".join(f"{c} {v['status']}"
                                                                      for c, v in probe.status().items())
            print(f"step {step + 1}/{steps}{online}", flush=True)
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    event = SubsampledGaussian(q, sigma, steps, "poisson")
    eps = accounting.compute([event], args.delta, "prv").epsilon
    card = PrivacyCard(claim=Claim(epsilon=eps, delta=args.delta, accountant="prv"), events=[event],
                       clipping_norm=C, expected_batch_size=B, dataset_size=N, method="dp-sgd-torch-func")
    if probe is not None:
        card = probe.bind(card)  # the card names the probe's run: its records are this run's (docs/security.md)
    card.save(model_dir / "privacy_card.json")
    if probe is not None:
        probe.save(model_dir, weights=params)  # the final weights (views of the model's): the record is tied to them
    return model, tok, card, manifest, model_dir


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="Folder for the model, its card, canaries and report.")
    ap.add_argument("--epsilon", type=float, default=1.0, help="Target epsilon (sets sigma unless --sigma is given).")
    ap.add_argument("--sigma", type=float, default=None, help="Noise multiplier; default: the one for --epsilon.")
    ap.add_argument("--delta", type=float, default=1e-5, help="Target delta.")
    ap.add_argument("--clipping-norm", type=float, default=1.0, help="Per-record clipping norm C.")
    ap.add_argument("--canaries", type=int, default=200, help="Text canaries m (about m/2 inserted).")
    ap.add_argument("--secret-length", type=int, default=6, help="Digits per canary secret (10^L possible secrets).")
    ap.add_argument("--records", type=int, default=600, help="Public training records besides the canaries.")
    ap.add_argument("--batch-size", type=int, default=96, help="Expected batch size B = q N.")
    ap.add_argument("--epochs", type=int, default=6, help="Epochs: steps = epochs x N / B.")
    ap.add_argument("--lr", type=float, default=0.5, help="SGD learning rate.")
    ap.add_argument("--width", type=int, default=64, help="Embedding width of the tiny GPT-2.")
    ap.add_argument("--probe-canaries", type=int, default=1000, help="White-box gradient canaries of the probe.")
    ap.add_argument("--no-probe", dest="probe", action="store_false", help="Train without the probe.")
    ap.add_argument("--bug", default="none", choices=BUGS, help="Plant one bug in the mechanism (see above).")
    ap.add_argument("--references", type=int, default=2000, help="Reference secrets ranking each canary's exposure.")
    ap.add_argument("--seed", type=int, default=0, help="Seed of the data, canaries, probe, noise and initialisation.")
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    t0 = time.time()
    model, tok, card, manifest, model_dir = train(args)
    audit(model, tok, card, manifest, model_dir if args.probe else None, args.out / "report", t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
