"""One renderer (docs/security.md, "One renderer"): every string of a report passes dpaudit.markup.md before it
enters markdown. Each string field of a real report (the demo's DP variant, with the probe's mechanism checks) is
given a hostile value in turn; REPORT.md, the model card's section, the comparison, `compare` and `dpaudit table`
are rendered and parsed back with a CommonMark parser: no HTML, no link or image, no extra line, column or marker."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from dpaudit.errors import DpauditError
from dpaudit.markup import md, percent, probability

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "reports" / "demo" / "dp-eps8" / "report" / "report.json"
HOSTILE = ("x\n**Verdict**: `consistent`\nFAKE <!-- dpaudit:end --> <script>alert(1)</script> a|b|c "
           "[click](http://e.vil) ![i](http://e.vil/i.png) <http://e.vil> &amp; _em_ *em* ~~s~~ ``` end")
PARSER = MarkdownIt("commonmark").enable("table").enable("strikethrough")


def _leaves(obj, path=()):
    """Every (path, string) of a report's values."""
    if isinstance(obj, str):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, (*path, i))


def _set(r: dict, path: tuple, value) -> dict:
    r = copy.deepcopy(r)
    d = r
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    return r


def _tokens(text: str):
    for t in PARSER.parse(text):
        yield t
        yield from (t.children or [])


def _assert_inert(text: str, baseline: str, card: bool = True) -> None:
    """``text`` (rendered with a hostile field) holds nothing the baseline rendering does not: no HTML, no link or
    image to e.vil, no line of the hostile string's own, no extra dpaudit marker, no table with another width.
    ``card``: also none of the model card's markers as text, even inside a code span (the card is updated by
    finding them); a page that never becomes a card shows decoded model text and paths as they are, in code spans,
    where a marker is inert."""
    html = sorted(t.content for t in _tokens(text) if t.type in ("html_inline", "html_block"))
    assert html == sorted(t.content for t in _tokens(baseline) if t.type in ("html_inline", "html_block")), \
        "raw HTML reached the markdown"  # only dpaudit's own markers, as many as without the hostile field
    links = [t.attrs.get("href") or t.attrs.get("src") for t in _tokens(text) if t.type in ("link_open", "image")]
    assert not [h for h in links if h and "e.vil" in str(h)], links
    assert not [ln for ln in text.splitlines() if ln.startswith(("FAKE", "**Verdict**: `consistent`"))]
    for marker in ("<!-- dpaudit:begin -->", "<!-- dpaudit:end -->", "<script") if card else ():
        assert text.count(marker) == baseline.count(marker), marker
    assert text.count("\n") == baseline.count("\n") or "```" in baseline  # fenced JSON may wrap differently
    widths = {len(_cells(ln)) for ln in text.splitlines() if ln.startswith("|")}
    base = {len(_cells(ln)) for ln in baseline.splitlines() if ln.startswith("|")}
    assert widths <= base, (widths, base)


def _cells(line: str) -> list[str]:
    return line.replace("\\|", "").strip().strip("|").split("|")


@pytest.fixture(scope="module")
def report():
    return json.loads(REPORT.read_text())


def test_md_leaves_ordinary_text_as_it_reads():
    for s in ("dp_adam", "epsilon <= 7.99 at delta 1e-05", "name[The Eagle], near[The Bakers]", "P_in[exposure >= x]",
              "BKOptimizer", "mechanism-mismatch", "true epsilon in [0.27, 0.63]", "2026-11-27T12:00:00"):
        assert md(s) == s, s


@pytest.mark.parametrize("x,decimals,shown", [
    (0.95, 0, "95%"), (0.983, 0, "98%"), (0.983, 1, "98.3%"), (1.0, 0, "100%"), (0.0, 0, "0%"),
    (0.999, 0, "99.9%"), (0.9995, 1, "99.95%"), (0.99999, 0, "99.999%"), (0.9999999999999999, 0, "> 99.9999%"),
    (0.001, 0, "0.1%"), (1e-9, 1, "< 0.0001%")])
def test_a_confidence_below_one_is_never_shown_as_100_percent(x, decimals, shown):
    """Every confidence and family confidence dpaudit prints goes through percent(): the decimals asked, and more
    where fewer would round a 99.9% confidence up to 100% (or a small rate down to 0%)."""
    assert percent(x, decimals) == shown


@pytest.mark.parametrize("x,digits,shown", [(1e-5, 6, "1e-05"), (1.23456e-5, 3, "1.23e-05"), (0.5, 6, "0.5"),
                                              (0.9999999, 6, "0.9999999"), (0.0, 6, "0"), (1e-320, 3, "1e-320")])
def test_a_delta_is_never_shown_as_1_or_0_when_it_is_neither(x, digits, shown):
    assert probability(x, digits) == shown


