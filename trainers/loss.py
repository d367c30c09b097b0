"""The task loss of the engine: one number per record, whatever the model head.

Records are dicts with ``input_ids`` and ``targets`` (-100 = position not scored); a record's loss is its
mean token NLL over scored positions. A record may also list ``choices`` (token ids) and mark a target
``CHOICE_BASE - k`` (tasks/batching.py): that position is scored by a softmax over the choices only
(label words, Li et al.); all such records of a run share one choice list. A sequence classifier's
record keeps its label in ``targets[0]``.

Every tensor is built on the device of the batch it serves, so the same code runs on CPU and CUDA.
"""

from __future__ import annotations

import torch
from torch import nn

from dpaudit.errors import DpauditError
from dpaudit.tasks.batching import CHOICE_BASE


def run_choices(records: list[dict]) -> torch.Tensor | None:
    """The one choice list shared by the records that have closed-choice targets (None if none do)."""
    lists = {tuple(r["choices"]) for r in records if r.get("choices") is not None}
    if len(lists) > 1:
        raise DpauditError(f"records carry {len(lists)} different choice lists; one run scores one set of label words")
    marked = any(t <= CHOICE_BASE for r in records for t in r["targets"])
    if marked and not lists:
        raise DpauditError("records mark closed-choice targets but list no 'choices'; encode them with the task's "
                           "encode_example")
    if not lists:
        return None
    (choices,) = lists
    if len(choices) < 2 or len(set(choices)) != len(choices):
        raise DpauditError(f"a closed choice needs at least two distinct tokens, got {list(choices)}")
    if any(t <= CHOICE_BASE - len(choices) for r in records for t in r["targets"]):
        raise DpauditError(f"a closed-choice target names a choice beyond the {len(choices)} listed")
    return torch.tensor(choices, dtype=torch.long)


def restrict_to_choices(logits: torch.Tensor, targets: torch.Tensor, choices: torch.Tensor | None):
    """Causal-LM logits and targets with every closed-choice position (target CHOICE_BASE - k) turned into
    a softmax over ``choices``: the logits predicting it get -1e4 on every other token (exp underflows
    to exactly 0 in fp32) and the target becomes ``choices[k]``. Other positions are untouched."""
    flag = targets <= CHOICE_BASE
    if choices is None or logits.dim() == 2 or not bool(flag.any()):
        return logits, targets
    choices = choices.to(targets.device)
    k = (CHOICE_BASE - targets).clamp(0, len(choices) - 1)
    targets = torch.where(flag, choices[k], targets)
    at = torch.zeros_like(flag)
    at[:, :-1] = flag[:, 1:]  # the logits at position p predict the token at p + 1
    bias = torch.full((logits.size(-1),), -1e4, dtype=logits.dtype, device=logits.device)
    bias[choices] = 0.0
    return torch.where(at.unsqueeze(-1), logits + bias, logits), targets


def per_sample_loss(logits: torch.Tensor, targets: torch.Tensor, choices: torch.Tensor | None = None) -> torch.Tensor:
    """Mean next-token NLL over each sequence's scored positions, shape (B,); closed-choice positions
    are scored over ``choices`` only; for a classifier (logits (B, labels)) the cross-entropy of the
    label kept in ``targets[:, 0]``."""
    if logits.dim() == 2:
        return nn.functional.cross_entropy(logits.float(), targets[:, 0], reduction="none")
    logits, targets = restrict_to_choices(logits, targets, choices)
    lg = logits[:, :-1].float()
    tg = targets[:, 1:]
    nll = nn.functional.cross_entropy(lg.reshape(-1, lg.size(-1)), tg.reshape(-1), ignore_index=-100,
                                      reduction="none").view(tg.shape)
    valid = (tg != -100).sum(1).clamp(min=1)
    return nll.sum(1) / valid


def forward(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Logits with per-example position ids (built with ``repeat``: Opacus' per-sample hooks need them
    contiguous per example, docs/architecture.md)."""
    pos = torch.arange(ids.size(1), device=ids.device).unsqueeze(0).repeat(ids.size(0), 1)
    return model(input_ids=ids, attention_mask=mask, position_ids=pos).logits


def trim(ids, mask, tgt):
    """The batch without its common right padding (same loss, less work), contiguous (ghost clipping needs it)."""
    width = int(mask.sum(1).max())
    return tuple(t[:, :width].contiguous() for t in (ids, mask, tgt))


def batch_loss(model, ids, mask, tgt, criterion=None, choices: torch.Tensor | None = None) -> torch.Tensor:
    """The loss whose backward gives each record's gradient of its mean token NLL: the mean over the batch
    (Opacus hooks), or Opacus' ghost-clipping criterion (which computes the same per-sequence loss)."""
    ids, mask, tgt = trim(ids, mask, tgt)
    logits = forward(model, ids, mask)
    if criterion is not None and logits.dim() == 2:  # ghost clipping, classifier: one label per record
        return criterion(logits, tgt[:, 0])
    if criterion is not None:  # ghost clipping: Opacus' per-sequence wrapper computes the same loss
        logits, tgt = restrict_to_choices(logits, tgt, choices)
        return criterion(logits[:, :-1].reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1),
                         shape=(ids.size(0), ids.size(1) - 1))
    return per_sample_loss(logits, tgt, choices).mean()
