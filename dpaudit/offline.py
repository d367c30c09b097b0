"""One place that puts the process in offline, quiet mode (CLI and tests): hub calls fail fast instead
of retrying, progress bars and known-harmless library warnings are silenced."""

from __future__ import annotations

import logging
import os
import warnings

ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error"}


def setup() -> None:
    for k, v in ENV.items():
        os.environ.setdefault(k, v)
    warnings.filterwarnings("ignore", module="opacus")
    warnings.filterwarnings("ignore", message=".*Optimal order.*")
    warnings.filterwarnings("ignore", message=".*Full backward hook.*")
    logging.getLogger("absl").setLevel(logging.ERROR)  # dp_accounting RDP: non-converging orders are excluded anyway
