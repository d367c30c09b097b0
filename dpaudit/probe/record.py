"""The files of one white-box canary record (docs/probe.md), as a checkpoint holds them:

    gradient_canaries[_<kind>].json         plan, signs, summed scores, the probe's readings (``probe``)
    <same stem>.steps.npy                   (steps, m) float32: every update's projection on every canary
    <same stem>.probe.npz                   the probe's per-step arrays (records, clipped-sum ratio, clip canaries)

Written by dpaudit's trainers (trainers/fit.py) and by :meth:`dpaudit.probe.Probe.save`; read by
:func:`dpaudit.evaluation.scoring.whitebox`.
"""

from __future__ import annotations

import io
import zipfile

import numpy as np

from dpaudit.probe.integrity import check_digest, digest

NOISE_ARRAYS = ("noise_ss_step", "noise_n_step", "noise_cross_step", "noise_ss_tensor", "noise_n_tensor")
MAX_ARRAY_BYTES = 2 ** 31  # the probe's arrays together, uncompressed (10^6 steps x 256 clip canaries fits)
MAX_RATIO = 1000  # uncompressed / compressed bytes of one member over 1 MiB (np.savez_compressed of real readings: < 20)


def files(record: dict, stem: str) -> dict:
    """{file name: JSON-able dict or bytes} of one record (``step_projections`` and ``probe.arrays`` become files)."""
    record = dict(record)
    out = {}
    steps = record.pop("step_projections", None)
    if steps is not None:
        record["steps_file"] = f"{stem}.steps.npy"
        out[record["steps_file"]] = npy_bytes(steps)
        record["steps_sha256"] = digest(out[record["steps_file"]])  # compared whenever the file is read
    probe = dict(record.get("probe") or {})
    arrays = probe.pop("arrays", None)
    if arrays is not None:
        probe["arrays_file"] = f"{stem}.probe.npz"
        buf = io.BytesIO()
        np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
        out[probe["arrays_file"]] = buf.getvalue()
        probe["arrays_sha256"] = digest(out[probe["arrays_file"]])
    if probe:
        record["probe"] = probe
    out[f"{stem}.json"] = record
    return out


# The typed boundary of a record (docs/security.md, "Typed records"): every field dpaudit reads, with its type;
# fields it does not know are kept (a newer writer), a known field of the wrong type is refused in one line.
_TOP = {"schema_version": "int", "kind": "str", "m": "int", "seed": "int?", "clipping_norm": "num?",
        "sample_rate": "rate", "signs": "list", "times_sampled": "list", "scores": "list", "score": "str",
        "steps": "int", "steps_file": "str", "steps_sha256": "sha", "probe": "dict?", "online": "dict?"}
_PROBE = {"schema_version": "int", "run_id": "str?", "mode": "str", "coordinates": "str?", "optimizer": "str?",
          "world_size": "int+", "steps": "int", "sample_rate": "rate0", "sampler": "str", "clipping_norm": "num?",
          "noise_multiplier": "num?", "divisor": "num?", "divisor_from": "str", "clip_canaries": "int", "clip_multiple": "num",
          "clip_entry": "str?", "sum_tolerance": "num", "clip_exact_tolerance": "num", "noise_tensors": "list",
          "coverage": "dict", "online": "dict", "arrays_file": "str", "arrays_sha256": "sha", "dataset_size": "int?",
          "weights": "dict?"}
_ONLINE = {"statistic": "str", "sample_rate": "rate0", "noise_multiplier": "num", "steps": "int", "values": "int",
           "sum_of_squares": "num", "llr": "list"}
_PROBE_ONLINE = {"alpha": "num", "sigma": "num?", "steps": "int", "statistical": "list"}
_KINDS = {"int": "an integer >= 0", "int?": "an integer >= 0 or null", "int+": "an integer >= 1",
          "num": "a finite number", "num?": "a finite number or null", "rate": "a number in (0, 1]",
          "rate0": "a number in [0, 1]", "str": "a string", "str?": "a string or null", "list": "a list",
          "dict": "an object", "dict?": "an object or null", "sha": "64 lowercase hex digits (a sha256)"}


