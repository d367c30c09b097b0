"""Sharded scoring for ``dpaudit evaluate``: ``--shard i/n`` scores one n-th of the work and writes a partial;
``--merge`` checks that the partials are the n shards of one evaluation and gives the scores one process would.

A shard runs batches b with b mod n = i - 1 of the one-process batching (canaries, reference secrets, and the
top level of the exposure trie; :func:`dpaudit.attacks.scoring.owns`), so every score is computed by exactly
one shard on exactly the batch it would have had in one process: the merged report equals the one-process
report (timings and date aside). Shard 1 also measures the task metrics. A partial is a folder holding
``partial.json`` (what was evaluated and how) and ``scores.npz`` (one array per score, NaN where another
shard scores; read with ``allow_pickle=False``). The merge re-derives the evaluation plan from the
checkpoint, never from the partials.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from dpaudit.errors import DpauditError
from dpaudit.folders import atomic_folder
from dpaudit.io import jsonable, read_json

KIND = "partial_scores"


def parse(text: str) -> tuple[int, int]:
    """``"i/n"`` (1 <= i <= n) as the 0-based (i - 1, n) the scorers take."""
    try:
        i, n = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise DpauditError(f"--shard {text!r} is not of the form i/n (e.g. --shard 1/4)") from None
    if not 1 <= i <= n:
        raise DpauditError(f"--shard {text}: i must be between 1 and n (e.g. --shard 1/{max(n, 1)})")
    return i - 1, n


def write(out: Path, ck, shard: tuple[int, int], options: dict, metrics: dict | None, scored, timings: dict) -> Path:
    """The partial of shard ``shard`` into the folder ``out`` (written beside it, then renamed into place)."""
    out = Path(out)
    arrays = {f"score/{a}": np.asarray(v, dtype=np.float64) for a, v in scored.scores.items()}
    meta = {"kind": KIND, "schema_version": 1, "shard": [shard[0] + 1, shard[1]], "checkpoint_hash": ck.hash(),
            "options": options, "metrics": metrics, "notes": list(scored.notes), "timings": timings,
            "exposure": None}
    if scored.exposure is not None:
        e = scored.exposure
        arrays["exposure/canary_bits"] = np.asarray(e.canary_bits, dtype=np.float64)
        arrays["exposure/reference_bits"] = np.asarray(e.reference_bits, dtype=np.float64)
        meta["exposure"] = {"enumerated": bool(e.enumerated), "suffix_scored": bool(e.suffix_scored)}
    with atomic_folder(out) as tmp:
        np.savez(tmp / "scores.npz", **arrays)
        meta["digest"] = _digest(jsonable(meta), (tmp / "scores.npz").read_bytes())
        (tmp / "partial.json").write_text(json.dumps(jsonable(meta), indent=1) + "\n")
    return out


def _digest(meta: dict, npz: bytes) -> str:
    """sha256 of a partial's metadata (less the digest itself) and its scores' bytes: an edit to either after the
    shard wrote them (a raised score, a changed accuracy) is found at the merge. It detects accidents and casual
    edits, not someone who recomputes it (docs/security.md)."""
    import hashlib

    body = {k: v for k, v in meta.items() if k not in ("digest", "arrays", "folder")}
    h = hashlib.sha256(json.dumps(body, sort_keys=True).encode())
    h.update(npz)
    return h.hexdigest()


_FIELDS = {"shard": list, "checkpoint_hash": str, "options": dict, "notes": list, "timings": dict, "digest": str}


def _check_npz(path: Path) -> None:
    """np.savez stores its arrays uncompressed: a member that is compressed (a decompression bomb) or larger than
    the file is refused before anything is inflated."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            size = path.stat().st_size
            for info in z.infolist():
                if info.compress_type != zipfile.ZIP_STORED or info.file_size > size:
                    raise DpauditError(f"{path}: member {info.filename!r} is compressed or larger than the file; "
                                       "partials hold uncompressed arrays: re-run that shard")
    except zipfile.BadZipFile:
        raise DpauditError(f"{path} is not a scores archive; re-run that shard") from None


