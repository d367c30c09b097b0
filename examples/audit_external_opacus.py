"""Audit a model you trained yourself with plain transformers + Opacus (no dpaudit trainer).

    python examples/audit_external_opacus.py --out out/external --insecure-rng   # about 40 s on 2 CPU cores
    dpaudit evaluate out/external/model --out out/external/report                # the same audit from the CLI
    dpaudit check out/external/report/report.json                                # the CI gate

The four steps every external audit takes:

1. before training, make the canaries (the audit plan is fixed now) and shuffle the inserted ones into the
   training data;
2. train as usual (here: a tiny GPT-2 with Opacus' PrivacyEngine, Poisson sampling), with dpaudit's probe
   attached to the DP optimizer in one line: white-box gradient canaries and readings of the mechanism that ran;
3. after training, write the privacy card from what the PrivacyEngine did, and the probe's records, beside the
   saved model;
4. run ``dpaudit evaluate`` on the folder (or ``dpaudit.api.evaluate`` on the objects).

``--bug`` plants one of the bugs the field keeps finding in DP training code, to show what the probe catches
(docs/probe.md): ``half-noise`` (half the noise the card states), ``no-clip`` (per-sample clipping bypassed),
``wrong-rate`` (Opacus' loader samples at 1 / ceil(N / B), the card says B / N), ``accumulation`` (four
micro-batches per noisy step, the card counting each as a step: four times the records per step) and ``divisor`` (the noisy sum divided by the
actual batch size instead of the expected one). Each makes ``dpaudit check`` exit 1 with a FAIL line naming it.

The training data here is synthetic public text, so that the example needs nothing but what dpaudit
installs; replace it with yours. Noise is drawn with Opacus' secure RNG unless ``--insecure-rng`` is given;
Opacus needs torchcsprng for it, which has no wheel for torch 2.13: on such a machine pass ``--insecure-rng``
and do not release the model.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from datasets import Dataset
from opacus import PrivacyEngine
from torch.utils.data import DataLoader
from transformers import GPT2Config, GPT2LMHeadModel

from dpaudit import api
from dpaudit.tasks.models import public_bpe_tokenizer

WORDS = ("river", "market", "window", "garden", "engine", "letter", "summer", "silver", "forest", "island",
         "yellow", "quiet", "morning", "bridge", "paper", "stone", "harbour", "winter", "candle", "orchard")
BUGS = ("none", "half-noise", "no-clip", "wrong-rate", "accumulation", "divisor")
MICRO = 4  # micro-batches per noisy step under --bug accumulation


def public_texts(n: int, seed: int) -> list[str]:
    """Stand-in for your training data: short sentences of common words."""
    rng = random.Random(seed)
    return [f"The {rng.choice(WORDS)} near the {rng.choice(WORDS)} was {rng.choice(WORDS)} today." for _ in range(n)]


def per_sequence_loss(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean next-token loss of each sequence (one value per record: what Opacus clips per sample). Position ids
    are passed per sequence: GPT-2's default broadcast ones give Opacus a batch of one for the position table."""
    pos = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, :-1]
    tok_loss = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    m = mask[:, 1:].to(tok_loss.dtype)
    return (tok_loss * m).sum(1) / m.sum(1).clamp(min=1)


