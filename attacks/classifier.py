"""Membership scores against a sequence classifier (Li et al.'s encoder + classifier-head baseline).

A classifier can only memorise a (text, label) pair, so its canaries carry a random label and every
score is about that label (higher = member):

* ``loss``: log p(label | text), the LOSS attack (Yeom et al. 2018) on the classification loss;
* ``reference``: the same minus log p(label | text) under the reference (base) model (Carlini et al.
  2021's calibration), which removes how plausible the label was before fine-tuning.

The token-level attacks (zlib, Min-K%, Min-K%++, exposure) need a causal LM and do not apply.
"""

from __future__ import annotations

import numpy as np
import torch

from dpaudit.attacks.scoring import owns
from dpaudit.tokens import model_device

NAMES = ("loss", "reference")


@torch.inference_mode()
def label_log_probs(model, tokenizer, texts: list[str], labels, batch_size: int = 64, max_len: int = 64,
                    shard: tuple[int, int] | None = None) -> np.ndarray:
    """log p(labels[i] | texts[i]) under a sequence classifier, in nats. ``shard = (i, n)``: only batches b with
    b mod n = i (NaN elsewhere; :func:`dpaudit.attacks.scoring.owns`)."""
    model.eval()
    device = model_device(model)
    labels = torch.as_tensor(np.asarray(labels), dtype=torch.long, device=device)
    out = []
    for b, i in enumerate(range(0, len(texts), batch_size)):
        if not owns(shard, b):
            out.append(torch.full((len(texts[i:i + batch_size]),), float("nan"), device=device))
            continue
        enc = tokenizer(texts[i:i + batch_size], truncation=True, max_length=max_len, padding=True, return_tensors="pt")
        logits = model(input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device)).logits.float()
        lp = torch.log_softmax(logits, -1)
        out.append(lp.gather(1, labels[i:i + batch_size, None]).squeeze(1))
    return torch.cat(out).to("cpu").numpy().astype(float) if out else np.zeros(0)


def scores(target_lp: np.ndarray, reference_lp: np.ndarray | None, names) -> dict[str, np.ndarray]:
    """The requested scores from the target's (and the reference's) label log-probabilities."""
    out = {}
    if "loss" in names:
        out["loss"] = np.asarray(target_lp, dtype=float)
    if "reference" in names:
        if reference_lp is None:
            raise ValueError("the reference attack needs the reference model's label log-probabilities")
        out["reference"] = np.asarray(target_lp, dtype=float) - np.asarray(reference_lp, dtype=float)
    return out