def _fits(v, kind: str) -> bool:
    import math

    if kind.endswith("?") and v is None:
        return True
    base = kind.rstrip("?+")
    if base == "int":
        return isinstance(v, int) and not isinstance(v, bool) and v >= (1 if kind == "int+" else 0)
    if base in ("num", "rate", "rate0"):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return False
        return base == "num" or (0 < v <= 1 if base == "rate" else 0 <= v <= 1)
    if base == "sha":
        return isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v)
    return isinstance(v, {"str": str, "list": list, "dict": dict}[base])


def check_types(f, record: dict) -> None:
    """Refuse (one line, exit 2) a record whose known fields have the wrong type or range: a string where a
    number is, a list for a rate, null for a step count, a non-finite number."""
    from dpaudit.errors import DpauditError
    from dpaudit.io import printable

    tables = [((), record, _TOP)]
    if isinstance(record.get("probe"), dict):
        tables.append((("probe",), record["probe"], _PROBE))
        if isinstance(record["probe"].get("online"), dict):
            tables.append((("probe", "online"), record["probe"]["online"], _PROBE_ONLINE))
    if isinstance(record.get("online"), dict):
        tables.append((("online",), record["online"], _ONLINE))
    for path, d, table in tables:
        for key, kind in table.items():
            if key in d and not _fits(d[key], kind):
                where = ".".join((*path, key))
                raise DpauditError(f"{f}: '{where}' must be {_KINDS[kind]}, got {printable(repr(d[key]))[:60]}; the "
                                   "record is damaged or edited: restore the record written with the model")
    if isinstance(record.get("probe"), dict) and record["probe"].get("weights") is not None:
        from dpaudit.probe import fingerprint

        fingerprint.check(f, record["probe"]["weights"])  # its own structure: tensors, coordinates, finite values


NO_READING_IS_NAN = ("clip_exact",)  # the probe's arrays where NaN is a step without that reading, not a bad value


def non_finite(record: dict, path: str = "") -> str | None:
    """The first place in a record's JSON part (or its per-step projections) holding NaN or infinity, else None."""
    import math

    if isinstance(record, dict):
        for k, v in record.items():
            if k == "arrays" and isinstance(v, dict):  # NaN means "no reading" in clip_exact only
                v = {name: a for name, a in v.items() if name not in NO_READING_IS_NAN}
            hit = non_finite(v, f"{path}.{k}" if path else str(k))
            if hit:
                return hit
    elif isinstance(record, (list, tuple)):
        for i, v in enumerate(record):
            hit = non_finite(v, f"{path}[{i}]")
            if hit:
                return hit
    elif isinstance(record, np.ndarray) and record.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(record))
        if bad.size:
            return f"{path}[{np.unravel_index(int(bad[0]), record.shape)}]"
    elif isinstance(record, (float, np.floating)) and not math.isfinite(float(record)):
        return path
    return None


def bind(card, run_ids):
    """``card`` (a PrivacyCard) naming ``run_ids`` in ``extra.probe_runs`` (added to those it names already): the
    one place a card is bound to probe runs (``probe.bind``, dpaudit's trainers)."""
    from dataclasses import replace

    runs = list(card.extra.get("probe_runs") or [])
    runs += [r for r in run_ids if r not in runs]
    return replace(card, extra={**card.extra, "probe_runs": runs}) if runs else card


def run_id_of(f) -> str:
    """The probe run identity a gradient canary record ``f`` carries (``probe.run_id``); one line naming the fix
    when the file is not such a record or carries none."""
    from dpaudit.errors import DpauditError
    from dpaudit.io import read_json

    d = read_json(f, "gradient canary record", "pass a gradient_canaries*.json the probe wrote")
    probe = d.get("probe") if isinstance(d, dict) else None
    rid = probe.get("run_id") if isinstance(probe, dict) else None
    if not isinstance(rid, str) or not rid:
        raise DpauditError(f"{f}: not a record the probe wrote with a run identity (no probe.run_id); pass a "
                           "gradient_canaries*.json written by dpaudit's probe")
    return rid


