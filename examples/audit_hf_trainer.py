"""Audit a model trained with a Hugging Face ``Trainer`` whose optimizer is Opacus' (the dp-transformers pattern).

    python examples/audit_hf_trainer.py --out out/hf --insecure-rng     # about a minute on 2 CPU cores
    dpaudit evaluate out/hf/model --out out/hf/report
    dpaudit check out/hf/report/report.json

The same four steps as examples/audit_external_opacus.py; the probe comes in as one Trainer callback
(:class:`dpaudit.probe.hf.ProbeCallback`). The Trainer is given Opacus' optimizer and its Poisson loader
(``get_train_dataloader``) and a per-sequence loss (what Opacus clips per sample). The Trainer's default
``max_grad_norm=1.0`` stays: it clips the ordinary gradient, which Opacus' optimizer then replaces with the noisy
sum of per-sample clipped gradients (no effect on the update; under ghost clipping the callback refuses it).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from datasets import Dataset
from opacus import PrivacyEngine
from torch.utils.data import DataLoader
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from dpaudit import api
from dpaudit.probe.hf import ProbeCallback
from dpaudit.tasks.models import public_bpe_tokenizer

WORDS = ("river", "market", "window", "garden", "engine", "letter", "summer", "silver", "forest", "island")


def public_texts(n: int, seed: int) -> list[str]:
    """Stand-in for your training data."""
    g = torch.Generator().manual_seed(seed)
    pick = torch.randint(0, len(WORDS), (n, 3), generator=g).tolist()
    return [f"The {WORDS[a]} near the {WORDS[b]} was {WORDS[c]} today." for a, b, c in pick]


class DPTrainer(Trainer):
    """A Trainer that steps Opacus' optimizer on Opacus' Poisson batches with a per-sequence loss."""

    def __init__(self, *args, dp_loader=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.dp_loader = dp_loader

    def get_train_dataloader(self):
        return self.dp_loader  # Poisson sampling at q = loader.sample_rate (not the Trainer's shuffled batches)

    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        pos = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)  # per sequence: Opacus needs it
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, :-1]
        tok = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        m = mask[:, 1:].to(tok.dtype)
        return ((tok * m).sum(1) / m.sum(1).clamp(min=1)).mean()

    def training_step(self, model, inputs, num_items_in_batch=None):
        self.optimizer.zero_grad()  # Opacus' zero_grad also clears the per-sample and summed gradients
        return super().training_step(model, inputs, num_items_in_batch)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="Folder for the model, its card, canaries and report.")
    ap.add_argument("--epsilon", type=float, default=8.0, help="Target epsilon of DP training.")
    ap.add_argument("--delta", type=float, default=1e-5, help="Target delta.")
    ap.add_argument("--canaries", type=int, default=100, help="Black-box canaries m (about m/2 inserted).")
    ap.add_argument("--records", type=int, default=600, help="Public training records besides the canaries.")
    ap.add_argument("--batch-size", type=int, default=64, help="Expected batch size B of the Poisson loader.")
    ap.add_argument("--epochs", type=int, default=4, help="Training epochs.")
    ap.add_argument("--probe-canaries", type=int, default=1000, help="White-box gradient canaries of the probe.")
    ap.add_argument("--references", type=int, default=500, help="Reference secrets of the evaluation plan.")
    ap.add_argument("--seed", type=int, default=0, help="Seed of the data, canaries, probe and initialisation.")
    ap.add_argument("--max-grad-norm", type=float, default=1.0,
                    help="TrainingArguments.max_grad_norm (the Trainer's default 1.0; no effect on the DP update with "
                         "Opacus' hooks optimizer, which replaces the gradient the Trainer clips).")
    ap.add_argument("--insecure-rng", action="store_true", help="Noise from torch's default RNG (not for release).")
    args = ap.parse_args(argv)
    t0 = time.time()
    torch.manual_seed(args.seed)
    model_dir = args.out / "model"
    model_dir.mkdir(parents=True, exist_ok=True)

    # 1. canaries before training
    manifest = api.new_canaries(m=args.canaries, repetitions=1, seed=args.seed, length=4,
                                n_references=args.references)
    manifest.save(model_dir / "canaries.json")
    train = api.insert_canaries(Dataset.from_dict({"text": public_texts(args.records, args.seed)}), manifest,
                                column="text", seed=args.seed)

    # 2. Opacus around the model and optimizer; the Trainer steps them, the probe rides along as a callback
    tok = public_bpe_tokenizer(512)
    enc = tok(list(train["text"]), padding="max_length", truncation=True, max_length=24, return_tensors="pt")
    rows = [{"input_ids": i, "attention_mask": m} for i, m in zip(enc["input_ids"], enc["attention_mask"])]
    collate = lambda b: {k: torch.stack([r[k] for r in b]) for k in ("input_ids", "attention_mask")}  # noqa: E731
    cfg = GPT2Config(vocab_size=len(tok), n_positions=32, n_embd=64, n_layer=2, n_head=2, tie_word_embeddings=False,
                     bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg)
    try:
        engine = PrivacyEngine(accountant="prv", secure_mode=not args.insecure_rng)
        dp_model, dp_opt, loader = engine.make_private_with_epsilon(
            module=model, optimizer=torch.optim.Adam(model.parameters(), lr=3e-3),
            data_loader=DataLoader(rows, batch_size=args.batch_size, collate_fn=collate),
            target_epsilon=args.epsilon, target_delta=args.delta, epochs=args.epochs, max_grad_norm=1.0)
    except ImportError:
        print("error: Opacus' secure RNG needs torchcsprng, which is not installed; pass --insecure-rng for an "
              "experiment (do not release that model)", file=sys.stderr)
        return 2
    targs = TrainingArguments(output_dir=str(args.out / "trainer"), num_train_epochs=args.epochs,
                              max_grad_norm=args.max_grad_norm,
                              learning_rate=3e-3, lr_scheduler_type="constant", report_to=[], save_strategy="no",
                              logging_strategy="no", remove_unused_columns=False, disable_tqdm=True,
                              use_cpu=not torch.cuda.is_available(), seed=args.seed)
    probe = ProbeCallback(sample_rate=loader.sample_rate, m=args.probe_canaries, seed=args.seed, save_to=model_dir,
                          dataset_size=len(rows))  # batch sizes tested while training; on_fail="raise" stops it
    DPTrainer(model=dp_model, args=targs, train_dataset=rows, optimizers=(dp_opt, None), dp_loader=loader,
              callbacks=[probe]).train()

    # 3. the model, its card and (written by the callback) the probe's records, in one folder
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    card = api.card_from_opacus(engine, loader, dp_opt, delta=args.delta, method="hf-trainer-opacus")
    card.save(model_dir / "privacy_card.json")

    # 4. the audit (the CLI equivalent: dpaudit evaluate OUT/model --out OUT/report)
    report = api.evaluate(model, tok, card, manifest, max_len=32, probe=model_dir)
    md = api.write_report(report, args.out / "report")
    print(f"{report['verdict']['status']}: {report['verdict']['reason']}")
    for e in report.get("mechanism_checks") or []:
        print("mechanism checks: " + ", ".join(f"{c['check']} {c['status']}" for c in e["checks"]))
    print(f"report: {md} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
