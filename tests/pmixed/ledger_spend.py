"""What each process of test_ledger_holds_across_processes runs: a module of its own, so that the spawned processes
import the ledger only (the test module would bring torch, SciPy and the evaluation into each of them)."""

from dpaudit.pmixed.ledger import BudgetExhausted, Ledger


def spend(folder, n: int) -> int:
    """Queries answered of ``n`` asked, one at a time, against the ledger in ``folder``."""
    ok = 0
    for _ in range(n):
        try:
            Ledger(folder).reserve(1)
            ok += 1
        except BudgetExhausted:
            pass
    return ok