def tiny_gpt2(tok, width: int) -> GPT2Config:
    """A two-layer GPT-2 over the tokenizer's vocabulary (no dropout: the per-step updates are the mechanism's)."""
    return GPT2Config(vocab_size=len(tok), n_positions=32, n_embd=width, n_layer=2, n_head=2,
                      tie_word_embeddings=False, bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.eos_token_id, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def plant_bug(optimizer, bug: str) -> None:
    """The optimizer-side bugs, as a team's own DP code might have them (the card is written as if they were not)."""
    from dpaudit import opacus_private as op

    if bug == "half-noise":  # e.g. a hand-written noise step that uses sigma / 2 while the card says sigma
        def add_noise():
            for p in optimizer.params:
                op.check_processed(p.summed_grad)
                noise = op.generate_noise(std=optimizer.noise_multiplier * optimizer.max_grad_norm / 2,
                                        reference=p.summed_grad, generator=optimizer.generator)
                p.grad = (p.summed_grad + noise).view_as(p)
                op.mark_processed(p.summed_grad)
        optimizer.add_noise = add_noise
    elif bug == "no-clip":  # per-sample gradients summed without their clip factor (cf. Opacus PR #664)
        def clip_and_accumulate():
            for p in optimizer.params:
                op.check_processed(p.grad_sample)
                g = optimizer._get_flat_grad_sample(p).sum(0)
                p.summed_grad = g if p.summed_grad is None else p.summed_grad + g
                op.mark_processed(p.grad_sample)
        optimizer.clip_and_accumulate = clip_and_accumulate
    elif bug == "divisor":  # the noisy sum divided by the records actually in the batch, not the expected B
        rows = {"n": 0}
        acc = optimizer.clip_and_accumulate

        def counting():
            rows["n"] += len(optimizer._get_flat_grad_sample(optimizer.params[0]))
            acc()

        def scale_grad():
            for p in optimizer.params:
                p.grad /= max(rows["n"], 1)
            rows["n"] = 0
        optimizer.clip_and_accumulate = counting
        optimizer.scale_grad = scale_grad


def stated_card(card, bug: str, q_stated: float, micro_steps: int):
    """The card as the team writes it: for the sampling bugs it states the rate (and steps) they believe in, with
    epsilon re-accounted for that statement (the card is self-consistent, the code that ran is not)."""
    from dpaudit import accounting
    from dpaudit.accounting import SubsampledGaussian

    if bug not in ("wrong-rate", "accumulation"):
        return card
    e = card.events[-1]
    steps = micro_steps if bug == "accumulation" else sum(x.steps for x in card.events)
    event = SubsampledGaussian(q_stated, e.noise_multiplier, steps, e.sampler)
    eps = accounting.compute([event], card.claim.delta, "prv").epsilon
    return dataclasses.replace(card, events=[event], claim=dataclasses.replace(card.claim, epsilon=eps),
                               expected_batch_size=q_stated * card.dataset_size)


def train(args) -> tuple:
    """Steps 1-3; returns (the plain model, tokenizer, card, manifest, model folder)."""
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)

    # 1. canaries before training, inserted into the data
    manifest = api.new_canaries(m=args.canaries, repetitions=1, seed=args.seed, length=args.secret_length,
                                n_references=args.references)
    model_dir = args.out / "model"
    model_dir.mkdir(exist_ok=True)
    manifest.save(model_dir / "canaries.json")
    train_ds = api.insert_canaries(Dataset.from_dict({"text": public_texts(args.records, args.seed)}), manifest,
                                   column="text", seed=args.seed)

    # 2. train with Opacus (Poisson sampling through DPDataLoader), the probe on its optimizer
    tok = public_bpe_tokenizer(512)
    enc = tok(list(train_ds["text"]), padding="max_length", truncation=True, max_length=24, return_tensors="pt")
    data = torch.utils.data.TensorDataset(enc["input_ids"], enc["attention_mask"])
    model = GPT2LMHeadModel(tiny_gpt2(tok, args.width)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    engine = PrivacyEngine(accountant="prv", secure_mode=not args.insecure_rng)
    model, optimizer, loader = engine.make_private_with_epsilon(
        module=model, optimizer=optimizer, data_loader=DataLoader(data, batch_size=args.batch_size, shuffle=True),
        target_epsilon=args.epsilon, target_delta=args.delta, epochs=args.epochs, max_grad_norm=1.0)
    plant_bug(optimizer, args.bug)
    # the rate the card will state: what the loader does, or (--bug wrong-rate) what the team believes, B / N
    q = args.batch_size / len(data) if args.bug == "wrong-rate" else loader.sample_rate
    # model=: the probe also checks that nothing outside the DP optimizer moves; dataset_size=: the batch sizes are
    # tested while training runs (probe.status(); on_fail="raise" stops the loop at the first failed check)
    probe = api.attach_probe(optimizer, sample_rate=q, m=args.probe_canaries, seed=args.seed, model=model,
                             dataset_size=len(data)) if args.probe else None
    model.train()
    micro = MICRO if args.bug == "accumulation" else 1
    batches = 0
    for epoch in range(args.epochs):
        for ids, mask in loader:
            if len(ids) == 0:
                continue
            optimizer.zero_grad()  # after a skipped step Opacus keeps the accumulated clipped sum
            per_sequence_loss(model, ids.to(device), mask.to(device)).mean().backward()
            batches += 1
            if batches % micro:
                optimizer.signal_skip_step(True)  # accumulate: clip and sum, no noise, no step
            optimizer.step()
        online = "" if probe is None else ", probe: " + ", ".join(f"{c} {v['status']}" for c, v in probe.status().items())
        print(f"epoch {epoch + 1}/{args.epochs}: epsilon so far {engine.get_epsilon(args.delta):.3f}{online}", flush=True)

    # 3. save the model, its card (from what the engine did) and the probe's records beside it
    plain = model._module  # the model under Opacus' GradSampleModule
    plain.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    card = api.card_from_opacus(engine, loader, optimizer, delta=args.delta, method="opacus-dp-adam")
    card = stated_card(card, args.bug, q, batches)
    card.save(model_dir / "privacy_card.json")
    if probe is not None:
        probe.save(model_dir)
    return plain, tok, card, manifest, model_dir


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="Folder for the model, its card, canaries and report.")
    ap.add_argument("--epsilon", type=float, default=1.0, help="Target epsilon of DP training.")
    ap.add_argument("--delta", type=float, default=1e-5, help="Target delta.")
    ap.add_argument("--canaries", type=int, default=200, help="Number of canaries m (about m/2 inserted).")
    ap.add_argument("--secret-length", type=int, default=6,
                    help="Digits per canary secret: 10^L possible secrets, among which exposure ranks each canary.")
    ap.add_argument("--records", type=int, default=600, help="Public training records besides the canaries.")
    ap.add_argument("--batch-size", type=int, default=96, help="Expected batch size B of Opacus' loader.")
    ap.add_argument("--epochs", type=int, default=8, help="Training epochs.")
    ap.add_argument("--width", type=int, default=64, help="Embedding width of the tiny GPT-2.")
    ap.add_argument("--probe-canaries", type=int, default=1000,
                    help="White-box gradient canaries of the probe (about half inserted).")
    ap.add_argument("--no-probe", dest="probe", action="store_false",
                    help="Train without dpaudit's probe (black-box audit only).")
    ap.add_argument("--bug", default="none", choices=BUGS,
                    help="Plant one bug in the training code to see the probe catch it (see above); none: honest.")
    ap.add_argument("--references", type=int, default=2000,
                    help="Reference secrets that rank each canary's exposure: part of the evaluation plan fixed in "
                         "canaries.json before training, so the evaluation takes it from there.")
    ap.add_argument("--seed", type=int, default=0, help="Seed of the data, canaries, probe and initialisation.")
    ap.add_argument("--insecure-rng", action="store_true", help="Noise from torch's default RNG (not for release).")
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    t0 = time.time()
    try:
        plain, tok, card, manifest, model_dir = train(args)
    except ImportError:
        if args.insecure_rng:
            raise
        print("error: Opacus' secure RNG needs torchcsprng, which is not installed; pass --insecure-rng for an "
              "experiment (do not release that model)", file=sys.stderr)
        return 2
    # 4. audit by the plan fixed in step 1 (the CLI equivalent: dpaudit evaluate OUT/model --out OUT/report)
    audit(plain, tok, card, manifest, model_dir if args.probe else None, args.out / "report", t0)
    return 0


def audit(model, tok, card, manifest, probe_dir, out: Path, t0: float) -> dict:
    """Step 4: the audit by the plan of the manifest, the report written into ``out``, its verdict printed."""
    report = api.evaluate(model, tok, card, manifest, max_len=32, probe=probe_dir)
    md = api.write_report(report, out)
    v = report["verdict"]
    print(f"{v['status']}: {v['reason']}")
    for e in report.get("mechanism_checks") or []:
        print("mechanism checks: " + ", ".join(f"{c['check']} {c['status']}" for c in e["checks"]))
    print(f"report: {md} ({time.time() - t0:.0f} s)")
    return report


if __name__ == "__main__":
    sys.exit(main())
