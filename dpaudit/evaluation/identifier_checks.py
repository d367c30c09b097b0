"""Whether a post-hoc audit's natural identifiers look like uniform draws of their format, before any score.

The natural-identifier audit pairs each identifier with a uniform draw of its format; its bound holds only if the
identifiers themselves were uniform draws. Identifiers that are not (card numbers carry a Luhn check digit, phone
numbers and dates fixed digits, sequential ids leading zeros) would be preferred over a fresh draw by a model that
learnt their structure from any text: an honest model accused. Two tests on the identifiers alone (never their
membership) refuse such a set: each position's characters against the format's alphabet (Pearson's chi-square,
run where every expected count is at least 5, Bonferroni over the positions), and for digit formats the share that
pass the Luhn check (10% if uniform; exact binomial). A refusal only stops the audit; it never accuses.
"""

from __future__ import annotations

from dpaudit.errors import DpauditError

REFUSE_P = 1e-6  # family-wise: a uniform set is refused about once in a million audits
UUID_FIXED = {14: "4", 19: "89ab"}  # version nibble, variant nibble (the lowercase form, dashes at 8, 13, 18, 23)


def alphabets(fmt: str, length: int) -> list[str | None]:
    """The alphabet each character position of ``fmt`` draws from (None: a fixed character)."""
    if fmt == "uuid4":
        return [None if j in (8, 13, 18, 23, 14) else UUID_FIXED.get(j, "0123456789abcdef") for j in range(length)]
    return ["0123456789" if fmt.startswith("digits") else "0123456789abcdef"] * length


def luhn_valid(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def check_uniform(fmt: str, identifiers: list[str]) -> None:
    """Refuse (one line) identifiers of ``fmt`` that a uniform draw of the format would give with probability below
    :data:`REFUSE_P`; ``identifiers`` lowercase, each of the format's length."""
    from scipy.stats import binomtest, chisquare

    if not identifiers:
        return
    length = len(identifiers[0])
    slots = [(j, a) for j, a in enumerate(alphabets(fmt, length)) if a is not None and len(a) > 1]
    tested = [(j, a) for j, a in slots if len(identifiers) >= 5 * len(a)]
    per = REFUSE_P / (len(tested) + (1 if fmt.startswith("digits") else 0) or 1)
    for j, alphabet in tested:
        counts = [sum(1 for x in identifiers if x[j] == c) for c in alphabet]
        p = float(chisquare(counts).pvalue)
        if p < per:
            common = alphabet[counts.index(max(counts))]
            raise DpauditError(f"the {fmt} identifiers are not uniform draws of the format: character {j + 1} is "
                               f"{common!r} in {max(counts)} of {len(identifiers)} (p = {p:.1g}); the audit's bound "
                               "holds only for random tokens (API keys, session ids, uuid4()), not structured "
                               "numbers such as dates, phone numbers or sequential ids")
    if fmt.startswith("digits"):
        valid = sum(luhn_valid(x) for x in identifiers)
        p = float(binomtest(valid, len(identifiers), 0.1, alternative="greater").pvalue)
        if p < per:
            raise DpauditError(f"{valid} of {len(identifiers)} {fmt} identifiers pass the Luhn check (a tenth would, "
                               f"if uniform; p = {p:.1g}): they are card numbers or other check-digit codes, not "
                               "uniform draws, and a model that learnt the check digit would prefer every real one")
