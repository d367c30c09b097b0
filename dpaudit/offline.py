"""One place that puts the process in offline, quiet mode (CLI and tests): hub calls fail fast instead
of retrying, progress bars and known-harmless library warnings are silenced, and dpaudit's own warnings
(:class:`dpaudit.accounting.disk_cache.CacheWarning`, the probe's) print as one line each."""

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
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)  # transformers 5
    if getattr(warnings.showwarning, "__name__", "") != "_one_line":
        warnings.showwarning = _one_line(warnings.showwarning)
    logging.getLogger("absl").setLevel(logging.ERROR)  # dp_accounting RDP: non-converging orders are excluded anyway


def _one_line(show):
    """``warnings.showwarning`` that prints dpaudit's own warnings as ``warning: <message>`` (no file, line or
    source line) and leaves every other warning to ``show``."""
    import sys
    import threading

    lock = threading.Lock()  # the accountants' threads warn at once: one whole line each

    def _one_line(message, category, filename, lineno, file=None, line=None):
        if not category.__module__.startswith("dpaudit"):
            return show(message, category, filename, lineno, file, line)
        text = str(message).splitlines()[0] if str(message) else category.__name__
        try:
            with lock:
                (file or sys.stderr).write(f"warning: {text}\n")
        except OSError:
            pass

    return _one_line
