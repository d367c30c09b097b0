"""A failure of the first training step on an architecture the per-sample gradient machinery does not support,
as one line (exit 2) instead of a traceback.

Opacus' hooks and ghost clipping, and book-keeping clipping, run inside the model's own forward and backward; a
layer they cannot serve (OPT's learned positions called with an integer, Falcon's in-place edit of a hooked view,
Gemma's scaled embedding with a buffer) fails there on the first step, whatever the data. Where the traceback runs
through that machinery or the model's code, the error names it and the ways round it; anything else stays an
internal error (a dpaudit bug). Later steps are never rewritten: the same code ran once already.
"""

from __future__ import annotations

import traceback

from dpaudit.errors import DpauditError, first_line

_WHERE = (("/opacus/", "Opacus' per-sample gradients"), ("bk_clipping", "book-keeping clipping"),
          ("/transformers/models/", "the model's own code"))
FIX = ("try another train.grad_sample_mode (bk, ghost, hooks), train.trainable = 'lora', or another architecture "
       "(docs/your_model.md)")


def where(e: BaseException) -> str | None:
    """What in the traceback of ``e`` failed: the per-sample machinery or the model's code; None for anything else."""
    files = [f.filename.replace("\\", "/") for f in traceback.extract_tb(e.__traceback__)]
    for needle, name in _WHERE:
        if any(needle in f for f in files):
            return name
    return None


def explained(e: Exception, when: str) -> DpauditError | None:
    """The one-line error for ``e`` raised ``when`` (e.g. "the first training step"), or None to re-raise it."""
    if isinstance(e, DpauditError) or not isinstance(e, (RuntimeError, NotImplementedError, AttributeError,
                                                          TypeError, ValueError, IndexError)):
        return None
    name = where(e)
    if name is None:
        return None
    return DpauditError(f"{when} failed in {name} on this architecture ({type(e).__name__}: {first_line(e)[:200]}); "
                        f"{FIX}")
