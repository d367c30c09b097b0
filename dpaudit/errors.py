"""User-facing errors. Anything raised as :class:`DpauditError` is printed as one line and exits 2."""


class DpauditError(Exception):
    """Bad input the user can fix: the message names the problem and the fix."""

    exit_code = 2
