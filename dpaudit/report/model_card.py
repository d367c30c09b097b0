"""The audit on the model card: a section of a Hugging Face model card (README.md) written from a report.json.

    dpaudit model-card REPORT_JSON --to my-model/README.md

The section (between ``<!-- dpaudit:begin -->`` and ``<!-- dpaudit:end -->``) states the claim, the verdict, the
accounting interval that decides, the best empirical bound with its own ceiling, and the mechanism checks; the
front matter gets the tags ``differential-privacy`` and ``dpaudit`` (read and checked with a YAML parser, so
``huggingface_hub``'s card loader reads the result: added in place to a block list, in its own indentation, with
comments and other keys as written; a flow list or a single string is written again by the YAML library) and the
audit's numbers as a ``model-index`` result (the Hub's form: claimed, certified and empirical ε; other tools' results
kept, dpaudit's own replaced). Writing it
again replaces the section (the body outside it is kept byte for byte), so it is idempotent. The section is for readers: ``dpaudit check
--checkpoint`` reads nothing from it, and the checkpoint hash does not cover README.md (docs/security.md).
"""

from __future__ import annotations

import re
from pathlib import Path

from dpaudit.errors import DpauditError, first_line
from dpaudit.io import printable, refuse_link, write_atomic_all
from dpaudit.markup import md, md_tree, percent, probability
from dpaudit.options import current_words
from dpaudit.report.markdown import headline

BEGIN, END = "<!-- dpaudit:begin -->", "<!-- dpaudit:end -->"
TAGS = ("differential-privacy", "dpaudit")
MAX_CARD_BYTES = 2 ** 20  # a model card larger than this is not one


def section(r: dict, report_path: str, shipped: bool = False) -> str:
    """The markdown section of evaluation report ``r`` (its strings escaped first: :func:`dpaudit.markup.md_tree`)."""
    r, report_path = md_tree(r), md(report_path)
    if r.get("kind") == "evaluation":
        current_words(r)  # on the escaped copy: an older report's words read as today's (docs/verdicts.md)
    if r.get("kind") != "evaluation":
        raise DpauditError(f"{report_path} is a {r.get('kind')!r} report; the model card takes one model's evaluation "
                           "report (VARIANT/report/report.json)")
    c, a, b = r["claim"], r.get("accounting") or {}, r.get("empirical_best") or {}
    claim = (f"ε = {c['epsilon']:.4g} at δ = {probability(c['delta'])} ({c['unit']} level, {c['neighbouring']} neighbours)"
             if c.get("private") else "none (a non-private model)")
    lines = [BEGIN, "## Privacy audit (dpaudit)", "",
             f"- **Claim**: {claim}.",
             f"- **Verdict**: {headline(r)}"]
    if c.get("private"):
        cert, lo = a.get("certified_epsilon"), a.get("lower_epsilon")
        interval = (f"true ε in [{lo:.4g}, {cert:.4g}]" if lo is not None and cert is not None else
                    f"true ε ≤ {cert:.4g}" if cert is not None else "no accountant bounds it")
        lines.append(f"- **Accounting**: `{a.get('status')}` — {interval} ({a.get('reason', '')}).")
    ph = r.get("posthoc") if isinstance(r.get("posthoc"), dict) else None
    if b:
        units = f"{ph['kind']}, {b['m']:,} audit units" if ph else f"m = {b['m']:,} canaries"
        lines.append(f"- **Best empirical lower bound**: ε ≥ {b['epsilon_lb']:.3g} at {percent(b['family_confidence'])} "
                     f"confidence ({b['attack']}, {units}), the most this test could show: {b['ceiling']:.3g}.")
    if ph:  # the bound's assumption travels with it
        lines.append(f"- **Post-hoc audit** (no canaries were planted): every bound above holds **only if** "
                     f"{ph.get('assumption')}.")
    for e in r.get("mechanism_checks") or []:
        checks = ", ".join(f"{x['check']} {x['status']}" for x in e["checks"])
        lines.append(f"- **Mechanism checks** (probe on {e.get('optimizer') or 'the optimizer'}): {checks}.")
    ck = r.get("checkpoint") or {}
    lines += ["", f"Report of checkpoint hash `{ck.get('hash')}`, generated {r.get('generated_at', '?')} by dpaudit "
              f"({(r.get('reproducibility') or {}).get('versions', {}).get('dpaudit', '?')}). Re-check it with "
              + ("`dpaudit check dpaudit_report.json --checkpoint .` in this model's folder (the report ships beside "
                 "the weights, outside the hash)" if shipped else
                 "`dpaudit check report.json --checkpoint MODEL_FOLDER`")
              + ": the gate re-derives from the model, not from this section.", END]
    return "\n".join(lines) + "\n"


