"""The evaluation split of a task: its test split, or a validation split held out from training data.

Hyperparameters chosen by looking at test-set numbers make those numbers optimistic. ``task.validation
= v`` gives every task the same protocol: the last v units (examples, meaning representations or users)
of the seeded training split become the evaluation set, they leave the training data before
``task.n_train`` is applied, and the test split is not read. Tune with ``validation`` set, then run the
chosen config without it to report test numbers once.
"""

from __future__ import annotations

from dpaudit.errors import DpauditError


def fingerprint(lines) -> str:
    """The data hash run.json records: sha256 over one line per unit (each ending in a newline), 16 hex digits."""
    import hashlib

    h = hashlib.sha256()
    for line in lines:
        h.update(f"{line}\n".encode())
    return h.hexdigest()[:16]


def holdout(train: list, test: list, validation: int, n_test: int | None, unit: str) -> tuple[list, list]:
    """(training units, evaluation units). ``validation = 0`` keeps the test split (first ``n_test``)."""
    if validation is None or validation == 0:
        return train, (test[:n_test] if n_test is not None else test)
    if not isinstance(validation, int) or isinstance(validation, bool) or validation < 1:
        raise DpauditError(f"task.validation must be an integer >= 1 (or 0 for the test split), got {validation!r}")
    if validation >= len(train):
        raise DpauditError(f"task.validation = {validation} would hold out all {len(train)} training {unit}; "
                           f"choose fewer than {len(train)}")
    return train[:-validation], train[-validation:]
