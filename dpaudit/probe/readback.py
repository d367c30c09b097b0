"""The probe's evidence read back from a checkpoint folder with no model: the white-box canary records
(:func:`whitebox`), and from them the mechanism checks (:func:`mechanism_checks`) and noise checks
(:func:`noise_checks`) against the privacy card. ``dpaudit evaluate`` (step 1 and 3) and ``dpaudit check
--checkpoint`` (which re-derives them, dpaudit/gate/rederive.py) call these same functions. NumPy only.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from dpaudit.audit.rows import MechanismEvidence
from dpaudit.errors import DpauditError
from dpaudit.io import contained


def whitebox(path: Path | None, audited=None, card=None) -> list[dict] | None:
    """The white-box gradient canary sets a trainer recorded beside the checkpoint (None when there are none):
    ``gradient_canaries.json`` (audited as ``whitebox_gradient``) and any ``gradient_canaries_<kind>.json``
    (``whitebox_gradient_<kind>``), each with its ``name``. ``scores`` is the statistic
    :func:`dpaudit.audit.whitebox_lr.choose` fixes from the record and the card's ``audited`` mechanism (the per-step
    likelihood ratio when it can, else the sum), named in ``statistic``; the sum stays in ``sum_scores``. With the
    ``card``, a record another run wrote is refused (:func:`dpaudit.probe.record.check_binding`)."""
    if path is None:
        return None
    first = Path(path) / "gradient_canaries.json"
    files = ([first] if first.exists() else []) + sorted(Path(path).glob("gradient_canaries_*.json"))
    out = [{**_read_whitebox(f, audited, card), "name": _set_name(f, first)} for f in files]
    return out or None


def _set_name(f: Path, first: Path) -> str:
    """The test's name of record ``f``: ``whitebox_gradient``, or ``whitebox_gradient_<kind>`` with ``<kind>`` in
    a-z, 0-9 and _ (a name is an identifier in every output: a file name never carries markup into a report)."""
    if f == first:
        return "whitebox_gradient"
    kind = f.stem[len("gradient_canaries_"):]
    if not re.fullmatch(r"[a-z0-9_]{1,40}", kind):
        from dpaudit.io import printable

        raise DpauditError(f"{printable(f)}: a white-box record is named gradient_canaries_<kind>.json with <kind> of "
                           "1-40 characters in a-z, 0-9 and _; rename the file (its name becomes the test's name)")
    return f"whitebox_gradient_{kind}"


def _read_whitebox(f: Path, audited=None, card=None) -> dict:
    from dpaudit.audit import whitebox_lr
    from dpaudit.io import read_json
    from dpaudit.probe import integrity
    from dpaudit.probe import record as probe_record

    d = read_json(f, "gradient canary record", "")
    if not isinstance(d, dict):
        raise DpauditError(f"{f}: a gradient canary record is a JSON object; restore the file written with the model")
    probe_record.check_types(f, d)  # the typed boundary: a wrong type or range is one line, exit 2
    bound = probe_record.check_binding(f, d, card)
    try:
        signs, scores = np.asarray(d["signs"], dtype=int), np.asarray(d["scores"], dtype=float)
    except (KeyError, ValueError, TypeError, OverflowError):  # a string, a list or 1e308 among the numbers
        raise DpauditError(f"{f}: needs 'signs' (+1/-1) and 'scores' lists of equal length") from None
    if signs.ndim != 1 or signs.size != scores.size or signs.size < 2:
        raise DpauditError(f"{f}: 'signs' and 'scores' must be lists of the same length >= 2")
    if not np.isin(signs, (-1, 1)).all() or len(set(signs.tolist())) < 2:
        raise DpauditError(f"{f}: 'signs' must be +1 (inserted) or -1 (held out), with both present")
    if not np.isfinite(scores).all():
        raise DpauditError(f"{f}: the white-box canary scores must be finite numbers; the run that wrote them "
                           "diverged or the file is damaged")
    from dpaudit.options import GRADIENT_CANARY_KINDS

    if d.get("kind") not in GRADIENT_CANARY_KINDS:
        raise DpauditError(f"{f}: 'kind' must be one of {', '.join(GRADIENT_CANARY_KINDS)}, got {d.get('kind')!r}")
    d = {**d, "signs": signs, "scores": scores}
    try:
        llr = np.asarray((d.get("online") or {}).get("llr", scores), dtype=float)
    except (ValueError, TypeError, OverflowError):
        llr = np.full(1, np.nan)  # refused below, in the one line for a damaged llr
    if llr.shape != scores.shape or not np.isfinite(llr).all():
        raise DpauditError(f"{f}: 'online.llr' must be one finite number per canary; the file is damaged")
    if d.get("steps_file"):
        steps_file = contained(f.parent, d["steps_file"], f"{f.name}: steps_file")
        integrity.check_digest(steps_file, d.get("steps_sha256"), f.name)
        d["steps_array"] = _read_steps(steps_file, signs.size, scores)
    integrity.check_steps(f, d, None if d.get("steps_array") is None else int(d["steps_array"].shape[0]))
    from dpaudit.audit.mechanism import NONE

    chosen, stat, params = whitebox_lr.scores(d, audited or NONE)
    from dpaudit.audit import noise_check

    if noise_check.applies(d, stat):  # what dpaudit/audit/noise_check.py needs of the per-step projections
        d["noise_check"] = {**noise_check.summarise(d["steps_array"]), "noise_multiplier": params["noise_multiplier"]}
    elif params.get("online") and d.get("kind") in noise_check.KINDS:  # the sums the probe kept online
        o = d["online"]
        d["noise_check"] = {"values": int(o["values"]), "steps": int(o["steps"]), "m": int(signs.size),
                            "sum_of_squares": float(o["sum_of_squares"]), "noise_multiplier": params["noise_multiplier"]}
    d["readings"] = probe_record.read(f.parent, d, d.get("steps_array"), signs)  # the probe's, for the checks
    if d["readings"] is not None:  # tied to the weights beside it? (dpaudit/probe/fingerprint.py)
        from dpaudit.probe import fingerprint

        d["weights_check"] = fingerprint.compare((d.get("probe") or {}).get("weights"), model_dir(f.parent))
    d.pop("steps_array", None)
    return {**d, "scores": chosen, "sum_scores": scores, "statistic": stat, "statistic_params": params,
            "bound_to_card": bound}


def _read_steps(f: Path, m: int, sums: np.ndarray) -> np.ndarray:
    """The (steps, m) per-step projections; they must add up to the recorded sums. The .npy header's shape and
    dtype are checked against m and the file's size before anything is allocated."""
    try:
        with open(f, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(fh)
            offset = fh.tell()
        need = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if len(shape) != 2 or shape[1] != m or dtype.kind != "f" or need != f.stat().st_size - offset:
            raise DpauditError(f"{f}: per-step projections must be a float (steps, {m}) array filling the file, "
                               f"the header declares {dtype} {shape} ({need:,} bytes) in {f.stat().st_size:,}; "
                               "the file is damaged or from another run")
        a = np.load(f, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DpauditError(f"{f}: cannot read the per-step canary projections ({e}); restore the file or drop "
                           "'steps_file' from the record") from None
    if a.ndim != 2 or a.shape[1] != m or not np.isfinite(a).all():
        raise DpauditError(f"{f}: per-step projections must be a finite (steps, {m}) array, got shape {a.shape}")
    if not np.allclose(a.astype(np.float64).sum(axis=0), sums, rtol=1e-3, atol=1e-3 * max(1, a.shape[0]) ** 0.5):
        raise DpauditError(f"{f}: the per-step projections do not add up to the record's scores; the two files "
                           "come from different runs")
    return a


def noise_checks(whitebox: list | None, confidence: float) -> list[dict]:
    """Per white-box canary set that allows it, how much noise its recorded updates carry at most
    (dpaudit/audit/noise_check.py): a check of the card's sigma beside the verdict, not one of its tests."""
    from dpaudit.audit import noise_check

    return [{"attack": w["name"], "kind": w["kind"], "coordinates": (w.get("probe") or {}).get("coordinates", "model"),
             **noise_check.from_sums(w["noise_check"],
                                                                             w["noise_check"]["noise_multiplier"],
                                                                             confidence)}
            for w in whitebox or [] if w.get("noise_check")]


def mechanism_checks(whitebox: list | None, card) -> list[MechanismEvidence]:
    """The run-time checks of the probe's readings against the card (dpaudit/audit/mechanism_checks.py): one
    entry per optimizer watched, read from its first orthonormal canary set (the others watched the same steps)."""
    from dpaudit.audit import mechanism_checks as mc
    from dpaudit.audit import noise_check

    watched = [w for w in whitebox or [] if w.get("readings") is not None]
    runs = (card.extra or {}).get("probe_runs") if card is not None and isinstance(card.extra, dict) else None
    if not whitebox and runs and card.is_private:  # the card points to evidence the folder does not hold
        return [MechanismEvidence(
            "whitebox_gradient", "records missing", None, None, 1, True, 0.0,
            (mc.row("records", "fail", f"the privacy card names probe run(s) {', '.join(str(r)[:40] for r in runs)} "
                    "but the folder holds no record of them (gradient_canaries*.json): the evidence of how the "
                    "mechanism ran is missing; restore the records written with the model", 0.0),))]
    if not watched:
        return []
    w = next((w for w in watched if w["kind"] in noise_check.KINDS), watched[0])
    r = w["readings"]
    if w["kind"] not in noise_check.KINDS:  # dense canaries overlap: their projections are not independent noise
        r = mc.Readings(**{**r.__dict__, "heldout_ss": None, "heldout_m": 0})
    view = card_view(card, float(r.probe.get("sample_rate", 0.0)))
    tie = [mc.row("weights", *w["weights_check"], 0.0)] if w.get("weights_check") else []  # deterministic
    return [MechanismEvidence(w["name"], r.probe.get("mode"), r.probe.get("coordinates"), r.probe.get("optimizer"),
                              r.probe.get("world_size", 1), bool(w.get("bound_to_card")), mc.ALPHA,
                              tuple(mc.run(r, view) + tie))]


def model_dir(folder: Path) -> Path:
    """Where a checkpoint folder keeps its weights: model/ (dpaudit's layout), else the folder itself (a plain
    Hugging Face output folder; dpaudit.checkpoint.Checkpoint.model_dir reads the same layout)."""
    return folder / "model" if (folder / "model").is_dir() else folder


def card_view(card, probe_rate: float):
    """What ``card`` says of the mechanism a probe sampling at ``probe_rate`` watched: the events at that rate (the
    last rated event's rate when none is, so the sampling check names the mismatch)."""
    from dpaudit.audit.mechanism_checks import CardView

    events = [e.to_dict() for e in card.events]
    rated = [e for e in events if e.get("sample_rate") is not None]
    match = [e for e in rated if np.isclose(float(e["sample_rate"]), probe_rate, rtol=1e-6, atol=0)]
    gauss = {float(e["noise_multiplier"]) for e in match if e.get("type") == "subsampled_gaussian"}
    only_gauss = match and all(e.get("type") == "subsampled_gaussian" for e in match) and len(gauss) == 1
    return CardView(sample_rate=float((match or rated)[-1]["sample_rate"]) if rated else None,
                    noise_multiplier=gauss.pop() if only_gauss else None,
                    steps=sum(int(e.get("steps", 0)) for e in match) if match else None,
                    clipping_norm=card.clipping_norm, dataset_size=card.dataset_size,
                    expected_batch_size=card.expected_batch_size,
                    sampler="shuffle" if any(e.get("sampler") == "shuffle" for e in (match or rated)) else "poisson")
