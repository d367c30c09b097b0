"""The probe on the loops teams write (experiments/probe_loops.py; the full table, 20 seeds each, is
reports/probe/conformance.md by ``experiments/probe_conformance.py``): every honest loop pattern trains to the end
with the probe attached and passes the gate; every planted bug makes the gate's FAIL line name the check that
catches it. One seed each, on a shorter run than the table's (the table measures rates; this holds the line)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.scripts_loader import load_script

ROOT = Path(__file__).resolve().parents[2]


PL = load_script("experiments", "probe_loops")
CONF = load_script("experiments", "probe_conformance")
SMALL = PL.Settings(epochs=4, m=100)  # 100 noisy steps


def _cases(names, loop_of=lambda n: n):
    """The loops (or bugs) as test cases; a peer library's own loop is skipped where its optional extra is not
    installed (PL.PEERS names the make target that installs it)."""
    out = []
    for n in names:
        peer = PL.LOOPS[loop_of(n)].peer
        missing = peer is not None and importlib.util.find_spec(peer) is None
        out.append(pytest.param(n, marks=pytest.mark.skipif(missing, reason=f"{peer} not installed: "
                                                                              f"{PL.PEERS.get(peer)}")))
    return out


def test_the_suite_is_as_wide_as_promised():
    assert len(PL.LOOPS) >= 20 and len(PL.BUGS) >= 17  # today's five and at least twelve more
    assert {"noise", "sampling", "clipping", "steps", "divisor", "coverage", "weights"} == {
        c for _, c in PL.BUGS.values()}
    # every peer library's loop has a runner and an install target, and each bug planted in it lands in that loop
    assert set(PL._PEER_RUNS) == set(PL.PEERS) == {lp.peer for lp in PL.LOOPS.values() if lp.peer}
    assert {PL.loop_of(b) for b in PL.BUGS if "jax-privacy" in b or "dp-transformers" in b} == {
        "jax-privacy", "dp-transformers"}


@pytest.fixture(scope="module")
def spread(tmp_path_factory):
    """The rows of every case on several ranks (the DDP and FSDP loops and their bugs), trained in one spawn of the
    ranks as the table's command trains them (``probe_conformance.many``), with the folder they were saved in."""
    work = tmp_path_factory.mktemp("spread")
    cases = [(n, None, 0) for n in PL.LOOPS] + [(PL.loop_of(b), b, 0) for b in PL.BUGS]
    cases = [c for c in cases if PL.distributed(c[0], c[1]) is not None]
    return dict(zip(cases, CONF.many(PL, cases, work, SMALL))), work


def _row(spread, loop, bug, tmp_path):
    rows, _ = spread
    return rows.get((loop, bug, 0)) or CONF.one(PL, loop, bug, 0, tmp_path, SMALL)


@pytest.mark.parametrize("loop", _cases(PL.LOOPS))
def test_an_honest_loop_trains_to_the_end_and_passes_the_gate(loop, spread, tmp_path):
    row = _row(spread, loop, None, tmp_path)
    assert "crash" not in row, row.get("trace")
    assert row["gate_exit"] == 0, row["fail_lines"]
    assert not row["online_alarm_step"], row["online_alarm_step"]
    # without the model (or through the functional probe, given arrays; or under FSDP, its parameters sharded)
    # coverage is not tested
    lp = PL.LOOPS[loop]
    expected_not_tested = {"coverage"} if not lp.pass_model or lp.functional or lp.fsdp else set()
    if lp.functional:  # the conformance's hand-written functional loops give the probe no weights at save (the
        expected_not_tested |= {"weights"}  # JAX loop, the examples and tests/probe give them)
    assert {c for c, s in row["checks"].items() if s == "not tested"} <= expected_not_tested | {"divisor"}, row["checks"]


@pytest.mark.parametrize("bug", _cases(PL.BUGS, PL.loop_of))
def test_a_planted_bug_is_named_by_the_gate(bug, spread, tmp_path):
    row = _row(spread, PL.loop_of(bug), bug, tmp_path)
    assert "crash" not in row, row.get("trace")
    assert row["named_fail_line"], (PL.BUGS[bug], row["fail_lines"], row["checks"])


def test_a_trainer_that_loads_its_best_checkpoint_releases_an_earlier_epoch_and_passes(tmp_path):
    """load_best_model_at_end: the Trainer loads an earlier epoch's checkpoint into the model before on_train_end,
    so the callback's fingerprint and trainer.save_model both see the released weights, not the last iterate."""
    import glob
    import json

    row = CONF.one(PL, "hf-trainer-load-best", None, 0, tmp_path, SMALL)
    assert row["gate_exit"] == 0 and row["checks"]["weights"] == "pass", row
    (state,) = [json.load(open(f)) for f in glob.glob(str(tmp_path / "*" / "trainer" / "checkpoint-*" /
                                                               "trainer_state.json")) if f.endswith(
        f"checkpoint-{row['steps']}/trainer_state.json")]
    assert not state["best_model_checkpoint"].endswith(f"checkpoint-{row['steps']}"), state["best_model_checkpoint"]


