"""Opacus' private names that dpaudit uses (dpaudit/opacus_private.py): present in the installed Opacus, and they
behave as the adapter's callers assume. Checked against the release named in CHECKED_WITH."""

import opacus
import pytest
import torch

from dpaudit import opacus_private as op


def test_every_private_name_is_present_in_the_installed_opacus():
    gone = op.missing()
    assert not gone, (f"Opacus {opacus.__version__} lacks {', '.join(gone)} (dpaudit was checked with Opacus "
                      f"{op.CHECKED_WITH}); update dpaudit/opacus_private.py")


def test_the_release_checked_is_the_one_installed():
    assert opacus.__version__ == op.CHECKED_WITH, (
        f"Opacus {opacus.__version__} is installed, the private names were checked with {op.CHECKED_WITH}: re-read "
        "opacus/optimizers/optimizer.py and the accountant modules, then update CHECKED_WITH")


def test_noise_and_processed_flags_behave_as_the_callers_assume():
    ref = torch.zeros(20_000)
    g = torch.Generator().manual_seed(0)
    n = op.generate_noise(0.5, ref, g)
    assert n.shape == ref.shape and abs(float(n.std()) - 0.5) < 0.01
    assert float(op.generate_noise(0.0, ref, g).abs().sum()) == 0.0
    x = torch.ones(3)
    op.check_processed(x)  # a fresh tensor passes
    op.mark_processed(x)
    with pytest.raises(ValueError):
        op.check_processed(x)  # a gradient used twice is refused


def test_the_private_attributes_are_read_and_written_where_opacus_keeps_them():
    """The ghost hooks' per-sample norms, the used-gradient flag, the wrapped model and hook removal: read through
    the adapter on a real GradSampleModule and ghost-clipping step, as the probe and the trainers read them."""
    from opacus.grad_sample import GradSampleModule
    from opacus.grad_sample.grad_sample_module_fast_gradient_clipping import (
        GradSampleModuleFastGradientClipping,
    )

    model = torch.nn.Linear(3, 2)
    gsm = GradSampleModule(model)
    assert op.wrapped_module(gsm) is model
    op.close(gsm)  # hooks removed: a forward/backward leaves no per-sample gradient
    gsm(torch.randn(4, 3)).sum().backward()
    assert getattr(model.weight, "grad_sample", None) is None
    ghost = GradSampleModuleFastGradientClipping(torch.nn.Linear(3, 2), max_grad_norm=1.0, use_ghost_clipping=True)
    p = next(ghost.parameters())
    assert op.norm_sample(p) is None  # before any backward
    ghost(torch.randn(5, 3)).sum().backward()
    ns = op.norm_sample(p)
    assert ns is not None and ns.shape == (5,)  # one norm per record: what the probe counts
    op.set_norm_sample(p, torch.zeros(0))
    assert op.norm_sample(p).numel() == 0
    x = torch.ones(2)
    assert op.processed_flag(x) is None
    op.mark_processed(x)
    flag = op.processed_flag(x)
    y = torch.ones(2)
    op.restore_processed(y, flag)
    with pytest.raises(ValueError):
        op.check_processed(y)
