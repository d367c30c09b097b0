"""Accounting answers kept on disk (dpaudit/accounting/disk_cache.py): a second process gets the first one's
interval without recomputing it or importing torch; another mechanism is another key; a damaged, edited,
impossible or foreign entry is reported and recomputed, never trusted; the re-derivation of `check --checkpoint`
reads none; "not applicable" is kept too; the cache can be turned off."""

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
    monkeypatch.setenv("DPAUDIT_STATE", str(tmp_path / "state"))
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
    with pytest.warns(disk_cache.CacheWarning, match="not a number"):
        assert accounting.interval(list(EV), 1e-5, "dpa_rdp") == a  # the damaged answer is not used
    (cache / f"{k}.json").write_text(json.dumps({"key": "another", "lower": None, "upper": 0.001}))
    accounting._interval.cache_clear()
    with pytest.warns(disk_cache.CacheWarning, match="another key"):
        assert accounting.interval(list(EV), 1e-5, "dpa_rdp") == a  # nor one filed under another key


def _entry(cache, accountant="pld"):
    k = disk_cache.key(accountant, accounting._BACKENDS[accountant], EV, 1e-5, "add_remove", None)
    return cache / f"{k}.json", k


def test_an_edited_interval_is_reported_and_recomputed(cache):
    """Whoever can write the cache (a CI cache, another user) cannot make an under-claim read as verified: an
    entry rewritten to a small, plausible interval fails its integrity code."""
    honest = accounting.interval(list(EV), 1e-5, "pld")
    path, k = _entry(cache)
    d = json.loads(path.read_text())
    path.write_text(json.dumps({**d, "lower": 0.1, "upper": 0.2}))  # the old integrity code kept
    accounting._interval.cache_clear()
    with pytest.warns(disk_cache.CacheWarning, match="integrity code"):
        again = accounting.interval(list(EV), 1e-5, "pld")
    assert again.epsilon == honest.epsilon > 0.2
    assert json.loads(path.read_text())["upper"] == honest.epsilon  # the fresh answer replaced it


def test_an_impossible_interval_is_refused_even_with_a_valid_integrity_code(cache):
    accounting.interval(list(EV), 1e-5, "pld")
    path, k = _entry(cache)
    secret = disk_cache._secret(False)
    for lo, hi, why in ((-10.0, -5.0, "upper bound"), (3.0, 1.0, "lower bound"), (float("nan"), 1.0, "lower bound")):
        entry = {"key": k, "lower": lo, "upper": hi, "detail": ""}
        entry["mac"] = disk_cache._mac(secret, entry)
        path.write_text(json.dumps(entry))
        accounting._interval.cache_clear()
        with pytest.warns(disk_cache.CacheWarning, match=why):
            assert accounting.interval(list(EV), 1e-5, "pld").epsilon > 0.2


def test_entries_another_machine_wrote_are_not_trusted(cache, monkeypatch, tmp_path):
    """A cache restored in CI (or copied) comes without this machine's secret: recomputed, never read."""
    accounting.interval(list(EV), 1e-5, "dpa_rdp")
    monkeypatch.setenv("DPAUDIT_STATE", str(tmp_path / "another-machine"))
    accounting._interval.cache_clear()
    calls = []
    real = accounting._backend
    monkeypatch.setattr(accounting, "_backend", lambda name: calls.append(name) or real(name))
    with pytest.warns(disk_cache.CacheWarning):
        accounting.interval(list(EV), 1e-5, "dpa_rdp")
    assert calls == ["dpa_rdp"]
    assert (tmp_path / "another-machine" / "accounting-cache.key").stat().st_mode & 0o077 == 0  # 0600


def test_the_rederivation_reads_no_cached_answer(cache, monkeypatch):
    accounting.interval(list(EV), 1e-5, "dpa_rdp")
    calls = []
    real = accounting._backend
    monkeypatch.setattr(accounting, "_backend", lambda name: calls.append(name) or real(name))
    accounting.interval(list(EV), 1e-5, "dpa_rdp")
    assert calls == []  # in-process: the same answer
    with disk_cache.bypassed():
        accounting.interval(list(EV), 1e-5, "dpa_rdp")
    assert calls == ["dpa_rdp"]  # computed again, although the disk (and this process) held it


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
    env = {"DPAUDIT_CACHE": str(tmp_path), "DPAUDIT_STATE": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"}
    code = ("import sys\nfrom dpaudit.cli import main\n"
            f"rc = main(['account', '--card', {str(card)!r}])\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', rc)\n")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-2000:]
    first, second = (r.stdout.strip().splitlines() for r in runs)
    assert first[:-1] == second[:-1]  # the same intervals and verdict
    assert second[-1] == "NO-TORCH 0", second[-1]


def test_an_empty_cache_variable_is_unset_not_the_working_folder(tmp_path, monkeypatch):
    """A CI job's `DPAUDIT_CACHE: ${{ env.X }}` with X unset sets it empty: that read as the working folder, so the
    assets and accounting caches were written into the user's checkout."""
    from dpaudit.accounting import disk_cache
    from dpaudit.tasks.assets import cache_dir

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    for empty in ("", "  "):
        monkeypatch.setenv("DPAUDIT_CACHE", empty)
        monkeypatch.setenv("DPAUDIT_STATE", empty)
        assert cache_dir() == tmp_path / "home" / ".cache" / "dpaudit"
        assert disk_cache.folder() == tmp_path / "home" / ".cache" / "dpaudit" / "accounting"
        assert disk_cache.key_file().parent == tmp_path / "home" / ".local" / "state" / "dpaudit"
    monkeypatch.setenv("DPAUDIT_CACHE", "relative/cache")
    assert cache_dir() == tmp_path / "relative" / "cache"  # a relative value: from the working folder, made absolute
