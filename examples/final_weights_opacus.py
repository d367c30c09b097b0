"""Evidence from the checkpoint alone: final-weights canaries in a loop you wrote yourself (transformers + Opacus).

    python examples/final_weights_opacus.py --out out/final_weights --insecure-rng     # about a minute on 2 cores
    dpaudit evaluate out/final_weights/model --out out/final_weights/report            # the audit, from the CLI
    dpaudit check out/final_weights/report/report.json                                 # the CI gate

No probe in the loop: the audit reads the saved checkpoint only. The canaries are of the final-weights design
(docs/canary_designs.md): each owns one new token after a random prefix, its rows start at zero, and its record's
loss reads that token only, so its clipped gradient lands on its own row. The four steps:

1. before training: ``dpaudit.api.new_canaries(design="new-token", init="zero", random_prefix=40,
   train_on="secret")`` fixes the canaries, their coins and the audit plan (LOSS and ``final_weights``), and
   ``dpaudit.api.add_canary_tokens`` adds their tokens (rows at zero) to the model and tokenizer;
2. train as usual; each canary record's labels come from ``dpaudit.api.canary_labels`` (-100 but on its token);
3. save the model, the tokenizer, the card (``dpaudit.api.card_from_opacus``) and ``canaries.json`` in one folder;
4. ``dpaudit evaluate`` on that folder: the report's ``final_weights`` row is the tier "final weights".

``--no-dp`` trains the same loop without Opacus (a non-private card): the canaries are then memorised and the
final-weights test reaches its ceiling. ``--canary-rate Q`` samples the canaries at a rate of their own, fixed in the
manifest (``dpaudit.api.sample_canaries_at_rate``): the noise is calibrated at the larger of the two rates, and
``card_from_opacus`` accounts every record at it. The data is synthetic public text; replace it with yours.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from transformers import GPT2Config, GPT2LMHeadModel

from dpaudit import api
from dpaudit.claim.card import Claim, PrivacyCard
from dpaudit.tasks.models import public_bpe_tokenizer

WORDS = ("river", "market", "window", "garden", "engine", "letter", "summer", "silver", "forest", "island",
         "yellow", "quiet", "morning", "bridge", "paper", "stone", "harbour", "winter", "candle", "orchard")
MAX_LEN = 48


def public_texts(n: int, seed: int) -> list[str]:
    """Stand-in for your training data: short sentences of common words."""
    rng = random.Random(seed)
    return [f"The {rng.choice(WORDS)} near the {rng.choice(WORDS)} was {rng.choice(WORDS)} today." for _ in range(n)]


def encode(tok, texts: list[str], manifest, canary: list[bool]) -> TensorDataset:
    """Token ids, attention mask and labels (-100 on padding; a canary's on everything but its own token)."""
    ids, masks, labels = [], [], []
    for text, is_canary in zip(texts, canary):
        x = tok(text, truncation=True, max_length=MAX_LEN).input_ids
        y = api.canary_labels(x, tok, manifest) if is_canary else list(x)
        pad = MAX_LEN - len(x)
        ids.append(x + [tok.eos_token_id] * pad)
        masks.append([1] * len(x) + [0] * pad)
        labels.append(y + [-100] * pad)
    return TensorDataset(torch.tensor(ids), torch.tensor(masks), torch.tensor(labels))


def per_sequence_loss(model, ids, mask, labels) -> torch.Tensor:
    """Mean next-token loss over each sequence's labelled positions (one value per record, what Opacus clips)."""
    pos = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, :-1]
    tgt = labels[:, 1:]
    tok_loss = F.cross_entropy(logits.transpose(1, 2), tgt.clamp(min=0), reduction="none")
    keep = (tgt != -100).to(tok_loss.dtype)
    return (tok_loss * keep).sum(1) / keep.sum(1).clamp(min=1)


