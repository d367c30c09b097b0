"""The weights a probe watched, fingerprinted, so that its record is tied to the weights saved beside it
(docs/security.md, "Evidence is bound to its origin"; the mechanism check ``weights``, docs/verdicts.md).

A record's run identity binds it to the privacy card, not to the weights: a folder whose model was replaced (a
non-private baseline saved beside the DP run's records, a model trained further without the probe) would carry
the record's passing checks. At save the probe records, for every tensor its DP optimizer trained, its shape and
its values at :data:`PER_TENSOR` coordinates drawn from the run identity (:func:`take`). ``dpaudit evaluate`` and
``dpaudit check --checkpoint`` compare them with the checkpoint's safetensors files (:func:`compare`; no torch):

* ``pass``: every recorded tensor found in the checkpoint matches a tensor of the same shape at its coordinates
  (a matrix: or of the transposed shape, read transposed), within the rounding of the dtype it is stored in (a model
  saved in bf16 or fp16, or converted between Conv1D's and Linear's layouts, stays an honest pass);
* ``fail``: a recorded tensor has same-shaped tensors in the checkpoint and none of them holds its values: these are
  not the weights the probe watched;
* ``not tested``: no recorded tensor is in the files (a merged LoRA adapter, a quantised save, weights not in
  safetensors), or the probe could not fingerprint (under FSDP, where rank 0 gave no full state dict, and for
  a functional probe, the weights come only from ``save(folder, weights=...)``).

Matching is by shape and values, not by name: a probe attached to an optimizer knows no names (it records
``param i``), and Opacus' ``_module.``, PEFT's ``base_model.model.`` and ``.default``, DDP's ``module.`` and a
Trainer's names differ for the same tensor (where names correspond, that tensor is tried first). It is a
consistency check, not a seal: a folder built to pass it (the watched tensors kept under spare names beside other
weights) passes, as a record written by hand would; docs/security.md says what binds evidence. A noisy DP step
moves every coordinate, so two runs' weights agree at a recorded coordinate only by chance, and a tensor fails
only if *all* its coordinates match nowhere; coordinates training never moved cannot tell two models from one init
apart, so an unmoved copy can pass (a miss, never a false alarm).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np

from dpaudit.checks import counts, finite
from dpaudit.errors import DpauditError

PER_TENSOR = 8  # coordinates per tensor: 8 values a run cannot share with another by chance
MAX_TENSORS = 100_000  # tensors in one record: a model with more is fingerprinted on its first ones
MAX_READS = 500_000  # comparisons of a recorded tensor with a stored one (~20 us each; an honest model: ~1 a tensor)
NAME_SCAN = 10_000  # stored tensors of one shape searched for the recorded tensor's name
RTOL = {"F64": 1e-12, "F32": 2 ** -22, "F16": 2 ** -10, "BF16": 2 ** -7}  # one unit of the stored dtype's rounding
ATOL = {"F64": 0.0, "F32": 2.0 ** -149, "F16": 2.0 ** -24, "BF16": 2.0 ** -133}  # its smallest subnormal


def take(tensors, run_id: str) -> dict:
    """The fingerprint of ``tensors`` ((name, shape, dtype name, read) each; ``read(flat indices)`` gives the
    tensor's values there as float64, one small read on its own device): per tensor its shape and its values at
    :data:`PER_TENSOR` coordinates drawn from ``run_id``."""
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:8], "little"))
    out = []
    for name, shape, dtype, read in list(tensors)[:MAX_TENSORS]:
        n = int(np.prod(shape, dtype=object))
        if n == 0:
            continue
        idx = np.unique(rng.integers(0, n, size=min(PER_TENSOR, n)))
        out.append({"name": str(name)[:200], "shape": [int(s) for s in shape], "dtype": str(dtype),
                    "index": idx.tolist(), "values": np.asarray(read(idx), dtype=np.float64).tolist()})
    return {"schema_version": 1, "per_tensor": PER_TENSOR, "tensors": out}


def not_taken(why: str) -> dict:
    """The record's ``weights`` when the probe cannot fingerprint (the reason becomes the check's finding)."""
    return {"schema_version": 1, "not_recorded": why}


def check(f, w) -> None:
    """The typed boundary of a record's ``probe.weights`` (dpaudit/probe/record.py): one line naming the defect."""
    def bad(what: str):
        return DpauditError(f"{f}: probe.weights {what}; restore the record written with the model")

    if not isinstance(w, dict) or isinstance(w.get("schema_version"), bool) or w.get("schema_version") != 1:
        raise bad("must be an object with schema_version 1")
    if "not_recorded" in w:
        if not isinstance(w["not_recorded"], str):
            raise bad("not_recorded must be a string")
        return
    if not isinstance(w.get("given", False), bool):
        raise bad("given must be true or false")
    tensors = w.get("tensors")
    if not isinstance(tensors, list) or not tensors or len(tensors) > MAX_TENSORS:
        raise bad(f"must list 1 to {MAX_TENSORS:,} tensors")
    for i, t in enumerate(tensors):
        ok = isinstance(t, dict) and isinstance(t.get("name"), str) and counts(t.get("shape"))
        idx, vals = (t.get("index"), t.get("values")) if ok else (None, None)
        ok = ok and counts(idx) and 0 < len(idx) <= PER_TENSOR and isinstance(vals, list) and len(vals) == len(idx)
        ok = ok and all(finite(v) for v in vals)
        if not ok or max(idx) >= int(np.prod(t["shape"], dtype=object)):
            raise bad(f"tensor {i}: needs name, shape, and 1-{PER_TENSOR} indices inside the shape with one finite "
                      "value each")


