"""DP-FROST's partitions of the parameters (Hong et al., §4.3): the units its selection phase chooses among.

The paper defines a partition as one weight matrix together with its bias and leaves the other parameter
kinds open. The rule here, one partition per module that owns parameters directly:

* a linear map (``nn.Linear``, GPT-2's ``Conv1D``): its weight and bias — the paper's case;
* a word, position or token-type embedding table: its own partition (it is a weight matrix without a
  bias; at the paper's budgets a vocabulary-sized table rarely fits, and that is the paper's outcome too);
* a LayerNorm: its scale and shift together (a "matrix with its bias" of a diagonal map);
* a freshly initialised task head (``classifier.*``): **not selectable**. It is always trained and its size
  is taken from the budget first, because a frozen random head makes the classifier useless whatever the
  selection, and selecting it would spend privacy on a foregone choice. Causal LMs have no new head.

Partitions are listed in the model's parameter order; every trainable parameter is in exactly one.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from dpaudit.errors import DpauditError
from dpaudit.trainers.optim import is_head


@dataclass(frozen=True)
class Partition:
    name: str  # the owning module's name
    params: tuple[str, ...]  # parameter names (model.named_parameters)
    size: int  # number of scalar parameters
    kind: str  # linear | embedding | norm | head | other


def _kind(module: nn.Module) -> str:
    if isinstance(module, nn.Embedding):
        return "embedding"
    if isinstance(module, nn.LayerNorm) or "norm" in type(module).__name__.lower():
        return "norm"
    if isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D":
        return "linear"
    return "other"


def partitions(model: nn.Module) -> list[Partition]:
    """Every partition of ``model``'s parameters (frozen-on-purpose ones, e.g. a frozen tied embedding, are left
    out), new heads marked ``head``."""
    out: list[Partition] = []
    seen: set[int] = set()
    for mname, module in model.named_modules():
        own = [(f"{mname}.{n}" if mname else n, p) for n, p in module.named_parameters(recurse=False)
               if p.requires_grad and id(p) not in seen]
        if not own:
            continue
        seen.update(id(p) for _, p in own)
        kind = "head" if is_head(own[0][0]) else _kind(module)
        out.append(Partition(mname or "<root>", tuple(n for n, _ in own), sum(p.numel() for _, p in own), kind))
    if not out:
        raise DpauditError("the model has no trainable parameters to partition")
    return out


def split(parts: list[Partition]) -> tuple[list[Partition], list[Partition]]:
    """(selectable partitions, always-trained heads)."""
    return [p for p in parts if p.kind != "head"], [p for p in parts if p.kind == "head"]


def budget(parts: list[Partition], gamma: float) -> int:
    """The parameters DP-FROST may select: gamma x all parameters, minus the always-trained heads; an error when
    not even the smallest selectable partition fits (the selection could choose nothing)."""
    if not isinstance(gamma, (int, float)) or isinstance(gamma, bool) or not 0 < gamma <= 1:
        raise DpauditError(f"train.frost.gamma must be in (0, 1], got {gamma!r}")
    total = sum(p.size for p in parts)
    selectable, heads = split(parts)
    left = int(gamma * total) - sum(h.size for h in heads)
    smallest = min((p.size for p in selectable), default=0)
    if not selectable or left < smallest:
        raise DpauditError(f"train.frost.gamma = {gamma} allows {max(left, 0)} parameters besides the task head, fewer "
                           f"than the smallest partition ({smallest}); raise [train.frost] gamma")
    return left