def train(args) -> Path:
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model_dir = args.out / "model"
    model_dir.mkdir(parents=True, exist_ok=True)

    # 1. canaries and their audit plan, before training; their tokens added with rows at zero
    manifest = api.new_canaries(m=args.canaries, seed=args.seed, template="{secret}", design="new-token", length=1,
                                init="zero", random_prefix=40, train_on="secret", guess_fraction=args.guess_fraction,
                                attacks=["loss", "final_weights"], sample_rate=args.canary_rate)
    tok = public_bpe_tokenizer(512)
    config = GPT2Config(vocab_size=len(tok), n_positions=MAX_LEN, n_embd=args.width, n_layer=2, n_head=2,
                        tie_word_embeddings=False, bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                        pad_token_id=tok.eos_token_id, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config)
    api.add_canary_tokens(model, tok, manifest)
    model.to(device)

    # 2. the data (your records plus the inserted canaries), trained as usual
    public = public_texts(args.records, args.seed)
    canaries = manifest.training_texts()
    data = encode(tok, public + canaries, manifest, [False] * len(public) + [True] * len(canaries))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, generator=torch.Generator().manual_seed(0))
    engine = None
    if not args.no_dp:
        from opacus import PrivacyEngine

        engine = PrivacyEngine(accountant="prv", secure_mode=not args.insecure_rng)
        if args.canary_rate is None:
            model, optimizer, loader = engine.make_private_with_epsilon(
                module=model, optimizer=optimizer, data_loader=loader, target_epsilon=args.epsilon,
                target_delta=args.delta, epochs=args.epochs, max_grad_norm=1.0)
        else:  # the noise calibrated at the larger rate, which the card accounts every record at
            from dpaudit.accounting import calibrate_sigma

            q, steps = 1 / len(loader), args.epochs * len(loader)  # Opacus' rate and step count
            sigma = calibrate_sigma(args.epsilon, args.delta, max(q, args.canary_rate), steps, accountant="prv")
            model, optimizer, loader = engine.make_private(module=model, optimizer=optimizer, data_loader=loader,
                                                           noise_multiplier=sigma, max_grad_norm=1.0)
            loader = api.sample_canaries_at_rate(loader, [False] * len(public) + [True] * len(canaries), manifest)
    model.train()
    for _ in range(args.epochs):
        for ids, mask, labels in loader:
            if len(ids) == 0:
                continue
            optimizer.zero_grad()
            per_sequence_loss(model, ids.to(device), mask.to(device), labels.to(device)).mean().backward()
            optimizer.step()

    # 3. model, tokenizer, card and manifest in one folder
    plain = model._module if engine is not None else model
    plain.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    if engine is not None:
        card = api.card_from_opacus(engine, loader, optimizer, delta=args.delta, method="opacus-dp-adam")
    else:
        card = PrivacyCard(claim=Claim(epsilon=None, delta=0.0, unit="record", accountant="none"), events=[],
                           method="non_private")
    card.save(model_dir / "privacy_card.json")
    manifest.save(model_dir / "canaries.json")
    print(f"saved {model_dir}: model, tokenizer, privacy_card.json, canaries.json ({len(canaries)} canaries "
          f"inserted of {args.canaries})")
    return model_dir


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="Folder for the model folder (OUT/model).")
    ap.add_argument("--epsilon", type=float, default=8.0, help="Target epsilon of DP training.")
    ap.add_argument("--delta", type=float, default=1e-5, help="Target delta.")
    ap.add_argument("--canaries", type=int, default=400, help="Canaries m (about m/2 inserted).")
    ap.add_argument("--guess-fraction", type=float, default=0.1,
                    help="Guesses as a fraction of m, fixed now (dpaudit audit plan picks it for a card).")
    ap.add_argument("--records", type=int, default=400, help="Public training records besides the canaries.")
    ap.add_argument("--batch-size", type=int, default=64, help="(Expected) batch size.")
    ap.add_argument("--epochs", type=int, default=4, help="Training epochs.")
    ap.add_argument("--lr", type=float, default=3e-3, help="Adam's learning rate.")
    ap.add_argument("--width", type=int, default=64, help="Embedding width of the tiny GPT-2.")
    ap.add_argument("--no-dp", action="store_true", help="Train without Opacus (non-private card).")
    ap.add_argument("--canary-rate", type=float, default=None,
                    help="Sample the canaries at this rate of their own (fixed in the manifest; default: the data's).")
    ap.add_argument("--seed", type=int, default=0, help="Seed of the data, canaries and initialisation.")
    ap.add_argument("--insecure-rng", action="store_true", help="Noise from torch's default RNG (not for release).")
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
