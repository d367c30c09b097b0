"""The audit on the model card: a section of a Hugging Face model card (README.md) written from a report.json.

    dpaudit model-card REPORT_JSON --to my-model/README.md

The section (between ``<!-- dpaudit:begin -->`` and ``<!-- dpaudit:end -->``) states the claim, the verdict, the
accounting interval that decides, the best empirical bound with its own ceiling, and the mechanism checks; the
front matter gets the tags ``differential-privacy`` and ``dpaudit``. Writing it again replaces the section (the
rest of the card is kept byte for byte), so it is idempotent. The section is for readers: ``dpaudit check
--checkpoint`` reads nothing from it, and the checkpoint hash does not cover README.md (docs/security.md).
"""

from __future__ import annotations

import re
from pathlib import Path

from dpaudit.errors import DpauditError
from dpaudit.io import refuse_link, write_atomic
from dpaudit.markup import md, md_tree
from dpaudit.options import verdict_name

BEGIN, END = "<!-- dpaudit:begin -->", "<!-- dpaudit:end -->"
TAGS = ("differential-privacy", "dpaudit")
MAX_CARD_BYTES = 2 ** 20  # a model card larger than this is not one


def section(r: dict, report_path: str) -> str:
    """The markdown section of evaluation report ``r`` (its strings escaped first: :func:`dpaudit.markup.md_tree`)."""
    r, report_path = md_tree(r), md(report_path)
    if r.get("kind") != "evaluation":
        raise DpauditError(f"{report_path} is a {r.get('kind')!r} report; the model card takes one model's evaluation "
                           "report (VARIANT/report/report.json)")
    c, v, a, b = r["claim"], r["verdict"], r.get("accounting") or {}, r.get("empirical_best") or {}
    claim = (f"ε = {c['epsilon']:.4g} at δ = {c['delta']:g} ({c['unit']} level, {c['neighbouring']} neighbours)"
             if c.get("private") else "none (a non-private model)")
    lines = [BEGIN, "## Privacy audit (dpaudit)", "",
             f"- **Claim**: {claim}.",
             f"- **Verdict**: `{verdict_name(v['status'])}` — {v['reason']}."]
    if c.get("private"):
        cert, lo = a.get("certified_epsilon"), a.get("lower_epsilon")
        interval = (f"true ε in [{lo:.4g}, {cert:.4g}]" if lo is not None and cert is not None else
                    f"true ε ≤ {cert:.4g}" if cert is not None else "no accountant bounds it")
        lines.append(f"- **Accounting**: `{a.get('status')}` — {interval} ({a.get('reason', '')}).")
    if b:
        lines.append(f"- **Best empirical lower bound**: ε ≥ {b['epsilon_lb']:.3g} at {b['family_confidence']:.0%} "
                     f"confidence ({b['attack']}, m = {b['m']:,} canaries), the most this test could show: "
                     f"{b['ceiling']:.3g}.")
    for e in r.get("mechanism_checks") or []:
        checks = ", ".join(f"{x['check']} {x['status']}" for x in e["checks"])
        lines.append(f"- **Mechanism checks** (probe on {e.get('optimizer') or 'the optimizer'}): {checks}.")
    ck = r.get("checkpoint") or {}
    lines += ["", f"Report of checkpoint hash `{ck.get('hash')}`, generated {r.get('generated_at', '?')} by dpaudit "
              f"({(r.get('reproducibility') or {}).get('versions', {}).get('dpaudit', '?')}). Re-check it with "
              "`dpaudit check report.json --checkpoint MODEL_FOLDER`: the gate re-derives from the model, not from "
              "this section.", END]
    return "\n".join(lines) + "\n"


def update(card_path: Path, text: str) -> str:
    """The model card at ``card_path`` (or a new one) with ``text`` as its dpaudit section and the tags in its
    front matter; the rest unchanged."""
    old = ""
    refuse_link(card_path, "the model card")  # a link to a system file would copy its text into the card
    if card_path.exists():
        if not card_path.is_file():
            raise DpauditError(f"{card_path} is not a file; name the model card (README.md) to write")
        if card_path.stat().st_size > MAX_CARD_BYTES:
            raise DpauditError(f"{card_path} is larger than {MAX_CARD_BYTES:,} bytes; it is not a model card")
        try:
            old = card_path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise DpauditError(f"{card_path} is not UTF-8 text (byte {e.start}); a model card is markdown") from None
    if old.count(BEGIN) != old.count(END) or old.count(BEGIN) > 1:
        raise DpauditError(f"{card_path} holds {old.count(BEGIN)} '{BEGIN}' and {old.count(END)} '{END}' markers; "
                           "keep one pair (or none), then write again")
    front, body = _split_front_matter(old, card_path)
    if BEGIN in body:
        start, stop = body.index(BEGIN), body.index(END) + len(END)
        rest = body[stop:]
        body = body[:start] + text.rstrip("\n") + (rest if rest.startswith("\n") else "\n" + rest)
    else:
        body = body.rstrip("\n") + ("\n\n" if body.strip() else "") + text
    return _with_tags(front) + body


def _split_front_matter(text: str, where: Path) -> tuple[str, str]:
    """(the YAML front matter's inner text, the body)."""
    if not text.startswith("---\n"):
        return "", text
    end = text.find("\n---\n", 4)
    if end < 0:
        raise DpauditError(f"{where} opens a YAML front matter ('---') that never closes; fix the card first")
    return text[4:end + 1], text[end + 5:]


def _with_tags(front: str) -> str:
    """The front matter with TAGS in its ``tags`` list (a block list added, or items appended to an existing
    block list); other keys untouched."""
    lines = front.splitlines()
    first = next((ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")), None)
    if first is not None and not re.match(r"""^(?:[^\s#\-'"][^:]*|'[^']*'|"[^"]*"):(?:\s|$)""", first):
        raise DpauditError("the card's front matter is not a YAML mapping (key: value lines), which Hugging Face reads "
                           "its metadata from; fix the card's front matter first")
    at = next((i for i, ln in enumerate(lines) if re.match(r"^tags:\s*$", ln)), None)
    inline = next((i for i, ln in enumerate(lines) if re.match(r"^tags:\s*\S", ln)), None)
    if inline is not None:
        raise DpauditError("the card's front matter writes tags on one line (tags: [...]); write them as a block "
                           "list (tags:\\n- a\\n- b) so dpaudit can add its own")
    if at is None:
        lines += ["tags:"] + [f"- {t}" for t in TAGS]
    else:
        j = at + 1
        have = []
        while j < len(lines) and re.match(r"^\s*- ", lines[j]):
            have.append(lines[j].split("-", 1)[1].strip())
            j += 1
        lines[j:j] = [f"- {t}" for t in TAGS if t not in have]
    return "---\n" + "\n".join(lines) + "\n---\n"


def write(report: dict, report_path: str, card_path: Path) -> Path:
    card_path = Path(card_path)
    text = update(card_path, section(report, report_path))
    write_atomic(card_path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return card_path
