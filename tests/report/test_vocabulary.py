"""One vocabulary (docs/verdicts.md), used by every surface: the words the page defines are the code's, and every
status word that evaluate (report.json, REPORT.md), the model card, check, compare, table and the policy print is
one of them; no older word appears in anything written now, and older reports are read in today's words."""

import json
import re
from pathlib import Path

import pytest

from dpaudit import options
from dpaudit.cli import main
from dpaudit.gate.compare import TESTS

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "verdicts.md"
# reports written in older words: the empirical check's "not-refuted" (now "consistent"), the headline's (now
# "underpowered")
OLD_EMPIRICAL = ROOT / "reports" / "dp_frost_sentiment" / "frost-eps1" / "report" / "report.json"
OLD_HEADLINE = ROOT / "reports" / "demo_lm" / "dp-eps8" / "report" / "report.json"


def _sections() -> dict[str, list[str]]:
    """Heading -> the words of the first column of the tables under it (backticked, in order)."""
    out: dict[str, list[str]] = {}
    head = None
    for line in PAGE.read_text().splitlines():
        if line.startswith("## "):
            head = line[3:].strip()
            out[head] = []
        elif head and re.match(r"^\| `[^`]+` \|", line):
            out[head].append(line.split("`")[1])
    return out


SECTIONS = _sections()
VOCABULARY = {w for head, ws in SECTIONS.items() if head != "Older words" for w in ws}
LEGACY = {old for level in options.LEGACY_WORDS.values() for old in level} - VOCABULARY  # "not-refuted"


def test_the_page_defines_exactly_the_codes_words():
    assert SECTIONS["Headline verdicts"] == list(options.VERDICTS)
    assert SECTIONS["The accounting check"] == list(options.ACCOUNTING_STATUSES)
    assert SECTIONS["The empirical check"] == list(options.EMPIRICAL_STATUSES)
    assert SECTIONS["Mechanism checks"] == [*options.MECHANISM_CHECKS, *options.CHECK_STATUSES]
    assert SECTIONS["Noise check"] == list(options.NOISE_STATUSES)
    assert SECTIONS["Evaluation plan"] == list(options.PLAN_STATUSES)
    assert SECTIONS["Gate and diff"] == ["ok", "FAIL", "regressed", *TESTS]
    assert sorted(SECTIONS["Older words"]) == sorted(w for level in options.LEGACY_WORDS.values() for w in level)
    # a word shared by two levels means the same thing at both: the empirical check's words are headline words
    assert set(options.EMPIRICAL_STATUSES) - {"no-power"} <= set(options.VERDICTS)
    assert LEGACY == {"not-refuted"}


# where each surface prints a status word: the headline and the two checks (REPORT.md, the model card), the rows of
# compare (the verdict, the checks, a mechanism check, the test column, the flag), the table's verdict column,
# check's summary and FAIL lines
_PLACES = [r"\*\*Verdict:?\*\*:? `([^`]+)`", r"Accounting(?::\*\*|\*\*:|:) (?:\*\*|`)([^*`]+)(?:\*\*|`)",
           r"Empirical: \*\*([^*]+)\*\*", r"\| (?:verdict|accounting check|empirical check) \| `([^`]+)` \| `([^`]+)`",
           r"\| mechanism check `([^`]+)` \| ([^|]+?) \| ([^|]+?) \|",
           r"\*\*(regressed)\*\*", r"^\| [^|]+ \| `([^`]+)` \|$", r"accounting ([a-z-]+); empirical ([a-z-]+)",
           r"(?:verdict|check) '([^']+)'", r"^(ok|FAIL)\b"]


_COMPARE_TEST = r"^\| (?!quantity)[^|]+ \| [^|]* \| [^|]* \| [^|]* \| ([^|]+?) \| [^|]*\|$"  # compare's test column


def _status_words(text: str, places=tuple(_PLACES)) -> set[str]:
    """Every word ``text`` prints where a surface prints a status (:data:`_PLACES`)."""
    return {w.strip() for pat in places for m in re.finditer(pat, text, re.M) for w in m.groups()
            if w.strip() and w.strip() != "—"}  # an absent value


def _report_words(r: dict) -> dict[str, set]:
    v = r["verdict"]
    return {"verdict": {v["status"]}, "accounting": {(v.get("accounting") or {}).get("status")} - {None},
            "empirical": {(v.get("empirical") or {}).get("status")} - {None},
            "checks": {c["status"] for e in r.get("mechanism_checks") or [] for c in e["checks"]},
            "noise": {n["status"] for n in r.get("noise_checks") or []},
            "plan": {(r.get("audit_plan") or {}).get("status")} - {None}}


