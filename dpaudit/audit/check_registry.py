"""Mechanism checks of your own, registered beside the probe's six (docs/architecture.md, "Extension points").

A check is an object (or module) with ``NAME`` (a new lowercase name), ``FALSE_ALARM`` (the rate at which an honest
run fails it; 0 for a deterministic check) and ``check(readings, card) -> (status, finding)``: ``readings`` is what
the probe saw (:class:`dpaudit.audit.mechanism_checks.Readings`), ``card`` what the privacy card says
(:class:`dpaudit.audit.mechanism_checks.CardView`), ``status`` one of ``pass | fail | not tested``. Registered with
:func:`register` (``dpaudit.api.register_mechanism_check``), it runs in every evaluation and every ``check
--checkpoint`` after the shipped checks, a failure makes the verdict ``mechanism-mismatch``, and the default policy
applies it (``[rules] mechanism_checks`` omitted: every check, the registered ones included). Its false-alarm rate
adds to the family's: an honest run fails some check with probability up to the sum of the rates.
"""

from __future__ import annotations

import math
import re

from dpaudit.audit.rows import CheckRow
from dpaudit.errors import DpauditError

_CHECKS: dict[str, object] = {}


def register(obj):
    """Register a mechanism check of your own (docs/architecture.md, "Extension points").

    Args:
        obj: An object or module with ``NAME`` (a new lowercase word), ``FALSE_ALARM`` (how often an honest run
            fails it, in [0, 1)) and ``check(readings, card) -> (status, finding)``.

    Returns:
        The function that removes it again.

    Raises:
        DpauditError: A name that is taken or not a lowercase word, a false-alarm rate outside [0, 1), or no
            ``check`` method (one line each).
    """
    from dpaudit.options import MECHANISM_CHECKS

    name = getattr(obj, "NAME", None)
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_-]{0,39}", name):
        raise DpauditError(f"a mechanism check needs NAME, a lowercase word, got {name!r}")
    if name in MECHANISM_CHECKS or name in _CHECKS:
        raise DpauditError(f"a mechanism check named {name!r} exists already; choose another NAME")
    rate = getattr(obj, "FALSE_ALARM", None)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (0 <= rate < 1) or not math.isfinite(rate):
        raise DpauditError(f"mechanism check {name!r}: FALSE_ALARM must be its false-alarm rate in [0, 1), got {rate!r}")
    if not callable(getattr(obj, "check", None)):
        raise DpauditError(f"mechanism check {name!r} needs check(readings, card) -> (status, finding)")
    _CHECKS[name] = obj

    def remove() -> None:
        _CHECKS.pop(name, None)

    return remove


def names() -> tuple[str, ...]:
    """Every mechanism check a report can carry: the shipped ones, then the registered ones."""
    from dpaudit.options import MECHANISM_CHECKS

    return (*MECHANISM_CHECKS, *_CHECKS)


def run_registered(readings, card) -> list[CheckRow]:
    """The registered checks' rows (the shipped checks' :class:`dpaudit.audit.rows.CheckRow`); a check that raises,
    or answers with another status, fails with the reason instead of stopping the evaluation."""
    from dpaudit.options import CHECK_STATUSES

    row = CheckRow

    out = []
    for name, obj in _CHECKS.items():
        rate = float(obj.FALSE_ALARM)  # type: ignore[attr-defined]
        try:
            status, finding = obj.check(readings, card)  # type: ignore[attr-defined]
        except Exception as e:  # noqa: BLE001 - a user's check: its failure is a finding, never a crash
            out.append(row(name, "fail", f"the registered check raised {type(e).__name__}: {e}", rate))
            continue
        if status not in CHECK_STATUSES:
            out.append(row(name, "fail", f"the registered check answered {status!r}, not one of "
                                         f"{', '.join(CHECK_STATUSES)}", rate))
            continue
        out.append(row(name, status, str(finding), rate if status != "not tested" else None))
    return out