def test_on_fail_raise_stops_the_loop_at_the_step_that_fails(tmp_path):
    from dpaudit.probe.online import ProbeFailure

    s = PL.Settings(epochs=4, m=100, on_fail="raise")
    with pytest.raises(ProbeFailure, match="mechanism check 'noise' failed at step 1"):
        PL.run("opacus-tutorial", "half-noise", 0, tmp_path, s)


def test_ddp_loop_runs_on_two_ranks_and_saves_rank_0s_record(spread):
    """The DDP loop (its run in the parametrized tests above): the record is one world of 2 ranks, every check run."""
    from dpaudit.claim.card import load_card

    folder = spread[1] / "ddp-honest-0"
    checks, fails = CONF.judge(folder, load_card(folder / "privacy_card.json"))
    statuses = {c["check"]: c["status"] for c in checks[0]["checks"]}
    assert checks[0]["world_size"] == 2 and not fails, fails
    assert statuses["noise"] == statuses["sampling"] == statuses["clipping"] == statuses["coverage"] == "pass", statuses


def test_the_hugging_face_callback_stops_the_trainer_and_still_saves_the_record(tmp_path):
    s = PL.Settings(epochs=4, m=100, on_fail="raise")
    with pytest.warns(Warning, match="stopping the Trainer"):
        probe, card, folder = PL.run("hf-trainer", "half-noise", 0, tmp_path, s)
    assert probe.steps <= 2 and probe.online.alarms["noise"]["step"] == 1  # stopped at the end of the failed step
    checks, fails = CONF.judge(folder, card)
    assert any("mechanism check 'noise'" in f for f in fails), fails


def test_the_committed_table_is_its_json_and_meets_the_targets(tmp_path):
    """reports/probe/conformance.md is what `--from-json` renders from the committed conformance.json, and the
    numbers docs/probe.md and the README quote hold there: no honest loop crashed or failed the gate, and every
    bug was named in at least 95% of its runs."""
    committed = ROOT / "reports" / "probe"
    assert CONF.main(["--from-json", str(committed / "conformance.json"), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "conformance.md").read_text() == (committed / "conformance.md").read_text()
    import json

    rows = json.loads((committed / "conformance.json").read_text())["rows"]
    honest = [r for r in rows if r["bug"] is None]
    assert len({r["loop"] for r in honest}) >= 20 and all(len([r for r in honest if r["loop"] == n]) >= 20
                                                          for n in {r["loop"] for r in honest})
    assert not any("crash" in r for r in rows)
    assert sum(r["gate_exit"] for r in honest) <= 0.01 * len(honest) + 1
    for bug in PL.BUGS:
        rs = [r for r in rows if r["bug"] == bug]
        assert len(rs) >= 20 and sum(r["named_fail_line"] for r in rs) >= 0.95 * len(rs), bug


def test_the_readme_counts_are_the_suites():
    import re

    text = (ROOT / "README.md").read_text()
    loops, bugs = map(int, re.search(r"On (\d+) loop patterns and (\d+) planted bugs", text).groups())
    assert (loops, bugs) == (len(PL.LOOPS), len(PL.BUGS))


def test_a_shared_spawn_that_fails_is_rerun_case_by_case(monkeypatch, tmp_path):
    """``probe_conformance.many``: when the one spawn of the ranks shared by the distributed cases fails, each case
    runs again on its own (so a crash lands on the run that crashed), and the rows keep the cases' order."""
    calls = []

    class Loops:  # the parts of experiments/probe_loops.py that ``many`` reads
        @staticmethod
        def distributed(loop, bug):
            return 2 if loop == "ddp" else None

        @staticmethod
        def run_distributed(cases, settings):
            raise RuntimeError("rank 1 exited with signal 9")

    def one(pl, loop, bug, seed, work, settings=None):
        calls.append((loop, bug, seed))
        return {"loop": loop, "bug": bug, "seed": seed}

    monkeypatch.setattr(CONF, "one", one)
    cases = [("ddp", None, 0), ("opacus-tutorial", None, 0), ("ddp", "half-noise", 1)]
    rows = CONF.many(Loops, cases, tmp_path, SMALL)
    assert [(r["loop"], r["bug"], r["seed"]) for r in rows] == cases and calls == cases
