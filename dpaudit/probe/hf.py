"""The probe in a Hugging Face ``Trainer`` whose optimizer is an Opacus DP optimizer (the dp-transformers
pattern; docs/probe.md):

    trainer = Trainer(model=dp_model, args=args, optimizers=(dp_optimizer, None), ...,
                      callbacks=[ProbeCallback(sample_rate=loader.sample_rate, save_to=model_dir)])

At ``on_train_begin`` the callback attaches :class:`dpaudit.probe.Probe` to the optimizer the Trainer steps (an
``AcceleratedOptimizer`` is unwrapped); at ``on_train_end`` the main process saves the records into ``save_to``
(default: the Trainer's ``output_dir``). The Trainer's default ``max_grad_norm = 1.0`` is accepted with Opacus' hooks
optimizer: the Trainer rescales ``p.grad`` (the ordinary summed gradient) before the step, and the DP optimizer then
replaces ``p.grad`` with the noisy sum of per-sample clipped gradients, so the weights are bit-identical to
``max_grad_norm = 0`` (tests/probe/test_hf_trainer_clipping.py). Under ghost clipping ``p.grad`` is already the clipped
sum the noise is added to, and the Trainer's rescaling would change the mechanism: refused there, in one line.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from transformers import TrainerCallback

from dpaudit.errors import DpauditError
from dpaudit.probe.settings import ProbeSettings


class ProbeCallback(TrainerCallback):
    """The probe's ``settings`` (:class:`dpaudit.probe.settings.ProbeSettings`, or its fields as keywords:
    ``ProbeCallback(sample_rate=q, save_to=...)``). ``on_fail``: ``"warn"`` (default) warns when an online check
    fails; ``"raise"`` stops the Trainer at the end of that step (``control.should_training_stop``) and saves what the
    probe saw; None only records. The probe is given the Trainer's model (coverage) unless ``check_model=False``;
    ``save_to``: where the records go (default: the Trainer's ``output_dir``)."""

    def __init__(self, settings: ProbeSettings | None = None, *, save_to: str | Path | None = None,
                 check_model: bool = True, **options):
        self.settings = ProbeSettings.of(settings, options)
        self.stop_on_fail = self.settings.on_fail == "raise"
        self.check_model = check_model
        self.save_to = save_to
        self.probe = None

    def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
        from dpaudit.probe.probe import attach, unwrap

        inner = None if optimizer is None else unwrap(optimizer)  # the Trainer holds accelerate's wrapper
        if inner is None:
            raise DpauditError("the Trainer has no optimizer at train begin; pass optimizers=(dp_optimizer, None)")
        from opacus.optimizers import DPOptimizerFastGradientClipping

        if getattr(args, "max_grad_norm", 0) and args.max_grad_norm > 0 and isinstance(inner, DPOptimizerFastGradientClipping):
            raise DpauditError(f"TrainingArguments.max_grad_norm = {args.max_grad_norm} rescales p.grad, which under "
                               "ghost clipping is the clipped sum the noise is added to (not the card's mechanism); "
                               "set max_grad_norm=0 with a ghost-clipping DP optimizer")
        model = kwargs.get("model") if self.check_model else None
        quiet = dataclasses.replace(self.settings, on_fail=None) if self.stop_on_fail else self.settings
        self.probe = attach(inner, quiet, model=model)  # "raise": the callback stops the Trainer itself

    def on_step_end(self, args, state, control, **kwargs):
        if self.stop_on_fail and self.probe is not None and self.probe.online.alarms:
            check, alarm = next(iter(self.probe.online.alarms.items()))
            import warnings

            from dpaudit.probe.online import ProbeWarning

            warnings.warn(f"dpaudit probe: mechanism check '{check}' failed at step {alarm['step']}: {alarm['finding']}; "
                          "stopping the Trainer", ProbeWarning, stacklevel=2)
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        if self.probe is not None and state.is_world_process_zero:
            folder = Path(self.save_to or args.output_dir)
            folder.mkdir(parents=True, exist_ok=True)
            self.probe.save(folder)