def read(folders) -> list[dict]:
    """The partials in ``folders`` (each ``partial.json`` + ``scores.npz``), with their arrays under ``arrays``."""
    parts = []
    for f in folders:
        f = Path(f)
        meta = read_json(f / "partial.json", "partial scores", "pass folders written by dpaudit evaluate --shard")
        if meta.get("kind") != KIND:
            raise DpauditError(f"{f} is not a partial of dpaudit evaluate --shard (kind {meta.get('kind')!r})")
        for key, typ in _FIELDS.items():
            if not isinstance(meta.get(key), typ):
                raise DpauditError(f"{f}/partial.json: '{key}' is missing or not a {typ.__name__}; the partial is "
                                   "incomplete or damaged: re-run that shard")
        sh = meta["shard"]
        if len(sh) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in sh) or not 1 <= sh[0] <= sh[1]:
            raise DpauditError(f"{f}/partial.json: 'shard' must be [i, n] with 1 <= i <= n; re-run that shard")
        if not (meta.get("metrics") is None or isinstance(meta["metrics"], dict)) or \
                not (meta.get("exposure") is None or isinstance(meta["exposure"], dict)):
            raise DpauditError(f"{f}/partial.json: 'metrics' and 'exposure' must be objects or null; re-run that shard")
        npz = f / "scores.npz"
        if not npz.is_file():
            raise DpauditError(f"{npz} is missing or not a regular file; re-run that shard")
        _check_npz(npz)
        if _digest(meta, npz.read_bytes()) != meta["digest"]:
            raise DpauditError(f"{f}: partial.json or scores.npz changed after the shard wrote them (their digest "
                               "does not match); re-run that shard")
        try:
            with np.load(npz, allow_pickle=False) as z:
                meta["arrays"] = {k: z[k] for k in z.files}
        except (OSError, ValueError) as e:
            raise DpauditError(f"{f}/scores.npz cannot be read ({e}); re-run that shard") from None
        meta["folder"] = str(f)
        parts.append(meta)
    if not parts:
        raise DpauditError("--merge needs the partial folders of every shard")
    return parts


def merge(ck, parts: list[dict]):
    """(options, task metrics, :class:`dpaudit.evaluation.scoring.CanaryScores`, timings) of the n shards of one evaluation.
    Refused unless they are shards 1..n of this checkpoint with the same options, each score computed by
    exactly one of them."""
    from dpaudit.evaluation.scoring import CanaryScores, ExposureScores

    n = parts[0]["shard"][1]
    got = sorted(p["shard"][0] for p in parts)
    if any(p["shard"][1] != n for p in parts) or got != list(range(1, n + 1)):
        labels = ", ".join(f"{p['shard'][0]}/{p['shard'][1]}" for p in parts)
        raise DpauditError(f"the partials are shards {labels}; --merge needs each of 1/{n} .. {n}/{n} exactly once")
    h = ck.hash()
    for p in parts:
        if p["checkpoint_hash"] != h:
            raise DpauditError(f"{p['folder']} scored another checkpoint (hash {p['checkpoint_hash'][:12]}, this one "
                               f"{h[:12]}); re-run that shard on this checkpoint")
        if p["options"] != parts[0]["options"] or p["exposure"] != parts[0]["exposure"] \
                or sorted(p["arrays"]) != sorted(parts[0]["arrays"]):
            raise DpauditError(f"{p['folder']} was scored with other options than {parts[0]['folder']}; run every "
                               "shard with the same evaluate options")
    arrays = {k: _combine(k, [p["arrays"][k] for p in parts]) for k in parts[0]["arrays"]}
    first = next(p for p in parts if p["shard"][0] == 1)
    scores = {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("score/")}
    exposure = None
    if first["exposure"] is not None:
        exposure = ExposureScores(arrays["exposure/canary_bits"], arrays["exposure/reference_bits"],
                                  first["exposure"]["enumerated"], suffix_scored=first["exposure"]["suffix_scored"])
    timings = {"shards": n, **{k: max(p["timings"].get(k, 0.0) for p in parts) for k in first["timings"]}}
    return first["options"], first["metrics"], CanaryScores(scores, exposure, tuple(first["notes"])), timings


def _combine(name: str, columns: list[np.ndarray]) -> np.ndarray:
    stack = np.stack([np.asarray(c, dtype=np.float64) for c in columns])
    done = np.isfinite(stack).sum(0)
    if (done != 1).any():
        j = int(np.flatnonzero(done != 1)[0])
        raise DpauditError(f"entry {j} of {name} is scored by {int(done[j])} shards instead of one: the partials "
                           "come from different evaluations, or the model gave a non-finite score")
    return np.nansum(stack, axis=0)
