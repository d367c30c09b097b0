"""Accounting answers kept on disk (dpaudit/accounting/disk_cache.py): a second process gets the first one's
interval without recomputing it or importing torch; another mechanism is another key; a damaged file is
recomputed; "not applicable" is kept too; the cache can be turned off."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dpaudit import accounting
from dpaudit.accounting import disk_cache
from dpaudit.accounting.events import SubsampledGaussian

EV = (SubsampledGaussian(sample_rate=0.01, noise_multiplier=1.1, steps=300),)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DPAUDIT_CACHE", str(tmp_path))
    monkeypatch.setenv("DPAUDIT_ACCOUNTING_CACHE", "1")
    accounting._interval.cache_clear()
    yield tmp_path / "accounting"
    accounting._interval.cache_clear()


def test_a_stored_answer_is_returned_without_recomputing(cache, monkeypatch):
    first = accounting.interval(list(EV), 1e-5, "pld")
    assert len(list(cache.glob("*.json"))) == 1
    accounting._interval.cache_clear()
    monkeypatch.setattr(accounting, "_backend", lambda name: pytest.fail("recomputed despite the cache"))
    again = accounting.interval(list(EV), 1e-5, "pld")
    assert again == first


def test_another_mechanism_is_another_key_and_damage_is_recomputed(cache):
    a = accounting.interval(list(EV), 1e-5, "dpa_rdp")
    other = (SubsampledGaussian(sample_rate=0.01, noise_multiplier=1.1, steps=301),)
    b = accounting.interval(list(other), 1e-5, "dpa_rdp")
    assert b.epsilon > a.epsilon and len(list(cache.glob("*.json"))) == 2
    k = disk_cache.key("dpa_rdp", "dpa_rdp", EV, 1e-5, "add_remove", None)
    (cache / f"{k}.json").write_text(json.dumps({"key": k, "lower": None, "upper": "oops"}))
    accounting._interval.cache_clear()
    assert accounting.interval(list(EV), 1e-5, "dpa_rdp") == a  # the damaged answer is not used
    (cache / f"{k}.json").write_text(json.dumps({"key": "another", "lower": None, "upper": 0.001}))
    accounting._interval.cache_clear()
    assert accounting.interval(list(EV), 1e-5, "dpa_rdp") == a  # nor one filed under another key


def test_not_applicable_is_kept_and_raised_again(cache):
    with pytest.raises(accounting.NotApplicable):
        accounting.interval(list(EV), 1e-5, "lmo_vector")
    accounting._interval.cache_clear()
    with pytest.raises(accounting.NotApplicable, match="subsampled_laplace_mixture"):
        accounting.interval(list(EV), 1e-5, "lmo_vector")


def test_off_writes_nothing(cache, monkeypatch):
    monkeypatch.setenv("DPAUDIT_ACCOUNTING_CACHE", "0")
    accounting.interval(list(EV), 1e-5, "dpa_rdp")
    assert not cache.exists() or not list(cache.glob("*.json"))


def test_a_cached_card_is_accounted_without_torch(tmp_path):
    card = Path(__file__).resolve().parents[2] / "reports" / "demo" / "dp-eps8" / "checkpoint" / "privacy_card.json"
    env = {"DPAUDIT_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"}
    code = ("import sys\nfrom dpaudit.cli import main\n"
            f"rc = main(['account', '--card', {str(card)!r}])\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', rc)\n")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-2000:]
    first, second = (r.stdout.strip().splitlines() for r in runs)
    assert first[:-1] == second[:-1]  # the same intervals and verdict
    assert second[-1] == "NO-TORCH 0", second[-1]
