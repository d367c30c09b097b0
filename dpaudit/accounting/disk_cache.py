"""Accounting answers kept on disk, keyed by the mechanism, so a card is accounted once per machine.

``dpaudit account --card``, ``dpaudit evaluate`` and every variant of ``dpaudit run`` ask the same accountants about
the same mechanism; a PLD or PRV pass at a fine discretisation costs seconds and the Opacus accountants import
torch. The answer (an interval, or the accountant's "not applicable" reason) is stored under
``$DPAUDIT_CACHE/accounting/`` (default ``~/.cache/dpaudit``), named by a SHA-256 of everything it depends on: the
accountant, the events (every field), δ, the neighbouring relation, the dataset size, the source of every module
of dpaudit/accounting/ and the versions of opacus and dp-accounting.
A different mechanism, code or library version is a different key, never a stale answer. ``DPAUDIT_ACCOUNTING_CACHE=0``
turns it off; a cache that cannot be written is skipped silently (it is an optimisation, never a requirement).

The same store keeps calibrated noise multipliers (:func:`calibration_key`; a run, its resume, its dry run and its
torchrun ranks calibrate the same mechanism in other processes), each an upper value with no lower one.

The cache can never decide a verdict (docs/security.md): a calibrated sigma read from it is the noise a run trains
with, and the card that run writes is accounted again from that sigma, as any other card. An answer is used only when

* it is **well-formed**: filed under its own key, a finite 0 <= lower <= upper (upper may be infinite), a string
  detail, or a "not applicable" reason; and
* **this machine wrote it**: every entry carries an HMAC-SHA256 under a 32-byte secret kept outside the cache
  folder (``$DPAUDIT_STATE/accounting-cache.key``, default ``~/.local/state/dpaudit``, mode 0600), so an entry
  edited by hand, restored from a CI cache or copied from another machine is not trusted.

Any other file under a key is reported (a :class:`CacheWarning`, one line) and recomputed, and the fresh answer
replaces it. :func:`bypassed` ignores the cache altogether: ``dpaudit check --checkpoint``, the re-derivation that
trusts nothing, recomputes every interval under it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import math
import os
import secrets
import warnings
from importlib import metadata
from pathlib import Path

from dpaudit.errors import DpauditError
from dpaudit.io import write_atomic

VERSION = 2  # 2: entries carry an HMAC (version 1 entries are other keys, never read)
_BYPASS = 0  # > 0 inside bypassed(): read by every accountant thread at call time


class CacheWarning(UserWarning):
    """An accounting cache entry that was not used (damaged, edited or not written by this machine)."""


@contextlib.contextmanager
def bypassed():
    """Within: no cached answer is read (every interval is computed; fresh answers are still stored)."""
    global _BYPASS
    _BYPASS += 1
    try:
        yield
    finally:
        _BYPASS -= 1


def trusted() -> bool:
    """Whether cached answers may be read now."""
    return enabled() and _BYPASS == 0


def enabled() -> bool:
    return os.environ.get("DPAUDIT_ACCOUNTING_CACHE", "1").lower() not in ("0", "false", "no", "off")


def folder() -> Path:
    from dpaudit.io import env_folder

    return env_folder("DPAUDIT_CACHE", ".cache/dpaudit") / "accounting"


def key_file() -> Path:
    """The machine's secret, outside the cache folder (a CI job that restores the cache does not restore it)."""
    from dpaudit.io import env_folder

    return env_folder("DPAUDIT_STATE", ".local/state/dpaudit") / "accounting-cache.key"


def _secret(create: bool) -> bytes | None:
    p = key_file()
    try:
        b = p.read_bytes()
        if len(b) == 32:
            return b
    except OSError:
        pass
    if not create:
        return None
    b = secrets.token_bytes(32)
    try:
        p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not p.exists() and not p.is_symlink():  # another process may have made one meanwhile: theirs wins
            write_atomic(p, lambda tmp: tmp.write_bytes(b), mode=0o600)
        return _secret(False)
    except (OSError, DpauditError):
        return None  # no secret, no cache: answers are computed and not stored


def _mac(secret: bytes, entry: dict) -> str:
    body = json.dumps({k: v for k, v in entry.items() if k != "mac"}, sort_keys=True, default=repr)
    return hmac.new(secret, body.encode(), hashlib.sha256).hexdigest()


