"""Every private name of Opacus that dpaudit uses, in one place (docs/architecture.md, "Opacus' private API").

Opacus' optimizers draw their noise with ``opacus.optimizers.optimizer._generate_noise`` and guard against a
gradient used twice with ``_check_processed_flag`` / ``_mark_as_processed``; a DP step that replaces Opacus'
``add_noise`` or ``clip_and_accumulate`` (dpaudit's book-keeping optimizer, LMO-DP's noise, the probe's planted
bugs in the examples) must call the same three to stay the same mechanism. They are private: one Opacus release
may rename them. Here they are wrapped once; ``tests/probe/test_opacus_private.py`` names the Opacus version they were
checked against (:data:`CHECKED_WITH`) and fails with the missing name when one disappears.

Ghost clipping and the grad-sample modules have private attributes too: the per-sample norms Opacus' ghost hooks
leave on each parameter (``p._norm_sample``: the probe counts a step's records from them, the book-keeping path
writes them as the hooks would), the used-gradient flag (``grad_sample._processed``), the wrapped model
(``GradSampleModule._module``) and its hook removal (``_close()``): :data:`PRIVATE_ATTRIBUTES` names them and the
functions below read and write them, so a rename fails :func:`missing` (and the test) instead of silently reading
nothing.

Opacus' accountant modules are the other private dependency: :mod:`dpaudit.accounting.opacus_modules` runs them
without importing torch (a separate module because the accounting must not import torch); the names it needs are
listed here too (:data:`ACCOUNTANT_MODULES`) so that the same test checks them.
"""

from __future__ import annotations

CHECKED_WITH = "1.6.0"  # the Opacus release these names were checked against
OPTIMIZER_MODULE = "opacus.optimizers.optimizer"
PRIVATE_NAMES = ("_generate_noise", "_check_processed_flag", "_mark_as_processed")
# (module, the attribute as its source writes it): checked in the installed source by :func:`missing`
PRIVATE_ATTRIBUTES = (("opacus.grad_sample.grad_sample_module_fast_gradient_clipping", "._norm_sample"),
                      ("opacus.optimizers.optimizer", "._processed"),
                      ("opacus.grad_sample.gsm_base", "self._module"),
                      ("opacus.grad_sample.gsm_base", "def _close("),
                      # one order's RDP, remembered per process by the accounting (accounting/opacus_modules.py)
                      ("opacus.accountants.analysis.rdp", "def _compute_rdp("))
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


def norm_sample(p):
    """The per-sample gradient norms Opacus' ghost clipping left on parameter ``p`` this step (one per record), or
    None before any backward."""
    return getattr(p, "_norm_sample", None)


def set_norm_sample(p, norms) -> None:
    """Leave ``norms`` on ``p`` where Opacus' ghost hooks leave them (a step that computes them another way)."""
    p._norm_sample = norms


def processed_flag(grad_sample):
    """Opacus' used-gradient flag on a per-sample gradient (None when it carries none)."""
    return getattr(grad_sample, "_processed", None)


def restore_processed(grad_sample, flag) -> None:
    """Put back the flag :func:`processed_flag` read (after the gradient was swapped out and back)."""
    grad_sample._processed = flag


def wrapped_module(gsm):
    """The model a ``GradSampleModule`` wraps."""
    return gsm._module


def close(gsm) -> None:
    """Remove a ``GradSampleModule``'s hooks (Opacus' ``_close``)."""
    gsm._close()


def missing() -> list[str]:
    """The private names above that the installed Opacus lacks (empty when every one is there)."""
    import importlib
    import importlib.util
    import inspect

    mod = _opt()
    gone = [f"{OPTIMIZER_MODULE}.{n}" for n in PRIVATE_NAMES if not callable(getattr(mod, n, None))]
    for module, text in PRIVATE_ATTRIBUTES:
        try:
            source = inspect.getsource(importlib.import_module(module))
        except (ImportError, OSError, TypeError):
            source = ""
        if text not in source:
            gone.append(f"{module}: {text.strip('.')}")
    for name in ACCOUNTANT_MODULES:
        if importlib.util.find_spec(f"opacus.{name}") is None:
            gone.append(f"opacus.{name}")
    return gone