def check_binding(f, record: dict, card) -> bool:
    """Refuse (one line) a white-box record that is not the card's run's: the card names its probes' run
    identities (``extra.probe_runs``, written by dpaudit's trainers, ``card_from_opacus`` and ``probe.bind``) and
    the record carries its own (``probe.run_id``); a non-private run's record beside a card that claims epsilon is
    refused whatever the card names. Returns whether the record is bound to the card (False: the card names no
    probe run, as a card written by hand or before run identities)."""
    from dpaudit.errors import DpauditError

    probe = record.get("probe") if isinstance(record.get("probe"), dict) else {}
    rid = probe.get("run_id")
    if card is None:
        return False
    if card.is_private and probe.get("mode") == "non-private":
        raise DpauditError(f"{f}: this white-box record was written by a non-private run (its probe watched no DP "
                           f"optimizer), beside a card that claims epsilon = {card.claim.epsilon:g}: it is not this "
                           "model's evidence; restore the record written with this model, or remove it")
    runs = card.extra.get("probe_runs") if isinstance(card.extra, dict) else None
    if not runs:
        return False
    if not isinstance(runs, list) or not all(isinstance(r, str) for r in runs):
        raise DpauditError("the privacy card's extra.probe_runs must be a list of run-identity strings; restore the "
                           "card written with the model")
    if rid not in runs:
        raise DpauditError(f"{f}: this white-box record comes from another run (run id {str(rid)[:40]!r}) than the "
                           f"privacy card's ({', '.join(r[:40] for r in runs)}): a card and its records must come "
                           "from the same training run; restore the record written with this model, or remove it")
    return True


def npy_bytes(a) -> bytes:
    """``a`` as the bytes of a .npy file."""
    buf = io.BytesIO()
    np.save(buf, np.asarray(a), allow_pickle=False)
    return buf.getvalue()


