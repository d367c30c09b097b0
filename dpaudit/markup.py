"""One renderer's escaping: every string that came from an input (probe records, privacy cards, manifests, configs,
data, file and variant names) passes :func:`md` before it enters markdown (REPORT.md, the comparison, the model
card's section, ``dpaudit table``, ``compare``, PMixED's reports). No heavy imports: the gate's install uses it.

What an input string can no longer do once escaped (docs/security.md, "One renderer"):

- start a line of its own (a fake ``**Verdict**: `consistent``` line, a heading, a list item): line breaks and
  every other control character are shown as escapes (:func:`dpaudit.io.printable`);
- open HTML or a comment (``<script>``, ``<!-- dpaudit:end -->``, an autolink): ``<`` before a letter, ``/``,
  ``!`` or ``?`` becomes ``&lt;``, and an ``&`` that would start an entity becomes ``&amp;``;
- escape one of the escapes (a backslash is doubled first), add a table column (``|``), leave or open a code span (a backtick becomes ``'``), make a link or an image
  (``](`` / ``][`` / ``]:``), or emphasise text (``*``, ``_`` outside a word, ``~~``).

Inside a fenced code block (:func:`fenced`: the report's reproducibility lines) nothing is read as markdown, so
input text goes in as it is, one line each, under a fence no line can close. Text dpaudit writes itself (its
verdict words, numbers, the fixed sentences) is left as it is; ordinary input text
(``dp_adam``, ``epsilon <= 7.99``, ``name[The Eagle]``) reads the same after escaping.
"""

from __future__ import annotations

import re

from dpaudit.io import printable

_ENTITY = re.compile(r"&(?=#?[0-9A-Za-z]+;)")
_TAG = re.compile(r"<(?=[A-Za-z/!?])")
_LINK = re.compile(r"\](?=[(\[:])")
_EDGE_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def md(text) -> str:
    """``text`` safe to place anywhere in a markdown line: in running text, a table cell or a code span."""
    s = printable(text).replace("\\", "\\\\")  # first: a backslash of the input escapes nothing of ours
    s = _ENTITY.sub("&amp;", s)
    s = _TAG.sub("&lt;", s)
    s = s.replace("`", "'").replace("|", "\\|").replace("*", "\\*").replace("~~", "\\~\\~")
    s = _LINK.sub("\\\\]", s)
    return _EDGE_UNDERSCORE.sub("\\\\_", s)


def md_code(text) -> str:
    """``text`` safe inside a single-backtick code span outside a table (where markdown and HTML are not read): one
    line, and no backtick to close the span (shown as ``'``). Use :func:`md` for anything else."""
    return printable(text).replace("`", "'")


def fenced(lines: list[str], info: str = "") -> list[str]:
    """The lines of a fenced code block holding ``lines`` as they are: nothing inside a fence is read as markdown or
    HTML, so an input string is shown unescaped (a command's path with a ``|``, an ``_``, a ``*`` or a backtick
    copies back as it was typed; ``<`` before a letter, ``/``, ``!`` or ``?`` alone stays ``&lt;``), each on one line (control characters as escapes, :func:`dpaudit.io.printable`), under a fence
    of more backticks than any run in them, so that no line can close it.

    Args:
        lines: The raw text lines (from the report before :func:`md_tree`).
        info: The fence's info string (``json``).

    Returns:
        The block's lines, its fences included.
    """
    body = [_TAG.sub("&lt;", printable(x)) for x in lines]  # the one exception: no tag or comment opener, raw
    # (inert in a fence, but the model card's section markers are found by text, and no <script appears anywhere)
    longest = max((len(run) for x in body for run in re.findall(r"`+", x)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, *body, fence]


def md_tree(obj):
    """``obj`` (a report dict, a list, a string) with :func:`md` applied to every string in it, keys included;
    numbers, booleans and None unchanged. A renderer calls this once, on what it was given, before it formats."""
    if isinstance(obj, str):
        return md(obj)
    if isinstance(obj, dict):
        return {md(k) if isinstance(k, str) else k: md_tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [md_tree(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(md_tree(v) for v in obj)
    return obj


def percent(x, decimals: int = 0) -> str:
    """A probability (a confidence, a rate) as a percentage with ``decimals`` decimals, and more where fewer would
    round it to 100% or to 0%: a 99.9% confidence is never shown as 100%, nor a 0.01% rate as 0%."""
    x = float(x)
    for d in range(decimals, 5):
        s = f"{x:.{d}%}"
        if not ((x < 1 and float(s[:-1]) >= 100) or (x > 0 and float(s[:-1]) <= 0)):
            return s
    return "> 99.9999%" if x > 0.5 else "< 0.0001%"


def probability(x, digits: int = 6) -> str:
    """A probability such as delta with ``digits`` significant digits (``:g``), written out in full where that would
    read as 0 or 1 and it is neither: a delta of 0.9999999 is not shown as "1" (no guarantee at all), nor 1e-400 as 0."""
    x = float(x)
    s = f"{x:.{digits}g}"
    return repr(x) if float(s) in (0.0, 1.0) and x not in (0.0, 1.0) else s