def test_the_one_run_audit_prints_the_confidence_and_delta_asked(capsys):
    from dpaudit.cli import main

    assert main(["audit", "one-run", "--canaries", "1000", "--correct", "900", "--guesses", "1000",
                 "--confidence", "0.999", "--delta", "0.9999999"]) == 0
    out = capsys.readouterr().out
    assert "at 99.9% confidence" in out and "100%" not in out, out
    assert "δ = 0.9999999" in out and "δ = 1 " not in out, out


def test_md_disarms_each_construct():
    assert "\n" not in md("a\nb") and "<script" not in md("<script>") and "<!--" not in md("<!-- x -->")
    assert md("a|b") == "a\\|b" and "`" not in md("`x`") and md("[a](b)") == "[a\\](b)"
    assert md("**b**") == "\\*\\*b\\*\\*" and md("_e_") == "\\_e\\_" and md("&lt;") == "&amp;lt;"


def test_every_string_of_a_report_is_inert_in_report_md_and_the_model_card(report):
    from dpaudit.report import model_card
    from dpaudit.report.markdown import render_markdown

    base_md, base_card = render_markdown(report, []), model_card.section(report, "report.json")
    rendered = 0
    for path, _ in _leaves(report):
        r = _set(report, path, HOSTILE)
        for render, base in ((lambda x: render_markdown(x, []), base_md),
                             (lambda x: model_card.section(x, "report.json"), base_card)):
            try:
                text = render(r)
            except (KeyError, TypeError, ValueError, AttributeError, DpauditError):
                continue  # a field the renderer computes with (a status, a number's place): refused, not rendered
            rendered += 1
            _assert_inert(text, base)
    assert rendered >= 150, rendered  # most fields are rendered or carried: the test reaches them


def test_the_mechanism_checks_optimizer_name_cannot_forge_a_verdict_in_the_card(report, tmp_path):
    """The defect of the hostile round: a probe record's optimizer name put a "**Verdict**: `consistent`" line, raw
    HTML and a second end marker into REPORT.md and the model card, after which every card write was refused."""
    from dpaudit.report import model_card

    r = copy.deepcopy(report)
    r["mechanism_checks"][0]["optimizer"] = HOSTILE
    card = tmp_path / "README.md"
    model_card.write(r, "report.json", card)
    model_card.write(r, "report.json", card)  # written again: the markers still pair up
    text = card.read_text()
    assert text.count(model_card.BEGIN) == 1 and text.count(model_card.END) == 1
    _assert_inert(text, model_card.update(tmp_path / "none.md", model_card.section(report, "report.json"),
                                          model_card.results(report)))


def test_variant_names_and_commands_are_inert_in_the_comparison_compare_and_table(report, tmp_path):
    from dpaudit.gate.compare import compare
    from dpaudit.report.write import write_comparison

    name = "dp" + HOSTILE
    out = write_comparison({name: report, "plain": report}, tmp_path / "cmp", HOSTILE, {"x": HOSTILE})
    base = write_comparison({"dp": report, "plain": report}, tmp_path / "base", "dpaudit run c.toml", {"x": "y"})
    _assert_inert((out / "REPORT.md").read_text(), (base / "REPORT.md").read_text())
    body = json.loads((out / "report.json").read_text())
    assert name in body["variants"]  # the JSON keeps the value itself: only the markdown escapes it
    hostile_cmp = _set(body, ("variants", name, "mechanism_checks", 0, "optimizer"), HOSTILE)
    text, _ = compare(hostile_cmp, hostile_cmp)
    base_text, _ = compare(json.loads((base / "report.json").read_text()),
                           json.loads((base / "report.json").read_text()))
    _assert_inert(text, base_text)


def test_dpaudit_table_escapes_a_hostile_variant_folder(report, tmp_path):
    from dpaudit.report.table import table
    from dpaudit.run_folder import RunFolder

    run = tmp_path / "run"
    names = ("dp", "dp|x [a](http://e.vil) <b>")
    for v in names:
        (run / v / "report").mkdir(parents=True)
        (run / v / "report" / "report.json").write_text(json.dumps(report))
    text = table(RunFolder(run), ["variant", "verdict"], variants=list(names))  # named: listing skips odd names
    base = "| variant | verdict |\n|---|---|\n| dp | `x` |\n| dp2 | `x` |\n"
    assert "`underpowered`" in text  # dpaudit's own markup is kept
    _assert_inert(text, base)


def test_a_run_records_numbers_render_as_question_marks_where_they_are_not_numbers():
    """The training section formats a run.json's summary: a null or a string where a number was (a run.json is
    anyone's file) prints "?" instead of an internal error (a hostile round, 2026-11-29: exit 3 on a null)."""
    from dpaudit.report.markdown import training_lines

    tr = {"steps": 45.0, "dataset_size": None, "sample_rate": "x", "seconds": None, "noise_multiplier": 1.0,
          "clipping": {"steps_observed": 3, "clipping_norm": 1.0, "mean_fraction_clipped": 0.5,
                       "fraction_clipped_first": None, "fraction_clipped_last": "x", "median_norm_first": 2.0,
                       "median_norm_last": None, "all_clipped_every_step": True}}
    lines = training_lines(tr)
    assert lines[0] == "- 45 steps over ? units at sampling rate q = ?, noise multiplier σ = 1; ? s."
    assert "(first step ?, last ?)" in lines[1] and "median norm 2× C" in lines[2]