def read(folder, record: dict, steps_array, signs):
    """The probe's readings of one record (:class:`dpaudit.audit.mechanism_checks.Readings`), or None when the
    record has none (a record written before the probe, or a non-private run's)."""
    from pathlib import Path

    from dpaudit.audit.mechanism_checks import Readings
    from dpaudit.errors import DpauditError

    probe = record.get("probe")
    if not probe or probe.get("mode") == "non-private":
        return None
    from dpaudit.io import contained

    # inside the record's folder and a regular file (no absolute path, no ../, no FIFO), checked before reading
    f = contained(Path(folder), str(probe.get("arrays_file", "")), "the probe record's arrays_file")
    check_digest(f, probe.get("arrays_sha256"), "the probe record")
    _check_npz(f)
    try:
        with np.load(f, allow_pickle=False) as z:
            arrays = {k: z[k] for k in ("records_per_step", "sum_ratio", "clip_projections", "clip_sampled")}
            online_ss = z["heldout_ss"] if "heldout_ss" in z.files else None
            extra = {k: z[k] for k in NOISE_ARRAYS + ("clip_exact",) if k in z.files}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise DpauditError(f"{f}: cannot read the probe's per-step arrays ({type(e).__name__}: {e}); restore the file "
                           "written with the record") from None
    for k, a in {**arrays, **extra, "heldout_ss": online_ss}.items():
        if a is not None and a.dtype.kind not in "biuf":
            raise DpauditError(f"{f}: the probe's {k} holds {a.dtype} values, not numbers; restore the file "
                               "written with the record")
        # NaN in clip_exact means "no exact reading at this step" (the check then uses the sampled clip canaries)
        if a is not None and a.dtype.kind == "f" and (np.isinf(a).any() if k == "clip_exact" else not np.isfinite(a).all()):
            raise DpauditError(f"{f}: the probe's {k} holds NaN or infinite values; no check can be run on them: "
                               "restore the file written with the record")
    T = int(probe.get("steps", -1))
    for k in ("clip_projections", "clip_sampled"):  # no clip canaries: (T, 0)
        if arrays[k].size == 0:
            arrays[k] = arrays[k].reshape(T, 0)
    if any(a.shape[0] != T for a in arrays.values()):
        raise DpauditError(f"{f}: the probe's arrays do not have one row per step ({T}); the files come from "
                           "different runs")
    heldout = None
    m_out = int(np.sum(np.asarray(signs) < 0))
    if steps_array is not None and steps_array.shape[0] == T:
        x = np.asarray(steps_array, dtype=np.float64)[:, np.asarray(signs) < 0]
        heldout = np.sum(x * x, axis=1)
    elif online_ss is not None and online_ss.shape == (T,):  # the probe kept only these sums (O(m) mode)
        heldout = online_ss.astype(np.float64)
    noise = None
    if all(k in extra for k in NOISE_ARRAYS):
        noise = {k: extra[k] for k in NOISE_ARRAYS} | {"names": probe.get("noise_tensors")}
        if noise["noise_ss_step"].shape != (T,) or noise["noise_ss_tensor"].shape != noise["noise_n_tensor"].shape:
            raise DpauditError(f"{f}: the probe's noise readings do not have one row per step ({T}) and one per tensor; "
                               "the files come from different runs")
    clip_exact = extra.get("clip_exact")
    if clip_exact is not None and clip_exact.size == 0:
        clip_exact = None
    if clip_exact is not None and clip_exact.shape != (T,):
        raise DpauditError(f"{f}: the probe's clip readings do not have one row per step ({T}); the files come from "
                           "different runs")
    return Readings(probe={k: v for k, v in probe.items() if k != "arrays_file"},
                    records=arrays["records_per_step"].astype(np.int64),
                    sum_ratio=arrays["sum_ratio"].astype(np.float64),
                    clip_projections=arrays["clip_projections"], clip_sampled=arrays["clip_sampled"].astype(bool),
                    heldout_ss=heldout, heldout_m=m_out, noise=noise,
                    clip_exact=None if clip_exact is None else clip_exact.astype(np.float64))


def _check_npz(f) -> None:
    """Refuse, before anything is inflated or allocated, a probe arrays file that is not a zip of .npy members,
    whose members would inflate past :data:`MAX_ARRAY_BYTES` or by more than :data:`MAX_RATIO`, or whose .npy
    header declares more data than the member holds (a few bytes claiming 80 GB)."""
    from dpaudit.errors import DpauditError

    def bad(why: str):
        return DpauditError(f"{f}: {why}; the file is damaged or not the probe's: restore the file written with the "
                            "record")

    try:
        with zipfile.ZipFile(f) as zf:
            total = 0
            for info in zf.infolist():
                total += info.file_size
                if total > MAX_ARRAY_BYTES:
                    raise bad(f"its arrays would take more than {MAX_ARRAY_BYTES:,} bytes")
                if info.file_size > 2 ** 20 and info.file_size > MAX_RATIO * max(info.compress_size, 1):
                    raise bad(f"{info.filename} inflates {info.file_size / max(info.compress_size, 1):,.0f}-fold")
                if not info.filename.endswith(".npy"):
                    raise bad(f"it holds {info.filename!r}, not only .npy arrays")
                with zf.open(info) as fh:
                    version = np.lib.format.read_magic(fh)
                    read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                            else np.lib.format.read_array_header_2_0)
                    shape, _, dtype = read(fh)
                    need = int(np.prod(shape, dtype=object)) * dtype.itemsize
                    if dtype.hasobject or need > info.file_size:
                        raise bad(f"{info.filename} declares {dtype} {shape} ({need:,} bytes) in "
                                  f"{info.file_size:,}")
    except DpauditError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile) as e:
        raise bad(f"not a readable array archive ({type(e).__name__}: {e})") from None
