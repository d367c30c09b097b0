"""Every private name of Opacus that dpaudit uses, in one place (docs/architecture.md, "Opacus' private API").

Opacus' optimizers draw their noise with ``opacus.optimizers.optimizer._generate_noise`` and guard against a
gradient used twice with ``_check_processed_flag`` / ``_mark_as_processed``; a DP step that replaces Opacus'
``add_noise`` or ``clip_and_accumulate`` (dpaudit's book-keeping optimizer, LMO-DP's noise, the probe's planted
bugs in the examples) must call the same three to stay the same mechanism. They are private: one Opacus release
may rename them. Here they are wrapped once; ``tests/probe/test_opacus_private.py`` names the Opacus version they were
checked against (:data:`CHECKED_WITH`) and fails with the missing name when one disappears.

Opacus' accountant modules are the other private dependency: :mod:`dpaudit.accounting.opacus_modules` runs them
without importing torch (a separate module because the accounting must not import torch); the names it needs are
listed here too (:data:`ACCOUNTANT_MODULES`) so that the same test checks them.
"""

from __future__ import annotations

CHECKED_WITH = "1.6.0"  # the Opacus release these names were checked against
OPTIMIZER_MODULE = "opacus.optimizers.optimizer"
PRIVATE_NAMES = ("_generate_noise", "_check_processed_flag", "_mark_as_processed")
ACCOUNTANT_MODULES = ("accountants.accountant", "accountants.rdp", "accountants.prv", "accountants.analysis.rdp",
                      "accountants.analysis.prv")


def _opt():
    import importlib

    return importlib.import_module(OPTIMIZER_MODULE)


def generate_noise(std: float, reference, generator=None, secure_mode: bool = False):
    """Gaussian noise of standard deviation ``std`` shaped like ``reference``, drawn as Opacus' optimizers draw it."""
    return _opt()._generate_noise(std=std, reference=reference, generator=generator, secure_mode=secure_mode)


def check_processed(x) -> None:
    """Opacus' guard: raises when ``x`` (a summed or per-sample gradient) was already used by a step."""
    _opt()._check_processed_flag(x)


def mark_processed(x) -> None:
    """Mark ``x`` as used by this step (Opacus' ``_mark_as_processed``)."""
    _opt()._mark_as_processed(x)


def missing() -> list[str]:
    """The private names above that the installed Opacus lacks (empty when every one is there)."""
    import importlib
    import importlib.util

    mod = _opt()
    gone = [f"{OPTIMIZER_MODULE}.{n}" for n in PRIVATE_NAMES if not callable(getattr(mod, n, None))]
    for name in ACCOUNTANT_MODULES:
        if importlib.util.find_spec(f"opacus.{name}") is None:
            gone.append(f"opacus.{name}")
    return gone
