"""The typed boundary of a probe record (dpaudit/probe/record.py: check_types, non_finite): a known field of the
wrong type or range is one line and exit 2 in `evaluate` (it was exit 3, a traceback, for a list or null where a
rate or a step count is), and the probe never saves NaN or infinity."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpaudit import api
from dpaudit.cli import main
from dpaudit.errors import DpauditError
from tests.gate.test_rederive_evidence import _folder

pytestmark = pytest.mark.filterwarnings("ignore")

EDITS = [
    (("sample_rate",), [0.1], "sample_rate"),
    (("sample_rate",), None, "sample_rate"),
    (("sample_rate",), "0.1", "sample_rate"),
    (("sample_rate",), 1.5, "sample_rate"),
    (("m",), "50", "'m'"),
    (("steps",), -3, "'steps'"),
    (("probe", "steps"), [40], "probe.steps"),
    (("probe", "steps"), None, "probe.steps"),
    (("probe", "sample_rate"), [0.1], "probe.sample_rate"),
    (("probe", "world_size"), 0, "probe.world_size"),
    (("probe", "noise_multiplier"), "1.0", "probe.noise_multiplier"),
    (("probe", "noise_tensors"), "w", "probe.noise_tensors"),
    (("probe", "optimizer"), 7, "probe.optimizer"),
    (("probe", "online", "alpha"), "nan", "probe.online.alpha"),
    (("probe", "divisor"), True, "probe.divisor"),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory, tiny_model_factory):
    return _folder(tmp_path_factory.mktemp("typed"), tiny_model_factory, half_noise=False)


@pytest.mark.parametrize("path,value,needle", EDITS, ids=[".".join(p) + f"={v!r}" for p, v, _ in EDITS])
def test_a_wrongly_typed_field_is_one_line_and_exit_2(folder, tmp_path, path, value, needle, capsys):
    f = folder / "gradient_canaries.json"
    orig = f.read_text()
    d = json.loads(orig)
    x = d
    for k in path[:-1]:
        x = x[k]
    x[path[-1]] = value
    f.write_text(json.dumps(d))
    try:
        assert main(["evaluate", str(folder), "--out", str(tmp_path / "r"), "--attacks", "loss", "--quiet"]) == 2
    finally:
        f.write_text(orig)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and "internal error" not in err, err
    assert not (tmp_path / "r").exists()


def test_the_honest_record_passes_the_boundary(folder, tmp_path):
    assert main(["evaluate", str(folder), "--out", str(tmp_path / "r"), "--attacks", "loss", "--quiet"]) in (0, 1)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_the_probe_never_saves_a_non_finite_record(tmp_path, bad):
    shapes = {"w": (32,)}
    probe = api.functional_probe(shapes, sample_rate=0.5, clipping_norm=1.0, noise_multiplier=1.0,
                                 expected_batch_size=5.0, m=8, on_fail=None)
    rng = np.random.default_rng(0)
    for t in range(4):
        s = probe.add_canaries({"w": np.zeros(32)}, records=5)
        update = (np.asarray(s["w"]) + rng.normal(size=32)) / 5.0
        if t == 2:
            update[:] = bad  # a diverged step: every coordinate
        probe.observe({"w": update})
    with pytest.raises(DpauditError, match="NaN or infinity"):
        probe.save(tmp_path)
    assert list(tmp_path.iterdir()) == []