def _well_formed(d, k: str) -> str | None:
    """Why ``d`` is not a usable answer for key ``k`` (None when it is)."""
    if not isinstance(d, dict) or d.get("key") != k:
        return "filed under another key"
    if "not_applicable" in d:
        return None if isinstance(d["not_applicable"], str) else "a reason that is not text"
    lo, hi = d.get("lower"), d.get("upper")
    if not isinstance(hi, (int, float)) or isinstance(hi, bool) or math.isnan(hi) or hi < 0:
        return "an upper bound that is not a number >= 0"
    if lo is not None and (not isinstance(lo, (int, float)) or isinstance(lo, bool) or not math.isfinite(lo)
                           or not 0 <= lo <= hi):
        return "a lower bound outside [0, upper]"
    if not isinstance(d.get("detail", ""), str):
        return "a detail that is not text"
    return None


def _code_digest(backend_module: str) -> str:
    here = Path(__file__).resolve().parent
    h = hashlib.sha256(backend_module.encode())
    for f in sorted(here.glob("*.py")):  # every accountant's helpers too (lmo_vector reads lmo_noise, ...)
        try:
            h.update(os.fsencode(f.name) + f.read_bytes())
        except OSError:
            h.update(os.fsencode(f.name))
    for dist in ("opacus", "dp-accounting"):
        try:
            h.update(f"{dist}={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{dist}=none".encode())
    return h.hexdigest()


def key(accountant: str, backend_module: str, events: tuple, delta: float, relation: str, dataset_size) -> str:
    body = {"v": VERSION, "accountant": accountant, "events": [e.to_dict() for e in events], "delta": repr(float(delta)),
            "relation": relation, "dataset_size": dataset_size, "code": _code_digest(backend_module)}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=repr).encode()).hexdigest()


def calibration_key(mechanism: tuple) -> str:
    """The key of a calibrated noise multiplier: ``mechanism`` is calibrate_sigma's normalised arguments (target,
    delta, q, steps, accountant, tol, sampler); the code is this package's (the search and every accountant)."""
    body = {"v": VERSION, "calibrate": [repr(x) for x in mechanism], "code": _code_digest("calibrate_sigma")}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def calibrated(mechanism: tuple, search) -> float:
    """The noise multiplier ``search(*mechanism)`` finds, read from the cache where this machine stored it (a run's
    resume, its dry run and its torchrun ranks are other processes asking for the same one)."""
    k = calibration_key(mechanism)
    hit = get(k)
    if hit is not None and "upper" in hit and math.isfinite(hit["upper"]) and hit["upper"] > 0:
        return float(hit["upper"])
    sigma = search(*mechanism)
    put(k, {"lower": None, "upper": sigma, "detail": "calibrated noise multiplier"})
    return sigma


def get(k: str) -> dict | None:
    """The stored answer: {"lower", "upper", "detail"} or {"not_applicable": reason}; None when absent, bypassed,
    or not usable (then reported: :class:`CacheWarning`)."""
    if not trusted():
        return None
    p = folder() / f"{k}.json"
    try:
        if not p.is_file():
            return None
        if p.stat().st_size > 65536:
            return _untrusted(p, "larger than any answer")
        d = json.loads(p.read_text())
    except (OSError, ValueError):
        return _untrusted(p, "not readable JSON")
    why = _well_formed(d, k)
    if why:
        return _untrusted(p, why)
    secret = _secret(False)
    mac = d.get("mac")
    if secret is None or not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(secret, d)):
        return _untrusted(p, "not written by this machine's dpaudit (its integrity code does not match)")
    return d


def _untrusted(p: Path, why: str) -> dict | None:
    """Warn that the cache entry ``p`` is not used (and why); the caller's answer is then None (recompute)."""
    warnings.warn(f"accounting cache entry {p} not used: {why}; the interval is recomputed", CacheWarning,
                  stacklevel=3)
    return None


def put(k: str, answer: dict) -> None:
    if not enabled():
        return
    secret = _secret(True)
    if secret is None:
        return
    entry = {**answer, "key": k}
    entry["mac"] = _mac(secret, entry)
    d = folder()
    try:
        d.mkdir(parents=True, exist_ok=True)
        write_atomic(d / f"{k}.json", lambda tmp: tmp.write_text(json.dumps(entry)))
    except (OSError, DpauditError):
        return
