"""The ``posthoc`` section of a post-hoc audit's report (``dpaudit audit identifiers`` / ``split``), re-derived by
``dpaudit check --checkpoint`` where it can be without the files the audit read (dpaudit/gate/rederive.py).

What follows from the kind and the units is derived again and must be the report's: the assumption printed beside
every bound (from the kind and the identifiers' format), the identifiers' format (one dpaudit draws), the number of
pairs (one unit each), the split's token limit (the model's positions), the seed (what the coins were drawn with)
and the split's fair-coin p-value (at least the threshold below which ``audit split`` refuses). The file names,
their digests, the text column and the counts of records left out are what the audit read; ``--rescore`` reads the
files again and derives those (dpaudit/evaluation/posthoc_rescore.py).
"""

from __future__ import annotations

from dpaudit.checks import finite
from dpaudit.errors import DpauditError


def mismatches(report: dict, ck) -> list[str]:
    """Every way the ``posthoc`` section of ``report`` is not what its kind, its units and the checkpoint ``ck`` give.

    Args:
        report: A post-hoc audit's parsed report.json (its ``posthoc`` an object).
        ck: The checkpoint loaded with the report's units (:func:`dpaudit.evaluation.posthoc.units_from_report`).

    Returns:
        One line per difference; [] when the section agrees.
    """
    from dpaudit.audit import auditor
    from dpaudit.evaluation import posthoc, posthoc_fit

    ph = report["posthoc"]
    src = ph.get("sources") if isinstance(ph.get("sources"), dict) else {}
    out = []
    fmt = src.get("format") if ph.get("kind") == posthoc.IDENTIFIER_KIND else None
    if ph.get("kind") == posthoc.IDENTIFIER_KIND:
        try:
            posthoc.pattern(fmt if isinstance(fmt, str) else "")
        except DpauditError:
            out.append(f"the report's identifier format {fmt!r} is not one dpaudit audits")
        if src.get("pairs") != len(ck.manifest.canaries):
            out.append(f"the report says {src.get('pairs')!r} identifier pairs but scores {len(ck.manifest.canaries)}")
    else:
        p = src.get("fair_coin_p")
        if not (finite(p) and auditor.FAIR_COIN_P <= float(p) <= 1):  # type: ignore[arg-type]
            out.append(f"the report's fair-coin p-value {p!r} is not one `audit split` accepts (a split a fair coin "
                       f"gives with probability at least {auditor.FAIR_COIN_P:g})")
        if src.get("max_tokens") != posthoc_fit.token_limit(ck):
            out.append(f"the report's token limit {src.get('max_tokens')!r} is not the model's "
                       f"({posthoc_fit.token_limit(ck)})")
    if ph.get("assumption") != posthoc.assumption(ph.get("kind"), fmt):
        out.append("the report's assumption is not the one its kind of audit rests on: "
                   f"{posthoc.assumption(ph.get('kind'), fmt)!r}")
    seed = src.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        out.append(f"the report's seed {seed!r} is not one dpaudit draws with")
    if not isinstance(src.get("text_column"), str) or not src.get("text_column"):
        out.append(f"the report's text column {src.get('text_column')!r} is not a field name")
    return out
