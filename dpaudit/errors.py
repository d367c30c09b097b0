"""User-facing errors. Anything raised as :class:`DpauditError` is printed as one line and exits 2."""


class DpauditError(Exception):
    """Bad input the user can fix: the message names the problem and the fix (the CLI exits 2)."""


def first_line(e: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message (its type when it has none), for one-line error reports."""
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:limit]