def compare(w: dict | None, model_dir: Path) -> tuple[str, str] | None:
    """(status, finding) of the ``weights`` check for fingerprint ``w`` against the safetensors files in
    ``model_dir``; None when the record carries no fingerprint field (a record written before fingerprints)."""
    from dpaudit import safetensors_view as sv
    from dpaudit.io import printable

    if w is None:
        return None
    if "not_recorded" in w:
        return "not tested", f"the probe recorded no fingerprint of the weights: {w['not_recorded']}"
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        return ("not tested", f"no .safetensors file in {Path(model_dir).name}/ to compare the record's fingerprint "
                "with (weights saved as pickles are not read); save the model with safe_serialization")
    by_shape: dict[tuple, list] = {}
    for f in files:
        if not f.is_file():  # a FIFO would block the read, a device never end it: never opened
            return "not tested", f"{printable(f.name)} is not a readable safetensors file (not a regular file)"
        try:
            found = sv.entries(f)
        except sv.Unreadable as e:
            return "not tested", f"{printable(f.name)} is not a readable safetensors file ({e})"
        for e in found:
            if e.is_float:
                by_shape.setdefault(e.shape, []).append(e)
    for same in by_shape.values():  # the model's own order where names carry it (h.2 before h.10), as the optimizer's
        same.sort(key=_natural)
    tensors = w["tensors"]
    matched, absent, differ, reads, maps = 0, [], [], 0, {}
    rank: dict[tuple, int] = {}  # the j-th recorded tensor of a shape tries the j-th stored one first
    for t in tensors:
        j = rank[tuple(t["shape"])] = rank.get(tuple(t["shape"]), -1) + 1
        cands = _candidates(t, by_shape)
        if not cands:
            absent.append(t)
            continue
        want = np.asarray(t["values"], dtype=np.float64)
        best = np.inf
        # the tensor of the same name first (Opacus', PEFT's prefixes aside; looked for among the first NAME_SCAN),
        # then the one in the same place among its shape (a probe attached to an optimizer knows no names: its order
        # is the model's, as the file's is); the first match ends the search: an honest model costs about one read
        # per tensor, a hostile header naming one shape a million times at most MAX_READS in all
        named = [i for i in range(min(len(cands), NAME_SCAN)) if names_match(cands[i][0].name, t["name"])]
        order = [*named, *((i + j) % len(cands) for i in range(len(cands)))]
        try:
            for i in order:
                c, idx = cands[i]
                reads += 1
                if reads > MAX_READS:
                    return ("not tested", f"the checkpoint's files hold more tensors of the recorded shapes than "
                            f"{MAX_READS:,} comparisons reach (thousands of one shape, the probe given no names): the "
                            "record cannot be tied to these weights; attach the probe with the model's names "
                            "(attach_probe(optimizer, ..., model=model))")
                if c.file not in maps:
                    maps[c.file] = sv.mapped(c.file)
                best = min(best, _gap(c.values(idx, maps[c.file]), want, c.dtype))
                if best <= 1:
                    break
        except (OSError, ValueError) as e:  # the file changed or shrank while it was read
            return "not tested", f"the checkpoint's weights could not be read ({type(e).__name__}: {str(e)[:120]})"
        if best <= 1:
            matched += 1
        else:
            differ.append((t, best))
    k = w.get("per_tensor", PER_TENSOR)
    if differ:
        t, gap = differ[0]
        return ("fail", f"{len(differ)} of the {len(tensors)} tensors the probe watched match no tensor of the "
                f"checkpoint's weights (first: {_label(t)}, {gap:.3g} times the stored dtype's rounding away at its "
                f"{len(t['index'])} recorded coordinates): these are not the weights the probe watched (a model saved "
                "from another run, trained further after the record, or edited), so the record's checks are not "
                "evidence about them; save the weights the probed run ended with beside its record (a loop that "
                "releases an average of its iterates, an EMA, gives it at save: probe.save(folder, weights=ema))"
                + (f" ({matched} others match: if the model was converted, tensors fused, split or re-laid out, "
                   "evaluate the folder the probed run saved)" if matched else ""))
    if not matched:
        return ("not tested", f"none of the {len(tensors)} tensors the probe watched is in the checkpoint's "
                "safetensors files by shape (a merged LoRA adapter, a quantised save): the record cannot be tied "
                "to these weights")
    rest = f"; {len(absent)} not in the files by shape" if absent else ""
    if w.get("given"):
        rest += "; against the weights the loop gave at save (probe.save(folder, weights=...)), not the optimizer's own"
    return ("pass", f"{matched} of the {len(tensors)} tensors the probe watched match the checkpoint's weights at "
            f"{k} recorded coordinates each (within the stored dtype's rounding){rest}")


