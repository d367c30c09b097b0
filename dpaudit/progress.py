"""Progress bars, switched off once for the whole process (``--quiet``), never threaded through calls.

    from dpaudit import progress
    for batch in progress.bar(batches, desc="train"):
        ...

``dpaudit --quiet`` calls :func:`set_quiet` once; a bar also stays off where tqdm's own ``TQDM_DISABLE=1`` is
set, and on the non-main ranks of a torchrun job (the caller passes ``disable=True`` there).
"""

from __future__ import annotations

_quiet = False


def set_quiet(quiet: bool) -> None:
    """Bars off (True) or on (False) for every later :func:`bar` of this process."""
    global _quiet
    _quiet = bool(quiet)


def bar(iterable=None, **kwargs):
    """A tqdm bar (``leave=False`` unless given); off when quiet."""
    from tqdm.auto import tqdm

    kwargs.setdefault("leave", False)
    if _quiet:
        kwargs["disable"] = True
    return tqdm(iterable, **kwargs)