@pytest.mark.slow
def test_every_surface_speaks_the_pages_words(run_dir, tmp_path, capsys):
    levels = {"verdict": options.VERDICTS, "accounting": options.ACCOUNTING_STATUSES,
              "empirical": options.EMPIRICAL_STATUSES, "checks": options.CHECK_STATUSES,
              "noise": options.NOISE_STATUSES, "plan": options.PLAN_STATUSES}
    texts = {}
    for variant in ("dp", "non-private"):
        folder = run_dir / variant / "report"
        r = json.loads((folder / "report.json").read_text())
        for level, words in _report_words(r).items():  # report.json: each status at its own level
            assert words <= set(levels[level]), (variant, level, words)
        texts[f"REPORT.md {variant}"] = (folder / "REPORT.md").read_text()
        texts[f"report.json {variant}"] = (folder / "report.json").read_text()
    dp = str(run_dir / "dp" / "report" / "report.json")
    assert main(["model-card", dp, "--to", str(tmp_path / "README.md")]) == 0
    texts["model card"] = (tmp_path / "README.md").read_text()
    capsys.readouterr()
    main(["check", dp])
    texts["check"] = capsys.readouterr().out
    main(["compare", str(run_dir / "non-private" / "report" / "report.json"), dp])
    texts["compare"] = capsys.readouterr().out
    assert main(["table", str(run_dir), "--columns", "variant,verdict"]) == 0
    texts["table"] = capsys.readouterr().out
    texts["policy"] = (ROOT / "configs" / "policy.toml").read_text()
    for name, text in texts.items():
        for old in LEGACY:
            assert old not in text, (name, old)
        if name.startswith("report.json"):
            continue
        words = _status_words(text, (*_PLACES, _COMPARE_TEST) if name == "compare" else _PLACES)
        assert words or name == "policy", name  # the patterns find the surface's words (else this tests nothing)
        assert not words - VOCABULARY, (name, words - VOCABULARY)
    # check names the two checks in the page's words
    m = re.search(r"accounting ([a-z-]+); empirical ([a-z-]+)", texts["check"])
    assert m and m[1] in options.ACCOUNTING_STATUSES and m[2] in options.EMPIRICAL_STATUSES, texts["check"]
    policy = re.findall(r'^(empirical|allowed_verdicts|accounting) = \[(.*)\]', texts["policy"], re.M)
    for key, values in policy:
        assert set(json.loads(f"[{values.split(']')[0]}]")) <= VOCABULARY, key


def test_older_reports_are_read_in_todays_words(tmp_path, capsys):
    """Reports written in older words: every command that reads them (check, compare, model-card) speaks today's."""
    for path, head, emp in ((OLD_EMPIRICAL, "consistent", "consistent"), (OLD_HEADLINE, "underpowered", "underpowered")):
        r = json.loads(path.read_text())
        assert "not-refuted" in (r["verdict"]["status"], r["verdict"]["empirical"]["status"])  # else nothing tested
        card = tmp_path / path.parent.parent.name / "README.md"
        card.parent.mkdir()
        assert main(["model-card", str(path), "--to", str(card)]) == 0
        main(["check", str(path)])
        assert main(["compare", str(path), str(path)]) == 0
        out = capsys.readouterr().out + card.read_text()
        assert "not-refuted" not in out
        assert f"empirical {emp}" in out and f"`{head}`" in out, out


@pytest.mark.slow
def test_every_headline_carries_one_reach_and_a_next_step_chosen_by_it(run_dir):
    from dpaudit.report.markdown import headline, next_steps

    r = json.loads((run_dir / "dp" / "report" / "report.json").read_text())
    ceiling = r["verdict"]["empirical"]["ceiling"]
    line = headline(r)
    assert f"the audit reaches ε {ceiling:.2f} at most" in line, line
    others = {round(e["ceiling"], 2) for e in r["empirical"]} - {round(ceiling, 2)}
    assert not [c for c in others if f"{c:.3g}" in line or f"{c:.2f}" in line], (others, line)  # one reach number
    seen = {}
    for head in options.VERDICTS:
        v = {**r["verdict"], "status": head}
        steps = next_steps({**r, "verdict": v, "claim": {**r["claim"], "private": head != "no-claim"}})
        seen[head] = " ".join(steps)
    assert "fix the training loop" in seen["mechanism-mismatch"] and "audit plan" not in seen["mechanism-mismatch"]
    assert "dpaudit account --card" in seen["accounting-mismatch"]
    assert "do not ship" in seen["violated"]
    assert seen["no-claim"] == ""
    assert len({seen[h] for h in ("mechanism-mismatch", "accounting-mismatch", "violated")}) == 3
    under = {**r, "verdict": {**r["verdict"], "status": "underpowered",
                              "empirical": {**r["verdict"]["empirical"], "status": "underpowered"}}}
    assert "audit plan" in " ".join(next_steps(under))
