"""Opacus' accountants without torch: the real Opacus modules, loaded so that accounting does not import torch.

Opacus' accountant code (``opacus/accountants/{accountant,rdp,prv}.py`` and ``accountants/analysis/``) is numpy
and scipy, but importing it as ``opacus.accountants`` first runs ``opacus/__init__.py``, which imports torch
(~2.5 s cold, most of a cold ``dpaudit account --card``). The one torch-bound name in that code is
``opacus.optimizers.DPOptimizer`` in ``accountant.py``, used only in the annotations of the optimizer hook that
attaches an accountant to a training run (never called by accounting).

:func:`module` returns ``opacus.<name>``: the package's own module when Opacus (or torch) is already imported
(a training process), otherwise the same source file executed under the private package name
``dpaudit._opacus`` with the package ``__init__`` files skipped and, while ``accountant.py`` is executed,
``opacus.optimizers`` standing for a placeholder class (removed again at once, so a later ``import opacus``
imports the real package). No Opacus code is copied or changed; tests/accounting/test_accounting_grid.py checks that
the answers equal Opacus' imported the usual way and that a fresh process accounts without importing torch.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import threading
import types
from pathlib import Path

ALIAS = "dpaudit._opacus"
_PACKAGES = ("", ".accountants")  # whose __init__ (torch: Opacus' engine, registry) is skipped
_LOCK = threading.Lock()


def available() -> bool:
    """Whether Opacus is installed (``pip install 'dpaudit[audit]'`` has no Opacus: its accountants are
    not applicable there)."""
    if sys.modules.get("opacus") is not None:
        return True
    try:
        return importlib.util.find_spec("opacus") is not None
    except ImportError:  # an import hook that refuses it
        return False
    except ValueError:  # an entry without a spec (a placeholder while accountant.py loads): Opacus is there
        return True


def module(name: str, light: bool | None = None):
    """``opacus.<name>`` (e.g. ``"accountants.prv"``); ``light`` forces (True) or forbids (False) the torch-free
    load; by default it is used only where neither Opacus nor torch is imported yet."""
    with _LOCK:  # decided under the lock: while accountant.py loads, "opacus" is briefly a placeholder
        if light is None:
            light = "opacus" not in sys.modules and "torch" not in sys.modules
        if light:
            _alias_packages()
        # also under the lock: Opacus' package imports are circular, and two threads importing it at once
        # deadlock (the accountants run in threads, accounting.intervals)
        package = ALIAS if light else "opacus"
        mod = importlib.import_module(f"{package}.{name}")
        _remember_rdp_orders(importlib.import_module(f"{package}.accountants.analysis.rdp"))
        return mod


RDP_ONE_ORDER = "_compute_rdp"  # Opacus' RDP of one sampled-Gaussian step at one order (opacus_private.py)


def _remember_rdp_orders(rdp) -> None:
    """Each (q, sigma, order) RDP value computed once per process. Opacus' PRV accountant sizes its grid from two
    RDP epsilons over the same ~150 orders (the run's and one step's), and its fractional orders are a Python
    series (about a millisecond each): a PRV pass spent over half its time on them, twice the same values, and a
    calibration's bisection or the RDP accountant beside it asks again. The values are Opacus' own, returned as
    computed (a pure function of three numbers); an unhashable argument is passed through."""
    fn = getattr(rdp, RDP_ONE_ORDER, None)
    if fn is None or getattr(fn, "dpaudit_remembered", False):
        return  # opacus_private.missing() names a renamed function; accounting is then only slower
    cached = functools.lru_cache(maxsize=1 << 16)(fn)

    @functools.wraps(fn)
    def remembered(q, sigma, alpha):
        try:
            return cached(q, sigma, alpha)
        except TypeError:  # an unhashable order: as Opacus computes it
            return fn(q, sigma, alpha)

    remembered.dpaudit_remembered = True  # type: ignore[attr-defined]
    setattr(rdp, RDP_ONE_ORDER, remembered)


def _alias_packages() -> None:
    if ALIAS in sys.modules:
        return
    spec = importlib.util.find_spec("opacus")  # finds the package without executing its __init__
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("opacus is not installed: pip install 'dpaudit[train]' (or, in the checkout, "
                          "make .venv/bin/.installed)")
    root = Path(next(iter(spec.submodule_search_locations)))
    for sub in _PACKAGES:
        pkg = types.ModuleType(ALIAS + sub)
        pkg.__path__ = [str(root / sub.strip(".").replace(".", "/"))] if sub else [str(root)]
        pkg.__package__ = ALIAS + sub
        sys.modules[ALIAS + sub] = pkg
    _load_accountant_base()


class _OptimizerPlaceholder:
    """Stands for ``opacus.optimizers.DPOptimizer`` in the annotations of ``IAccountant.get_optimizer_hook_fn``."""


def _load_accountant_base() -> None:
    """Execute ``accountants/accountant.py`` (``IAccountant``) with ``opacus.optimizers`` resolving to a placeholder
    for the duration, then leave ``opacus`` / ``opacus.optimizers`` exactly as they were (absent)."""
    placeholders = {"opacus": types.ModuleType("opacus"), "opacus.optimizers": types.ModuleType("opacus.optimizers")}
    placeholders["opacus.optimizers"].DPOptimizer = _OptimizerPlaceholder  # type: ignore[attr-defined]
    placeholders["opacus"].__path__ = []
    try:
        sys.modules.update(placeholders)
        importlib.import_module(f"{ALIAS}.accountants.accountant")
    finally:
        for key, mod in placeholders.items():
            if sys.modules.get(key) is mod:
                del sys.modules[key]
