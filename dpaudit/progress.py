"""Progress bars, switched off once for the whole process (``--quiet``), never threaded through calls.

    from dpaudit import progress
    for batch in progress.bar(batches, desc="train"):
        ...

``dpaudit --quiet`` calls :func:`set_quiet` once; a bar also stays off where tqdm's own ``TQDM_DISABLE=1`` is
set, and on the non-main ranks of a torchrun job (the caller passes ``disable=True`` there). Inside
``with progress.label("dp-eps8"):`` every bar says whose work it is ("dp-eps8: DP train").
"""

from __future__ import annotations

import contextlib

_quiet = False
_label = ""


@contextlib.contextmanager
def label(name: str):
    """Every bar opened inside the block is prefixed with ``name`` (a run's variant)."""
    global _label
    before, _label = _label, str(name)
    try:
        yield
    finally:
        _label = before


def set_quiet(quiet: bool) -> None:
    """Bars off (True) or on (False) for every later :func:`bar` of this process."""
    global _quiet
    _quiet = bool(quiet)


def bar(iterable=None, **kwargs):
    """A tqdm bar (``leave=False`` unless given); off when quiet."""
    from tqdm.auto import tqdm

    kwargs.setdefault("leave", False)
    if _label:
        kwargs["desc"] = f"{_label}: {kwargs['desc']}" if kwargs.get("desc") else _label
    if _quiet:
        kwargs["disable"] = True
    return tqdm(iterable, **kwargs)