def _candidates(t: dict, by_shape: dict) -> list:
    """(tensor, flat indices to read) for every float tensor of the checkpoint that may hold recorded tensor ``t``:
    those of its shape at its coordinates, and for a matrix also those of the transposed shape read transposed
    (GPT-2's Conv1D stores (in, out), a Linear (out, in): a layout conversion keeps the values, and a square matrix
    read untransposed would otherwise fail an honest run)."""
    shape, idx = tuple(t["shape"]), np.asarray(t["index"], dtype=np.int64)
    out = [(c, idx) for c in by_shape.get(shape, [])]
    if len(shape) == 2:
        rows, cols = shape
        flipped = (idx % cols) * rows + idx // cols  # element (i, j) of t is element (j, i) of its transpose
        out += [(c, flipped) for c in by_shape.get((cols, rows), [])]
    return out


def _natural(e) -> list:
    """A stored tensor's name as a sort key with its numbers read as numbers (h.2 before h.10)."""
    return [int(p) if i % 2 else p for i, p in enumerate(re.split(r"([0-9]+)", e.name))]


def _gap(got: np.ndarray, want: np.ndarray, dtype: str) -> float:
    """The largest |got - want| in units of the stored dtype's rounding at ``want`` (<= 1: the same values)."""
    tol = RTOL[dtype] * np.abs(want) + ATOL[dtype]
    both_inf = np.isinf(got) & (np.abs(want) > np.finfo(np.float16).max) if dtype == "F16" else False
    with np.errstate(invalid="ignore", over="ignore"):
        gap = np.where(both_inf, 0.0, np.abs(got - want) / np.where(tol > 0, tol, np.inf))
    gap = np.where(np.isnan(gap), np.inf, gap)
    return float(gap.max()) if gap.size else 0.0


def names_match(stored: str, recorded: str) -> bool:
    """Whether two names plausibly name one tensor (tried first: Opacus', PEFT's and DDP's prefixes set aside)."""
    def norm(s: str) -> str:
        for junk in ("_module.", "module.", "_orig_mod.", "base_model.model.", ".default."):
            s = s.replace(junk, ".")
        return re.sub(r"\.+", ".", s).strip(".")
    a, b = norm(stored), norm(recorded)
    return a == b or a.endswith("." + b) or b.endswith("." + a)  # whole parts: h.10.x is not h.0.x


def _label(t: dict) -> str:
    from dpaudit.io import printable

    shape = str(tuple(t["shape"]))
    name = printable(t["name"])[:80]
    return name if name.endswith(shape) else f"{name} {shape}"  # an optimizer's probe names it "param i (shape)"

