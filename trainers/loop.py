"""The one training loop of every engine method: for each logical batch, zero the gradients, let the unit
step produce them, observe how hard clipping bites, step the (DP) optimizer, record the loss.

What differs between methods is passed in: the batches (data seam), the unit step (privacy unit), the
optimizer (mechanism + noise). Physical parts of a DP logical batch (Opacus' BatchMemoryManager) make the
optimizer skip its step; the loop then waits for the last part before counting the logical step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from dpaudit import progress
from dpaudit.errors import DpauditError
from dpaudit.trainers import distributed, step_failure
from dpaudit.trainers.clip_stats import ClipStats, module_norms


def run(model, optimizer, batches: Iterable, unit_step: Callable[[object], tuple[float, int]], steps: int, *,
        stats: ClipStats | None = None, desc: str = "train", start: int = 0,
        losses: list[float] | None = None, after_step: Callable[[int, list[float]], None] | None = None) -> list[float]:
    """Run logical steps ``start`` .. ``steps`` - 1; returns one loss per logical step (the mean over its units;
    NaN when the sampled batch was empty), after ``losses`` (those of the first ``start`` steps, when resuming).
    ``stats`` records the per-unit gradient norms before clipping; ``after_step(done, losses)`` hears of every
    completed logical step (snapshots).
    Over 8 parameters: the loop's five parts, then keyword options of statistics, progress and resumption."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    losses = list(losses or [])
    part_sum, part_n = 0.0, 0  # a DP logical batch's physical parts, until the optimizer takes the noisy step
    bar = progress.bar(total=steps, initial=start, desc=desc, disable=not distributed.is_main())
    done = start
    for batch in batches:
        if done >= steps:
            break
        optimizer.zero_grad(set_to_none=True)
        try:
            loss_sum, n = unit_step(batch)
            if stats is not None and n:
                stats.observe(module_norms(model, trainable))
            optimizer.step()
        except Exception as e:  # noqa: BLE001 - the first step on an architecture the machinery cannot serve
            told = step_failure.explained(e, "the first training step") if done == start and not losses[start:] \
                else None
            if told is None:
                raise
            raise told from None
        part_sum, part_n = part_sum + loss_sum, part_n + n
        if getattr(optimizer, "_is_last_step_skipped", False):
            continue  # a physical part of a logical batch: no noise, no step yet
        losses.append(part_sum / part_n if part_n else math.nan)
        if part_n and not math.isfinite(losses[-1]):  # the weights are already broken: every later step is lost too
            bar.close()
            raise DpauditError(f"training diverged: the loss of step {done + 1} of {steps} is {losses[-1]}; lower "
                               "train.lr (or, in a DP run, look at train.clipping_norm and the noise), and check the "
                               "data for records the model cannot score")
        part_sum, part_n = 0.0, 0
        if stats is not None:
            stats.end_step()
        done += 1
        if after_step is not None:
            after_step(done, losses)
        bar.update(1)
        if done % 10 == 0:
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    bar.close()
    return losses
