"""The probe's arrays file (``<stem>.probe.npz``) as an attacker or a careless copy leaves it: every case is refused
in one line (a DpauditError naming the file and the fix) before anything is inflated or allocated, and an
honest file still reads (docs/security.md)."""

from __future__ import annotations

import io
import json
import os
import zipfile

import numpy as np
import pytest

from dpaudit.errors import DpauditError
from dpaudit.evaluation import scoring


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    from tests.probe.test_probe import _loop

    folder, _ = _loop(tmp_path_factory.mktemp("arrays"), steps=12, m=50, clip=4)
    return folder


def _record(folder):
    f = folder / "gradient_canaries.json"
    return f, json.loads(f.read_text())


def _copy(honest, tmp_path):
    import shutil

    out = tmp_path / "ck"
    shutil.copytree(honest, out)
    return out


def _resign(folder):
    """What an attacker who edits the arrays also does: write the planted file's own sha256 into the record, so
    the defences below the digest (tests/probe/test_record_digests.py) are the ones tested here."""
    import hashlib

    f, d = _record(folder)
    arrays = folder / d["probe"]["arrays_file"]
    if "arrays_sha256" in d["probe"] and arrays.is_file():
        d["probe"]["arrays_sha256"] = hashlib.sha256(arrays.read_bytes()).hexdigest()
        f.write_text(json.dumps(d))


def _refused(folder, match):
    _resign(folder)
    with pytest.raises(DpauditError, match=match) as e:
        scoring.whitebox(folder)
    assert "\n" not in str(e.value)


def test_the_honest_file_reads(honest):
    rec = scoring.whitebox(honest)
    assert rec[0]["readings"] is not None


@pytest.mark.parametrize("name", ["/etc/hostname", "../outside.probe.npz"])
def test_a_path_outside_the_folder_is_refused(honest, tmp_path, name):
    out = _copy(honest, tmp_path)
    (tmp_path / "outside.probe.npz").write_bytes(b"x")
    f, rec = _record(out)
    rec["probe"]["arrays_file"] = name
    f.write_text(json.dumps(rec))
    _refused(out, "outside")


def test_a_fifo_is_refused_without_hanging(honest, tmp_path):
    out = _copy(honest, tmp_path)
    f, rec = _record(out)
    os.mkfifo(out / "pipe.probe.npz")
    rec["probe"]["arrays_file"] = "pipe.probe.npz"
    f.write_text(json.dumps(rec))
    _refused(out, "not a regular file")


def _arrays(out):
    _, rec = _record(out)
    return out / rec["probe"]["arrays_file"]


def _contents(a) -> dict:
    with np.load(a) as z:
        return {k: z[k] for k in z.files}


def test_a_truncated_archive_is_refused(honest, tmp_path):
    out = _copy(honest, tmp_path)
    a = _arrays(out)
    a.write_bytes(a.read_bytes()[: a.stat().st_size // 2])
    _refused(out, "not a readable array archive")


def test_a_header_claiming_80_gb_is_refused_before_allocating(honest, tmp_path):
    out = _copy(honest, tmp_path)
    a = _arrays(out)
    arrays = _contents(a)
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": (10 ** 10,)})
    with zipfile.ZipFile(a, "w") as zf:
        for k, v in arrays.items():
            if k == "sum_ratio":
                zf.writestr(f"{k}.npy", buf.getvalue() + b"\0" * 64)
            else:
                b = io.BytesIO()
                np.save(b, v)
                zf.writestr(f"{k}.npy", b.getvalue())
    _refused(out, "declares")


def test_a_decompression_bomb_is_refused_before_inflating(honest, tmp_path):
    out = _copy(honest, tmp_path)
    a = _arrays(out)
    with zipfile.ZipFile(a, "a", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("bomb.npy", b"\0" * (64 * 2 ** 20))  # 64 MiB of zeros deflate about 1000-fold
    _refused(out, "inflates")


def test_non_finite_readings_are_refused(honest, tmp_path):
    out = _copy(honest, tmp_path)
    a = _arrays(out)
    arrays = _contents(a)
    arrays["sum_ratio"] = np.full_like(arrays["sum_ratio"], np.nan)
    np.savez_compressed(a, **arrays)
    _refused(out, "NaN or infinite")
