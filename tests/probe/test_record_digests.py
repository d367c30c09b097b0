"""A white-box record binds its array files and states one step count (issue wave 5 · 2/5): the probe records the
sha256 of the per-step projections and of its per-step arrays, and reading a record compares them (an array
swapped for another run's, or edited, is refused in one line); an edited step count anywhere in the record is
refused instead of silently changing the statistic. Records written before the digests still read."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from dpaudit import api
from dpaudit.errors import DpauditError
from dpaudit.probe import readback

SHAPES = {"w": (6, 4)}
N, Q, C, SIGMA, T = 200, 0.1, 1.0, 1.0, 12


def _records(folder: Path, seed: int) -> Path:
    """A functional probe's records of T honest hand-written DP steps, saved into ``folder``."""
    rng = np.random.default_rng(seed)
    probe = api.functional_probe(SHAPES, sample_rate=Q, clipping_norm=C, noise_multiplier=SIGMA,
                                 expected_batch_size=Q * N, m=20, seed=seed, dataset_size=N, on_fail=None)
    for _ in range(T):
        b = int(rng.binomial(N, Q))
        clipped = probe.add_canaries({"w": np.zeros(SHAPES["w"])}, records=b)
        probe.observe({"w": (np.asarray(clipped["w"]) + rng.normal(0, SIGMA * C, SHAPES["w"])) / (Q * N)})
    folder.mkdir(parents=True)
    probe.save(folder)
    return folder


@pytest.fixture()
def folders(tmp_path):
    return _records(tmp_path / "a", 1), _records(tmp_path / "b", 2)


def _record(folder: Path) -> dict:
    return json.loads((folder / "gradient_canaries.json").read_text())


def _edit(folder: Path, change) -> None:
    d = _record(folder)
    change(d)
    (folder / "gradient_canaries.json").write_text(json.dumps(d))


def test_the_probe_records_each_array_files_sha256_and_reading_it_passes(folders):
    a, _ = folders
    d = _record(a)
    for name, digest in ((d["steps_file"], d["steps_sha256"]), (d["probe"]["arrays_file"], d["probe"]["arrays_sha256"])):
        assert digest == hashlib.sha256((a / name).read_bytes()).hexdigest()
    assert readback.whitebox(a)[0]["probe"]["steps"] == T


def test_another_runs_array_file_is_refused_by_its_digest(folders):
    a, b = folders
    name = _record(a)["probe"]["arrays_file"]
    (a / name).write_bytes((b / _record(b)["probe"]["arrays_file"]).read_bytes())  # the same shapes, another run
    with pytest.raises(DpauditError, match="sha256 .* is not the one the probe record records"):
        readback.whitebox(a)


def test_an_edited_projection_file_is_refused_by_its_digest(folders):
    a, _ = folders
    d = _record(a)
    assert d.get("steps_file"), d.keys()  # the functional probe keeps its per-step projections
    f = a / d["steps_file"]
    x = np.load(f)
    x[0, 0] += 1e-3  # small enough to pass the sums' tolerance: only the digest catches it
    np.save(f, x)
    with pytest.raises(DpauditError, match="sha256"):
        readback.whitebox(a)


@pytest.mark.parametrize("where", ["steps", "probe.steps"])
def test_an_edited_step_count_is_refused(folders, where):
    a, _ = folders

    def change(d):
        *path, key = where.split(".")
        (d[path[0]] if path else d)[key] = T // 2

    _edit(a, change)
    with pytest.raises(DpauditError, match="step counts disagree"):
        readback.whitebox(a)


@pytest.mark.parametrize("where", ["steps", "online.steps", "online.values"])
def test_an_edited_step_count_of_a_compact_record_is_refused(tmp_path, where):
    """A record that keeps its statistic online (the committed demo's, O(m)): its counts bind each other too."""
    root = Path(__file__).resolve().parents[2]
    d = json.loads((root / "reports/demo_lm/dp-eps8/checkpoint/gradient_canaries.json").read_text())
    assert readback.whitebox(_write(tmp_path / "ok", d))[0]["steps"] == d["steps"]  # as committed: reads
    *path, key = where.split(".")
    (d[path[0]] if path else d)[key] -= d["m"] if key == "values" else 1
    with pytest.raises(DpauditError, match="step counts disagree"):
        readback.whitebox(_write(tmp_path / "edited", d))


def _write(folder: Path, d: dict) -> Path:
    folder.mkdir()
    (folder / "gradient_canaries.json").write_text(json.dumps(d))
    return folder


def test_a_record_written_before_the_digests_still_reads(folders):
    a, _ = folders

    def change(d):
        d.pop("steps_sha256", None)
        d["probe"].pop("arrays_sha256")

    _edit(a, change)
    assert readback.whitebox(a)[0]["probe"]["steps"] == T


@pytest.mark.parametrize("value", ["abc", 12, "F" * 64])
def test_a_digest_that_is_not_a_sha256_is_a_type_error(folders, value):
    a, _ = folders
    _edit(a, lambda d: d["probe"].__setitem__("arrays_sha256", value))
    with pytest.raises(DpauditError, match="'probe.arrays_sha256' must be 64 lowercase hex digits"):
        readback.whitebox(a)
