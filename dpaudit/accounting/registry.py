"""The accountants of the user's own (:func:`register_accountant`), after the shipped ones: their registry and
its names (docs/architecture.md, "Extension points"). The shipped accountants are dpaudit.accounting's."""

from __future__ import annotations

from typing import Callable

from dpaudit import options
from dpaudit.errors import DpauditError

REGISTERED: dict = {}  # name -> an accountant of the user's, after the shipped ones
ON_CHANGE: list = []  # called when the registry changes (dpaudit.accounting forgets its per-process answers)


def _clear() -> None:
    for forget in ON_CHANGE:
        forget()


def register_accountant(name: str, accountant) -> Callable[[], None]:
    """Add an accountant of your own beside the shipped ones: ``accountant`` (an object or module) has
    ``interval(events, delta, relation, dataset_size) -> (lower | None, upper, detail)`` (``upper`` a sound upper
    bound on epsilon at ``delta``, ``lower`` a value the true epsilon is at least, or None) and raises
    :class:`dpaudit.accounting.NotApplicable` for mechanisms it does not analyse; ``epsilon(events, delta) -> float`` is optional
    (``dpaudit.accounting.compute``). It then answers in ``dpaudit.accounting.intervals`` (so every claim check, ``dpaudit account --card`` and
    ``evaluate`` report it, and the largest upper value is the one reported), a card may name it as its
    ``claim.accountant``, and its answers are computed each time (never read from the disk cache, whose keys hash
    the shipped modules' code). Returns the function that removes it. docs/architecture.md, "Extension points"."""
    if not isinstance(name, str) or not name.isidentifier() or name in options.CLAIM_SOURCES or name in REGISTERED:
        raise DpauditError(f"accountant name {name!r} is taken or not an identifier; choose a new one")
    if not callable(getattr(accountant, "interval", None)):
        raise DpauditError(f"accountant {name!r} needs interval(events, delta, relation, dataset_size) -> "
                           "(lower | None, upper, detail)")
    REGISTERED[name] = accountant
    _clear()

    def remove() -> None:
        REGISTERED.pop(name, None)
        _clear()

    return remove


def accountant_names() -> tuple[str, ...]:
    """Every accountant that answers: the shipped ones (``dpaudit.options.ACCOUNTANTS``), then the registered ones."""
    return options.ACCOUNTANTS + tuple(REGISTERED)