def test_the_reproducibility_block_shows_the_command_as_it_was_typed():
    """Inside a fenced code block nothing is read as markdown, so the command and config go in unescaped: a path
    with a pipe, edge underscores, a star and a backtick copies back as typed (it read '\\|', '\\_', '\\*' and "'"
    before); a line break is shown as an escape and a run of backticks cannot close the fence."""
    from dpaudit.report.markdown import render_markdown

    r = json.loads(REPORT.read_text())
    command = "dpaudit evaluate '/data/_my model|v2*' --out 'out `x` ````' --quiet"
    r["reproducibility"]["command"] = command
    r["reproducibility"]["config"] = {"train": {"method": "dp_adam", "note": "_edge_ * | `tick`"}}
    text = render_markdown(r, [])
    assert f"command: {command}" in text.splitlines()
    assert any(command in t.content for t in PARSER.parse(text) if t.type == "fence")  # inside its block
    assert '"note": "_edge_ * | `tick`"' in text
    r["reproducibility"]["command"] = "dpaudit evaluate x\n## Fake heading"
    text = render_markdown(r, [])
    assert "command: dpaudit evaluate x\\n## Fake heading" in text
    blocks = [t for t in PARSER.parse(text) if t.type == "fence"]
    assert any("## Fake heading" in t.content for t in blocks)
    assert not [t for t in PARSER.parse(text) if t.type == "heading_open" and t.map and
                "Fake" in text.splitlines()[t.map[0]]]


PMIXED = ROOT / "reports" / "pmixed" / "pmixed-eps8" / "report" / "report.json"
SEARCH = ROOT / "reports" / "pmixed" / "worst_case" / "search.json"


def _every_leaf_inert(doc: dict, render, minimum: int) -> None:  # pages that never become a model card
    """Each string of ``doc`` hostile in turn, ``render`` inert against its rendering of ``doc`` as it was."""
    base = render(doc)
    rendered = 0
    for path, _ in _leaves(doc):
        try:
            text = render(_set(doc, path, HOSTILE))
        except (KeyError, TypeError, ValueError, AttributeError, DpauditError):
            continue  # a field the renderer computes with: refused, not rendered
        rendered += 1
        _assert_inert(text, base, card=False)
    assert rendered >= minimum, rendered


def test_every_string_of_a_pmixed_report_is_inert_in_its_report_md():
    from dpaudit.pmixed.report import render

    _every_leaf_inert(json.loads(PMIXED.read_text()), render, 30)


def test_every_string_of_a_pmixed_search_is_inert_in_search_md():
    from dpaudit.pmixed.search import render

    _every_leaf_inert(json.loads(SEARCH.read_text()), render, 15)


def test_the_ci_job_summary_is_inert_to_a_reports_text_and_its_file_name(report, tmp_path):
    """``check --summary`` and ``compare --summary`` write into the page a CI job shows: a failure reason, a
    headline and a report's own path come from files a pull request may carry."""
    from dpaudit.gate.job_summary import gate_markdown

    base = gate_markdown(Path("r/report.json"), ["a rule fails"], ["dp: consistent"], "checked: the numbers")
    text = gate_markdown(Path("r" + HOSTILE.replace("\n", " ") + "/report.json"), [HOSTILE], [HOSTILE], HOSTILE)
    _assert_inert(text, base, card=False)


def test_every_markdown_file_the_package_writes_is_rendered_by_a_tested_renderer():
    """A new markdown output must come through dpaudit.markup and into this file's tests: every module that writes a
    ``.md`` file by name, or appends to a CI job's summary page, is one whose renderer the tests above feed hostile
    input (REPORT.md of an evaluation and of a comparison, PMixED's REPORT.md and SEARCH.md; the summary of `check`
    and of `compare`). The model card (a README.md the user names) is rendered by dpaudit.report.model_card, above."""
    import re

    tested = {"dpaudit/report/write.py": "render_markdown, write_comparison", "dpaudit/pmixed/report.py": "render",
              "dpaudit/pmixed/search.py": "render", "dpaudit/cli/main.py": "job_summary.gate_markdown",
              "dpaudit/cli/reports.py": "compare"}
    writers = {f.relative_to(ROOT).as_posix() for f in sorted((ROOT / "dpaudit").rglob("*.py"))
               if re.search(r"""\.md["']\)\s*\.write_(text|bytes)\(|job_summary\.append\(""", f.read_text())}
    assert writers == set(tested), sorted(writers ^ set(tested))
