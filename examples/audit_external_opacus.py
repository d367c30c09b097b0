"""Audit a model you trained yourself with plain transformers + Opacus (no dpaudit trainer).

    python examples/audit_external_opacus.py --out out/external --insecure-rng   # about 30 s on 2 CPU cores
    dpaudit evaluate out/external/model --out out/external/report                # the same audit from the CLI

The four steps every external audit takes:

1. before training, make the canaries (the audit plan is fixed now) and shuffle the inserted ones into the
   training data;
2. train as usual (here: a tiny GPT-2 with Opacus' PrivacyEngine, Poisson sampling);
3. after training, write the privacy card from what the PrivacyEngine did, beside the saved model;
4. run ``dpaudit evaluate`` on the folder (or ``dpaudit.api.evaluate`` on the objects).

The training data here is synthetic public text, so that the example needs nothing but what dpaudit
installs; replace it with yours. Noise is drawn with Opacus' secure RNG unless ``--insecure-rng`` is given;
Opacus needs torchcsprng for it, which has no wheel for torch 2.13: on such a machine pass ``--insecure-rng``
and do not release the model.
"""

from __future__ import annotations

import argparse
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="Folder for the model, its card, canaries and report.")
    ap.add_argument("--epsilon", type=float, default=1.0, help="Target epsilon of DP training.")
    ap.add_argument("--delta", type=float, default=1e-5, help="Target delta.")
    ap.add_argument("--canaries", type=int, default=200, help="Number of canaries m (about m/2 inserted).")
    ap.add_argument("--secret-length", type=int, default=6,
                    help="Digits per canary secret: 10^L possible secrets, among which exposure ranks each canary.")
    ap.add_argument("--records", type=int, default=600, help="Public training records besides the canaries.")
    ap.add_argument("--epochs", type=int, default=8, help="Training epochs.")
    ap.add_argument("--references", type=int, default=2000,
                    help="Reference secrets that rank each canary's exposure: part of the evaluation plan fixed in "
                         "canaries.json before training, so the evaluation takes it from there.")
    ap.add_argument("--seed", type=int, default=0, help="Seed of the data, canaries and initialisation.")
    ap.add_argument("--insecure-rng", action="store_true", help="Noise from torch's default RNG (not for release).")
    args = ap.parse_args(argv)
    t0 = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)

    # 1. canaries before training, inserted into the data
    manifest = api.new_canaries(m=args.canaries, repetitions=1, seed=args.seed, length=args.secret_length,
                                n_references=args.references)
    model_dir = args.out / "model"
    model_dir.mkdir(exist_ok=True)
    manifest.save(model_dir / "canaries.json")
    train = api.insert_canaries(Dataset.from_dict({"text": public_texts(args.records, args.seed)}), manifest,
                                column="text", seed=args.seed)

    # 2. train with Opacus (Poisson sampling through DPDataLoader)
    tok = public_bpe_tokenizer(512)
    enc = tok(list(train["text"]), padding="max_length", truncation=True, max_length=24, return_tensors="pt")
    data = torch.utils.data.TensorDataset(enc["input_ids"], enc["attention_mask"])
    cfg = GPT2Config(vocab_size=len(tok), n_positions=32, n_embd=64, n_layer=2, n_head=2, tie_word_embeddings=False,
                     bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    try:
        engine = PrivacyEngine(accountant="prv", secure_mode=not args.insecure_rng)
    except ImportError:
        print("error: Opacus' secure RNG needs torchcsprng, which is not installed; pass --insecure-rng for an "
              "experiment (do not release that model)", file=sys.stderr)
        return 2
    model, optimizer, loader = engine.make_private_with_epsilon(
        module=model, optimizer=optimizer, data_loader=DataLoader(data, batch_size=64, shuffle=True),
        target_epsilon=args.epsilon, target_delta=args.delta, epochs=args.epochs, max_grad_norm=1.0)
    model.train()
    for epoch in range(args.epochs):
        for ids, mask in loader:
            if len(ids) == 0:
                continue
            optimizer.zero_grad()
            per_sequence_loss(model, ids.to(device), mask.to(device)).mean().backward()
            optimizer.step()
        print(f"epoch {epoch + 1}/{args.epochs}: epsilon so far {engine.get_epsilon(args.delta):.3f}", flush=True)

    # 3. save the model with its card (from what the engine did) and the manifest beside it
    plain = model._module  # the model under Opacus' GradSampleModule
    plain.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    card = api.card_from_opacus(engine, loader, optimizer, delta=args.delta, method="opacus-dp-adam")
    card.save(model_dir / "privacy_card.json")

    # 4. audit by the plan fixed in step 1 (the CLI equivalent: dpaudit evaluate OUT/model --out OUT/report)
    report = api.evaluate(plain, tok, card, manifest, max_len=32)
    md = api.write_report(report, args.out / "report")
    v = report["verdict"]
    print(f"{v['status']}: {v['reason']}")
    print(f"report: {md} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
