"""The engine's settings (the ``[train]`` keys every method shares), validated without torch so that reading a
run config never loads it (docs/architecture.md, Options)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dpaudit import accounting, checks, device
from dpaudit.errors import DpauditError
from dpaudit.options import AUTOCAST, GRAD_SAMPLE_MODES, GRADIENT_CANARY_KINDS, OPTIMIZERS

CLIPPING_NORM_MAX = 1e6  # beyond it sigma x C swamps (or, past float32's 3.4e38, overflows) every noisy update


@dataclass(frozen=True)
class EngineConfig:
    target_epsilon: float = math.inf  # inf = non-private baseline
    delta: float | None = None  # None = 1 / (2 N), Li et al.'s default
    epochs: float = 1.0
    batch_size: int = 32  # expected (logical) batch size B; q = B / N under Poisson sampling
    lr: float = 1e-3
    head_lr: float | None = field(default=None, metadata=checks.applies(  # a classifier's new head's own rate
        lambda t, clf: clf and t.trainable != "head", "classifier models fine-tuned beyond their head"))
    weight_decay: float = 0.0
    optimizer: str = "adam"  # adam (Li et al.'s DP-Adam) | sgd (DP-SGD, no momentum): trainers/optim.py
    clipping_norm: float = 0.1  # Li et al.'s default C
    accountant: str = "prv"
    grad_sample_mode: str = field(default="hooks", metadata=checks.applies(
        lambda t, clf: t.engine.grad_sample_mode == "hooks" or (
            t.method != "user_dp_sgd" and (t.engine.private or t.trainable == "full")) or (
            t.method == "user_dp_sgd" and t.engine.grad_sample_mode == "bk" and t.engine.private),
        "record-level DP training as 'ghost' (user_dp_sgd clips users from per-record hooks, or 'bk')"))
    seed: int = 0
    max_physical_batch_size: int | None = None  # split logical batches (memory); noise once per logical batch
    gradient_canaries: int = 0  # white-box canaries (dpaudit/probe/probe.py); 0 = none
    gradient_canary_kind: str = field(default="dirac", metadata=checks.applies(  # dirac | sparse | dense, or several
        lambda t, clf: t.engine.gradient_canaries > 0, "gradient_canaries > 0"))  # joined by '+' (m each)
    gradient_canary_coordinates: str = field(default="model", metadata=checks.applies(  # model | block
        lambda t, clf: t.engine.gradient_canaries > 0 and t.engine.private,
        "private runs with gradient_canaries > 0"))  # block: a parameter the model never reads (docs/probe.md)
    gradient_canary_online: bool = field(default=False, metadata=checks.applies(  # O(m) state: the likelihood
        lambda t, clf: t.engine.gradient_canaries > 0 and t.engine.private,  # ratio accumulated as steps come
        "private runs with gradient_canaries > 0"))
    device: str = "auto"  # auto (CUDA when visible) | cpu | cuda | cuda:N (dpaudit/device.py)
    secure_rng: bool = False  # release runs: the mechanism's noise and sampling from a secret OS-entropy seed
    autocast: str = field(default="off", metadata=checks.applies(  # off | bf16: the forward and backward under
        lambda t, clf: not t.engine.private and t.method not in ("user_dp_sgd", "group_privacy"),  # bf16 autocast
        "record-level non-private runs (a DP step runs in float32: engine.check_fp32)"))

    def __post_init__(self):
        for name in ("epochs", "lr", "clipping_norm", "weight_decay"):  # before any comparison below
            if not checks.finite(getattr(self, name)):
                raise DpauditError(f"train.{name} must be a finite number, got {getattr(self, name)!r}")
        e = self.target_epsilon
        if not checks.number(e) or not e > 0:
            raise DpauditError(f"train.target_epsilon must be > 0 (inf for non-private), got {e!r}")
        if e < accounting.CALIBRATE_MIN:
            raise DpauditError(f"train.target_epsilon = {e:g} is below {accounting.CALIBRATE_MIN:g}: no accountant "
                               "states such a claim to its digits (PRV's error is about 0.01); choose a larger epsilon")
        if self.delta is not None:
            accounting.validate_delta(self.delta)
        if not self.epochs > 0:
            raise DpauditError(f"train.epochs must be > 0, got {self.epochs}")
        if not isinstance(self.batch_size, int) or isinstance(self.batch_size, bool) or self.batch_size < 1:
            raise DpauditError(f"train.batch_size must be an integer >= 1, got {self.batch_size}")
        if not self.lr > 0:
            raise DpauditError(f"train.lr must be > 0, got {self.lr}")
        if self.head_lr is not None and not (isinstance(self.head_lr, (int, float)) and not isinstance(self.head_lr, bool) and self.head_lr > 0):
            raise DpauditError(f"train.head_lr must be > 0 (or left out to use train.lr), got {self.head_lr!r}")
        if self.optimizer not in OPTIMIZERS:
            raise DpauditError(f"train.optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if not 0 < self.clipping_norm <= CLIPPING_NORM_MAX:
            raise DpauditError(f"train.clipping_norm must be in (0, {CLIPPING_NORM_MAX:g}], got {self.clipping_norm:g}"
                               + (": the noise (sigma x C) would swamp or overflow every update; per-sample gradient "
                                  "norms are far below it (clipping norms of 0.1 to 10 are the field's)"
                                  if self.clipping_norm > 0 else ""))
        if self.accountant not in accounting.GAUSSIAN_ACCOUNTANTS:
            raise DpauditError(f"train.accountant {self.accountant!r} unknown; choose one of "
                               f"{', '.join(accounting.GAUSSIAN_ACCOUNTANTS)}")
        if self.grad_sample_mode not in GRAD_SAMPLE_MODES:
            raise DpauditError(f"train.grad_sample_mode must be one of {GRAD_SAMPLE_MODES}")
        if self.max_physical_batch_size is not None and (not isinstance(self.max_physical_batch_size, int)
                                                         or isinstance(self.max_physical_batch_size, bool)
                                                         or self.max_physical_batch_size < 1):
            raise DpauditError(f"train.max_physical_batch_size must be an integer >= 1, got {self.max_physical_batch_size!r}")
        if not isinstance(self.gradient_canaries, int) or isinstance(self.gradient_canaries, bool) or self.gradient_canaries < 0 or self.gradient_canaries == 1:
            raise DpauditError(f"train.gradient_canaries must be 0 or an integer >= 2, got {self.gradient_canaries!r}")
        checks.seed("train.seed", self.seed)
        device.check(self.device, "train.device")
        if not isinstance(self.secure_rng, bool):
            raise DpauditError(f"train.secure_rng must be true or false, got {self.secure_rng!r}")
        if self.autocast not in AUTOCAST:
            raise DpauditError(f"train.autocast must be one of {', '.join(AUTOCAST)}, got {self.autocast!r}")
        if self.autocast != "off" and self.private:
            raise DpauditError(f"train.autocast = {self.autocast!r} applies to non-private runs only: the DP step's "
                               "per-sample norms, clipping and noise run in float32; remove it from this variant")
        kinds = self.canary_kinds
        bad = [k for k in kinds if k not in GRADIENT_CANARY_KINDS]
        if bad or len(set(kinds)) != len(kinds):
            raise DpauditError(f"train.gradient_canary_kind must be one of {', '.join(GRADIENT_CANARY_KINDS)} or several "
                               f"distinct ones joined by '+' (e.g. 'dirac+dense'), got {self.gradient_canary_kind!r}")
        if self.gradient_canary_coordinates not in ("model", "block"):
            raise DpauditError("train.gradient_canary_coordinates must be 'model' or 'block', got "
                               f"{self.gradient_canary_coordinates!r}")
        if self.gradient_canary_coordinates == "block" and len(self.canary_kinds) > 1:
            raise DpauditError("train.gradient_canary_coordinates = 'block' takes one canary kind (one block per "
                               f"optimizer), got {self.gradient_canary_kind!r}")
        if not isinstance(self.gradient_canary_online, bool):
            raise DpauditError(f"train.gradient_canary_online must be true or false, got {self.gradient_canary_online!r}")

    @property
    def canary_kinds(self) -> list[str]:
        return str(self.gradient_canary_kind).split("+")

    @property
    def private(self) -> bool:
        return not math.isinf(self.target_epsilon)