def update(card_path: Path, text: str, results: list | None = None) -> str:
    """The model card at ``card_path`` (or a new one) with ``text`` as its dpaudit section, the tags and
    ``results`` (the ``model-index`` results of :func:`results`) in its front matter; the rest unchanged."""
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
    return _with_tags(front, results) + body


def results(r: dict) -> list[dict]:
    """The audit's numbers in the Hub's ``model-index`` form (one result on the dataset type ``dpaudit-canaries``, so
    a later write replaces it and keeps results of other tools; the Hub's ``source`` needs a URL, which a local
    report has not): the claimed ε, the accountants' certified ε and the best
    empirical lower bound, each where the report has it as a finite number."""
    import math

    c, a, b = r.get("claim") or {}, r.get("accounting") or {}, r.get("empirical_best") or {}
    delta = c.get("delta")
    metrics = []
    for kind, value, name in (
            ("dp_epsilon_claimed", c.get("epsilon") if c.get("private") else None, f"claimed ε at δ = {probability(delta)}"
             if isinstance(delta, (int, float)) else "claimed ε"),
            ("dp_epsilon_certified", a.get("certified_epsilon"), "accountants' upper bound on ε (dpaudit account)"),
            ("dp_epsilon_empirical_lower_bound", b.get("epsilon_lb"),
             f"empirical ε lower bound at {percent(b['family_confidence'])} ({b.get('attack')})"
             if isinstance(b.get("family_confidence"), (int, float)) else "empirical ε lower bound")):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            metrics.append({"type": kind, "value": round(float(value), 6), "name": name})
    m = (r.get("canary_plan") or {}).get("m")
    ph = r.get("posthoc") if isinstance(r.get("posthoc"), dict) else None
    what = f"audit units of a post-hoc audit ({ph.get('kind')}, valid only under its stated assumption)" if ph \
        else "planted canaries"
    return [{"task": {"type": "privacy-audit", "name": "Differential-privacy audit"},
             "dataset": {"type": "dpaudit-canaries", "name": f"{m} {what}" if isinstance(m, int) else what},
             "metrics": metrics}] if metrics else []


_OPEN = re.compile(r"\ufeff?\s*---[ \t]*\n")  # the Hub's rule (huggingface_hub: ^\s*---), a BOM before it allowed
_CLOSE = re.compile(r"^---(\n|\Z)", re.MULTILINE)  # a line that is '---' alone, the end of the file allowed


def _split_front_matter(text: str, where: Path) -> tuple[str, str]:
    """(the YAML front matter's inner text, the body), the front matter found where the Hub finds it: after a
    byte-order mark or blank lines, closed by a '---' line that may end the file. What precedes it is not kept
    (the card is written with its front matter first, as the Hub reads it best)."""
    opened = _OPEN.match(text)
    if not opened:
        return "", text[1:] if text.startswith("\ufeff") else text
    rest = text[opened.end():]
    close = _CLOSE.search(rest)
    if close is None:
        raise DpauditError(f"{where} opens a YAML front matter ('---') that never closes; fix the card first")
    return rest[:close.start()], rest[close.end():]


