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
from dpaudit.io import atomic_folder, jsonable, read_json

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
        (tmp / "partial.json").write_text(json.dumps(jsonable(meta), indent=1) + "\n")
    return out


def read(folders) -> list[dict]:
    """The partials in ``folders`` (each ``partial.json`` + ``scores.npz``), with their arrays under ``arrays``."""
    parts = []
    for f in folders:
        f = Path(f)
        meta = read_json(f / "partial.json", "partial scores", "pass folders written by dpaudit evaluate --shard")
        if meta.get("kind") != KIND:
            raise DpauditError(f"{f} is not a partial of dpaudit evaluate --shard (kind {meta.get('kind')!r})")
        try:
            with np.load(f / "scores.npz", allow_pickle=False) as z:
                meta["arrays"] = {k: z[k] for k in z.files}
        except (OSError, ValueError) as e:
            raise DpauditError(f"{f}/scores.npz cannot be read ({e}); re-run that shard") from None
        meta["folder"] = str(f)
        parts.append(meta)
    if not parts:
        raise DpauditError("--merge needs the partial folders of every shard")
    return parts


def merge(ck, parts: list[dict]):
    """(options, task metrics, :class:`dpaudit.scoring.CanaryScores`, timings) of the n shards of one evaluation.
    Refused unless they are shards 1..n of this checkpoint with the same options, each score computed by
    exactly one of them."""
    from dpaudit.scoring import CanaryScores, ExposureScores

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
