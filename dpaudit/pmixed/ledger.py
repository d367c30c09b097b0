"""The query budget of a PMixED deployment, persisted beside it and enforced across processes.

``ledger.json`` holds ``{"queries": T, "spent": k}``. :meth:`Ledger.reserve` takes n queries under an
exclusive ``fcntl`` lock on ``ledger.lock`` and rewrites the file atomically (write + fsync + rename), so two
processes answering at once can never spend more than T between them, and a crash never leaves a ledger
that under-counts: queries are reserved *before* any output is computed. A request for more queries than
remain is refused whole, with a one-line error and nothing answered.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path

from dpaudit.errors import DpauditError
from dpaudit.io import DuplicateKey, printable, unique_keys

LEDGER, LOCK = "ledger.json", "ledger.lock"


class BudgetExhausted(DpauditError):
    """The deployment's query budget cannot cover the request."""


@contextmanager
def _locked(folder: Path):
    from dpaudit.io import open_append

    with open_append(folder / LOCK, "the deployment's lock") as fh:  # a link planted as the lock is refused
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _write(path: Path, state: dict) -> None:
    """Through :func:`dpaudit.io.write_atomic` (a fresh temporary file, never a link followed), flushed to disk
    before the rename."""
    from dpaudit.io import write_atomic

    def save(tmp: Path) -> None:
        with open(tmp, "w") as fh:
            fh.write(json.dumps(state) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    write_atomic(path, save)


class Ledger:
    """``budget``: the deployment's T as its pmixed.json states it. The budget lives there, in one place: the
    ledger's own ``queries`` must equal it (an edited ledger is refused), so no file edit raises T."""

    def __init__(self, folder: Path, budget: int | None = None):
        self.folder = Path(folder)
        self.path = self.folder / LEDGER
        self.budget = budget

    @classmethod
    def of_deployment(cls, folder: Path) -> Ledger:
        """The ledger of the deployment in ``folder``, bound to the T of its pmixed.json."""
        from dpaudit.io import read_json

        d = read_json(Path(folder) / "pmixed.json", "PMixED deployment", "")
        t = (d.get("spec") or {}).get("queries") if isinstance(d.get("spec"), dict) else None
        if isinstance(t, bool) or not isinstance(t, int) or t < 1:
            raise DpauditError(f"{folder}/pmixed.json: spec.queries (T) must be an integer >= 1, got {t!r}")
        return cls(folder, t)

    @classmethod
    def create(cls, folder: Path, queries: int) -> Ledger:
        if isinstance(queries, bool) or not isinstance(queries, int) or queries < 1:
            raise DpauditError(f"the query budget T must be an integer >= 1, got {queries!r}")
        led = cls(folder)
        with _locked(led.folder):
            _write(led.path, {"queries": queries, "spent": 0})
        return led

    def state(self) -> dict:
        if not self.path.exists():
            raise DpauditError(f"{self.folder}: no {LEDGER}; this is not a PMixED deployment (or its ledger was "
                               "deleted: the budget cannot be restored, retrain)")
        try:
            s = json.loads(self.path.read_text(), object_pairs_hook=unique_keys)
        except DuplicateKey as e:  # {"spent": 9, "spent": 0}: a reader keeping the last would reset the budget
            raise DpauditError(f"{self.path}: corrupt ledger (the key {printable(str(e))!r} twice); refusing to "
                               "answer") from None
        except (json.JSONDecodeError, RecursionError, UnicodeDecodeError) as e:
            why = e.msg if isinstance(e, json.JSONDecodeError) else "not JSON text"
            raise DpauditError(f"{self.path}: corrupt ledger ({why}); refusing to answer") from None
        if not (isinstance(s, dict) and all(isinstance(s.get(k), int) and not isinstance(s.get(k), bool)
                                            for k in ("queries", "spent")) and 0 <= s["spent"]):
            raise DpauditError(f"{self.path}: ledger fields 'queries' and 'spent' must be integers; refusing to answer")
        if self.budget is not None and s["queries"] != self.budget:
            raise DpauditError(f"{self.path}: the ledger's budget T = {s['queries']} is not the deployment's T = "
                               f"{self.budget} (pmixed.json); the ledger was edited: refusing to answer")
        return s

    @property
    def remaining(self) -> int:
        s = self.state()
        return max(0, s["queries"] - s["spent"])

    def reserve(self, n: int) -> range:
        """Spend n queries now; returns their indices t (0-based). Refuses, spending nothing, if fewer remain."""
        if n < 1:
            raise DpauditError(f"reserve at least one query, got {n}")
        with _locked(self.folder):
            s = self.state()
            left = s["queries"] - s["spent"]
            if n > left:
                raise BudgetExhausted(f"query budget exhausted: {s['spent']} of T = {s['queries']} queries spent, "
                                      f"{left} left, {n} asked; the privacy guarantee covers no more (deploy again "
                                      "with a new budget only under a new epsilon)")
            _write(self.path, {**s, "spent": s["spent"] + n})
            return range(s["spent"], s["spent"] + n)