def _with_tags(front: str, results: list | None = None) -> str:
    """The front matter with TAGS in its ``tags`` list, read and checked with a YAML parser: the tags are added
    in the list's own style and indentation (``tags:\\n  - a`` stays indented; comments and other keys are kept
    as written) when that text parses back to the same metadata plus the tags, else the metadata is written
    again by the YAML library (a flow list ``tags: [a, b]``, a single string). A front matter that is not a YAML
    mapping, or whose ``tags`` is not a list of strings, is refused."""
    import yaml

    try:
        meta = _load_unique(front) if front.strip() else {}
    except yaml.YAMLError as e:
        raise DpauditError(f"the card's front matter is not valid YAML ({first_line(e, 120)}); fix it first") from None
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        raise DpauditError("the card's front matter is not a YAML mapping (key: value lines), which Hugging Face reads "
                           "its metadata from; fix the card's front matter first")
    tags = meta.get("tags")
    tags = [] if tags is None else [tags] if isinstance(tags, str) else tags
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise DpauditError("the card's front matter has 'tags' that are not a list of strings; fix them first")
    want = {**meta, "tags": tags + [t for t in TAGS if t not in tags]}
    index = _model_index(meta.get("model-index"), results or [])
    if index is not None:
        want["model-index"] = index
    if want == meta:
        return "---\n" + front + "---\n"  # nothing to add: the front matter as it was
    text = _tags_in_place(front, [t for t in TAGS if t not in tags]) if want["tags"] != tags or "tags" not in meta \
        else front
    if text is not None and index is not None and "model-index" not in meta:  # appended, the rest as written
        text = text + yaml.safe_dump({"model-index": index}, sort_keys=False, allow_unicode=True,
                                     default_flow_style=False)
    if text is None or yaml.safe_load(text) != want:
        text = yaml.safe_dump(want, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return "---\n" + text + ("" if text.endswith("\n") else "\n") + "---\n"


def _load_unique(front: str):
    """The front matter as YAML (safe), a key named twice in one mapping refused: PyYAML and the Hub keep the last
    (``license: mit`` then ``license: apache-2.0``), and rewriting the card would drop the first without a word."""
    import yaml

    class _Unique(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: merged by construct_mapping, not a key
                continue
            key = loader.construct_object(key_node, deep=True)
            try:
                twice = key in seen
                seen.add(key)
            except TypeError:  # a key that is a list or mapping: the constructor's own error says so
                twice = False
            if twice:
                raise DpauditError(f"the card's front matter names the key {printable(str(key))[:80]!r} twice in one "
                                   "mapping (the Hub reads the last, rewriting would drop the first); keep one")
        return loader.construct_mapping(node, deep)

    _Unique.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return yaml.load(front, Loader=_Unique)  # noqa: S506 - a SafeLoader subclass: no Python objects constructed


def _model_index(old, results: list) -> list | None:
    """The front matter's ``model-index`` with dpaudit's results replaced by ``results`` (one model entry; other
    tools' results kept); None when there is nothing to write. A ``model-index`` that is not the Hub's list of
    {name, results} is refused."""
    if old is None:
        return [{"name": "model", "results": results}] if results else None  # the Hub names the entry by the repo
    if not (isinstance(old, list) and old and all(isinstance(e, dict) and isinstance(e.get("results", []), list)
                                                  for e in old)):
        raise DpauditError("the card's front matter has a 'model-index' that is not a list of {name, results}; fix it "
                           "first")
    first = old[0]
    kept = [x for x in first.get("results", []) if not (isinstance(x, dict) and
                                                        (x.get("dataset") or {}).get("type") == "dpaudit-canaries")]
    return [{**first, "results": kept + results}, *old[1:]]


def _tags_in_place(front: str, add: list[str]) -> str | None:
    """``front`` with ``add`` appended to its block list of tags in the list's own indentation (or a new block
    list at the end); None when the tags are not a block list this can extend (the caller re-writes the YAML)."""
    lines = front.splitlines()
    at = [i for i, ln in enumerate(lines) if re.match(r"^tags:\s*(#.*)?$", ln)]
    if any(re.match(r"^tags:\s*[^\s#]", ln) for ln in lines):
        return None  # a flow list or a scalar: written again by the YAML library
    if not at:
        return "\n".join(lines + ["tags:"] + [f"- {t}" for t in add]) + "\n"
    j, indent = at[0] + 1, None
    while j < len(lines) and (m := re.match(r"^(\s*)- ", lines[j])):
        indent = m.group(1) if indent is None else indent
        j += 1
    lines[j:j] = [f"{indent or ''}- {t}" for t in add]
    return "\n".join(lines) + "\n"


def write(report: dict, report_path: str, card_path: Path, ship: bytes | None = None) -> Path:
    """Write the dpaudit section into the model card at ``card_path``. ``ship``: the report file's own bytes, written
    beside the card as :data:`dpaudit.checkpoint.SHIPPED_REPORT` (left out of the checkpoint's hash), so that the
    card's re-check command works from what ships with the model; the two files are written together or not at
    all."""
    from dpaudit.options import SHIPPED_REPORT

    card_path = Path(card_path)
    text = update(card_path, section(report, report_path, shipped=ship is not None), results(report))
    if _crlf(card_path):  # a card written on Windows keeps its line endings: the diff is the section alone
        text = text.replace("\r\n", "\n").replace("\n", "\r\n")
    files = [(card_path, lambda tmp: tmp.write_bytes(text.encode("utf-8")))]
    if ship is not None:
        files.append((card_path.parent / SHIPPED_REPORT, lambda tmp: tmp.write_bytes(ship)))
    write_atomic_all(files)
    return card_path


def _crlf(card_path: Path) -> bool:
    """Whether most lines of the existing card at ``card_path`` end in CRLF (read after :func:`update` checked it)."""
    if not card_path.is_file():
        return False
    raw = card_path.read_bytes()
    return raw.count(b"\r\n") * 2 > raw.count(b"\n")
