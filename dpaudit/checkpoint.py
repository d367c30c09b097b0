"""Checkpoint directories (docs/architecture.md, "Contracts")::

    CHECKPOINT/
      model/              HF save_pretrained (safetensors) or a PEFT adapter; or those files at the root of
                          CHECKPOINT itself (a plain Hugging Face output folder)
      base_model/         the base weights, when a LoRA adapter sits on a base that is not an asset
      privacy_card.json   the claim + the mechanism (dpaudit.claim.card)
      canaries.json       the canary manifest (dpaudit.canaries.manifest)
      run.json            resolved config, seeds, data hash, package versions (optional for others' models)
      gradient_canaries.json  white-box canary plan and scores (optional; dpaudit/probe/probe.py);
                              gradient_canaries_<kind>.json for a further kind of the same run;
                              <that name>.steps.npy: every update's projection on each canary, (steps, m)

(A little over 300 lines: reading, checking and hashing this layout sit with the fixes its refusals name for a
folder given one level off, which read the same layout; the fixes are the part to split out when it grows.)
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from dpaudit.canaries.manifest import Manifest, load_manifest
from dpaudit.claim.card import PrivacyCard, load_card
from dpaudit.errors import DpauditError, first_line
from dpaudit.folders import staged_folder
from dpaudit.io import check_contained, jsonable, read_json
from dpaudit.options import SHIPPED_REPORT
from dpaudit.run_folder import read_run_record

# What a report audited, by file: weights, configs and the tokenizer's vocabulary wherever it is kept. A tokenizer
# saved without tokenizer.json (an older transformers, a Llama 2 or T5 folder) is read from these: an edited
# merges.txt or tokenizer.model tokenizes every text differently under an unchanged hash otherwise.
HASHED_SUFFIXES = (".safetensors", ".json", ".model", ".spm", ".tiktoken")  # .model: SentencePiece (spiece, tokenizer)
HASHED_NAMES = ("merges.txt", "vocab.txt")  # BPE merges (GPT-2, Qwen, RoBERTa), WordPiece vocabularies (BERT)


def content_hash(root: Path, files, skip=lambda f: False) -> str:
    """sha256 over the names (relative to ``root``) and bytes of the weights, JSON and tokenizer vocabulary files
    (:data:`HASHED_SUFFIXES`, :data:`HASHED_NAMES`) among ``files``, in sorted order, less those ``skip`` names; the
    first 16 hex digits. The one hash of what a report audited: a checkpoint's (:meth:`Checkpoint.hash`) or a
    PMixED deployment's."""
    h = hashlib.sha256()
    for f in sorted(files):
        if f.is_file() and (f.suffix in HASHED_SUFFIXES or f.name in HASHED_NAMES) and not skip(f):
            h.update(os.fsencode(f.relative_to(root)))  # a name's bytes as on disk (UTF-8 or not)
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


_POSITION_KEYS = ("n_positions", "max_position_embeddings", "n_ctx")  # the names transformers' configs use


@dataclass(frozen=True)
class Checkpoint:
    path: Path | None  # None: a model handed over as objects (dpaudit.api.evaluate)
    card: PrivacyCard
    manifest: Manifest
    run: dict  # {} when run.json is absent (a checkpoint from another tool)
    objects: tuple | None = None  # (model, tokenizer) when the model is not in a folder
    max_len: int | None = None  # the scoring context, when run.json does not give it (a model held as objects)
    whitebox_dir: Path | None = None  # where a probe saved its records (a model held as objects); else ``path``
    base_model: Path | None = None  # a LoRA adapter's base outside the folder, given explicitly (--base-model)

    @property
    def context_len(self) -> int:
        """Tokens per scored sequence: the trainer's ``max_len`` from run.json, else :attr:`max_len`, else 64; never
        more than the model's own positions (a small model's 32 or 48: beyond them its embedding has no row)."""
        want = int((self.run.get("model") or {}).get("max_len") or self.run.get("max_len") or self.max_len or 64)
        cap = self.positions()
        return min(want, cap) if cap else want

    def positions(self) -> int | None:
        """The most tokens the model takes (its config's ``n_positions`` / ``max_position_embeddings``), or None
        where the folder does not say (an adapter's base, a config without it)."""
        if self.objects is not None:
            config = getattr(self.objects[0], "config", None)
            values = [getattr(config, k, None) for k in _POSITION_KEYS]
        else:
            f = self.model_dir / "config.json"
            try:
                config = json.loads(f.read_text()) if f.is_file() else {}
            except (OSError, ValueError):
                config = {}
            values = [config.get(k) for k in _POSITION_KEYS] if isinstance(config, dict) else []
        found = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0]
        return min(found) if found else None

    @property
    def model_dir(self) -> Path:
        """model/ for dpaudit's layout, the folder itself for a plain Hugging Face output folder."""
        from dpaudit.probe.readback import model_dir

        return model_dir(self.path)

    def load_model(self):
        """(model, tokenizer), LoRA adapters merged into the base."""
        if self.objects is not None:
            return self.objects
        from dpaudit.tasks import models

        mdir = self.model_dir
        if (mdir / "adapter_config.json").exists():
            from dpaudit.canaries import new_tokens

            base, tok = models.load_dir(self.adapter_base())
            base = new_tokens.base_as_trained(base, tok, self.manifest)  # the rows the adapter was trained on
            if (mdir / "tokenizer_config.json").exists():
                tok = models.load_tokenizer(mdir)
            loaded = models.load_adapters(base, [mdir], ["default"])  # adapter weights only, no code
            try:
                model = loaded.merge_and_unload()
            except (AttributeError, NotImplementedError, ValueError, TypeError, RuntimeError) as e:
                raise DpauditError(f"cannot merge the adapter at {mdir} into its base ({first_line(e)}); dpaudit "
                                   "scores the merged model: audit the full model saved with save_pretrained") from None
            models.check_model(model, tok, mdir)
            return model.eval(), tok
        return models.load_dir(mdir)

    def adapter_base(self) -> Path:
        """The base model folder of a LoRA adapter: base_model/ inside the checkpoint, the adapter's
        base_model_name_or_path when it resolves inside it, the folder given explicitly (``base_model``,
        ``--base-model``: recorded in the report and hashed), or SmolLM2 for dpaudit's own LoRA runs. A path the
        checkpoint names outside itself is never followed on its own. Nothing is ever downloaded."""
        from dpaudit.tasks import models

        inside = self.path / "base_model"
        if inside.is_dir():
            if self.base_model is not None:
                raise DpauditError(f"{self.path} ships its adapter's base in base_model/ and --base-model names "
                                   f"another; leave --base-model out, or remove base_model/")
            return inside
        if self.base_model is not None:
            base = Path(self.base_model)
            if not base.is_dir():
                raise DpauditError(f"--base-model {base} is not a folder; pass the local folder the adapter was "
                                   "trained on (save_pretrained of its base model)")
            check_contained(base, "base model")
            return base
        cfg = read_json(self.model_dir / "adapter_config.json", "adapter config", "")
        named = cfg.get("base_model_name_or_path")
        if isinstance(named, str) and named and (self.model_dir / named).is_dir() \
                and _inside(self.path, self.model_dir / named):
            return (self.model_dir / named).resolve()
        if self.run.get("model", {}).get("name") == "smollm2-135m":
            return models.assets.smollm2_dir()
        if isinstance(named, str) and named and Path(named).is_dir():
            raise DpauditError(f"{self.model_dir} holds a LoRA adapter whose base model {named!r} lies outside the "
                               f"checkpoint; audit it with --base-model {named} (the report records the base and "
                               "its hash covers it), or save the base under base_model/")
        raise DpauditError(f"{self.model_dir} holds a LoRA adapter whose base model {named!r} is not a local folder "
                           "(nothing is downloaded); pass a local copy with --base-model FOLDER, or save the base "
                           "under base_model/")

    def hash(self) -> str:
        """sha256 over the checkpoint's weights, tokenizer, card and manifest (names and bytes), first 16 hex
        digits, and over the white-box records evaluated with it (gradient_canaries*: the record, its per-step
        projections and the probe's arrays), so that a report's hash names the evidence it audited. run.json is
        left out (timings), and so is the report shipped beside the weights (:data:`SHIPPED_REPORT`). A plain Hugging Face output folder is hashed at its top level (its checkpoint-*/
        sub-folders are other models); a model given as objects by its parameters (and its probe folder's records)."""
        records = self.probe_records_hash()
        if self.path is None:
            own = _object_hash(hashlib.sha256(), self)
        else:
            files = self.path.rglob("*") if self.model_dir != self.path else self.path.glob("*")
            own = content_hash(self.path, files, skip=lambda f: f.name in ("run.json", SHIPPED_REPORT)
                               or f.name.startswith("gradient_canaries"))
        base = self.outside_base()
        if base is not None:  # an adapter on a base outside the folder: the base's bytes are part of what was audited
            own = hashlib.sha256(f"{own}+base:{content_hash(base, base.glob('*'))}".encode()).hexdigest()[:16]
        if records is None:  # no white-box records: the hash of the model's files alone, as before records counted
            return own
        return hashlib.sha256(f"{own}+whitebox:{records}".encode()).hexdigest()[:16]

    def probe_records_hash(self) -> str | None:
        """sha256 of the white-box record files (gradient_canaries*.json, .npy, .npz) where evaluation reads them;
        None when there are none."""
        folder = self.whitebox_dir or self.path
        if folder is None:
            return None
        files = sorted(f for f in Path(folder).glob("gradient_canaries*")
                       if f.is_file() and f.name.endswith((".json", ".npy", ".npz")))
        if not files:
            return None
        h = hashlib.sha256()
        for f in files:
            h.update(os.fsencode(f.name) + b"\0")
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            h.update(b"\0")
        return h.hexdigest()

    def outside_base(self) -> Path | None:
        """The folder of an adapter's base model when it is outside the checkpoint (named by adapter_config.json's
        base_model_name_or_path); the report records it and the hash covers it. None otherwise."""
        if self.path is None or not (self.model_dir / "adapter_config.json").exists():
            return None
        base = self.adapter_base()
        return None if _inside(self.path, base) else base.resolve()


def _inside(root: Path, p: Path) -> bool:
    """Whether ``p`` resolves to ``root`` or somewhere under it."""
    real, base = Path(p).resolve(), Path(root).resolve()
    return real == base or base in real.parents


def _object_hash(h, ck: Checkpoint) -> str:
    import torch

    for name, t in sorted(ck.objects[0].state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().to("cpu").reshape(-1).view(torch.uint8).numpy().tobytes())
    h.update(json.dumps(ck.card.to_dict(), sort_keys=True).encode())
    h.update(json.dumps(ck.manifest.to_dict(), sort_keys=True).encode())
    return h.hexdigest()[:16]


def manifest_digest(manifest: Manifest) -> str:
    """sha256 (16 hex digits) of the manifest's canonical JSON: its canaries, guesses and evaluation plan."""
    return hashlib.sha256(json.dumps(jsonable(manifest.to_dict()), sort_keys=True).encode()).hexdigest()[:16]


def check_manifest(ck: Checkpoint, off_plan: bool) -> str | None:
    """A checkpoint written by dpaudit's trainers records its manifest's digest in the card: a canaries.json edited
    after training (its evaluation plan, which the one-run analysis relies on being fixed in advance) is refused,
    unless the evaluation is declared exploratory (``--off-plan``)."""
    return check_manifest_digest(ck.card, ck.manifest, off_plan)


def check_manifest_digest(card: PrivacyCard, manifest: Manifest, off_plan: bool) -> str | None:
    """:func:`check_manifest` on a card and a manifest (a PMixED deployment's, which is not a Checkpoint). With
    ``off_plan`` an edited manifest is allowed and returned as a departure of the plan (the report is then
    exploratory, never "as planned"); None when the manifest is the card's."""
    want = card.extra.get("manifest_digest") if isinstance(card.extra, dict) else None
    if want is None:
        return None
    got = manifest_digest(manifest)
    if got != want and off_plan:
        return f"canaries.json edited after training (digest {got}, the card records {want})"
    if got != want:
        raise DpauditError(f"canaries.json is not the manifest this model was trained with (digest {got}, the card "
                           f"records {want}): the canaries or evaluation plan fixed before training were edited; "
                           "restore canaries.json, or evaluate with --off-plan (an exploratory report)")


def load(path: Path, base_model: Path | str | None = None, manifest: Manifest | None = None) -> Checkpoint:
    """The checkpoint folder ``path``; ``base_model``: a LoRA adapter's base outside it (see
    :meth:`Checkpoint.adapter_base`); ``manifest``: audit units held in memory instead of the folder's canaries.json
    (the post-hoc audits of dpaudit/evaluation/posthoc.py)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise DpauditError(f"checkpoint {path} is a file; pass the folder that holds it ({path.parent}), with "
                           "privacy_card.json and canaries.json beside the weights")
    if not path.is_dir():
        raise DpauditError(f"checkpoint directory {path} not found; pass a folder written by `dpaudit run` "
                           "or one with model/, privacy_card.json and canaries.json")
    if not ((path / "model").is_dir() or (path / "config.json").is_file() or (path / "adapter_config.json").is_file()):
        raise DpauditError(f"checkpoint {path} has no model/ folder and no model files (config.json or "
                           "adapter_config.json) at its root; " + (_nearby(path) or _model_below(path)
                                                                   or "save the model with save_pretrained"))
    check_contained(path, "checkpoint")  # no symlink out of it, no FIFO: the report describes what it ships
    near = None if (path / "privacy_card.json").is_file() else _nearby(path)
    if near:
        raise DpauditError(f"privacy card not found at {path / 'privacy_card.json'}; {near}")
    card = load_card(path / "privacy_card.json")
    if manifest is None:
        if not (path / "canaries.json").exists():
            raise DpauditError(f"{path} has no canaries.json: no canaries were planted before training. Audit it "
                               "post hoc: `dpaudit audit identifiers` (random identifiers in your training data, such "
                               "as UUIDs) or `dpaudit audit split` (records a fair coin kept in or out), each with its "
                               "assumption stated in the report; or plant canaries before the next run (`dpaudit "
                               "canaries new`)")
        manifest = load_manifest(path / "canaries.json")
    run = read_run_record(path / "run.json")
    ck = Checkpoint(path, card, manifest, run, base_model=Path(base_model) if base_model is not None else None)
    if base_model is not None and not (ck.model_dir / "adapter_config.json").is_file():
        raise DpauditError(f"--base-model is for a LoRA adapter's base, and {path} holds a whole model; leave it out")
    return ck


def _model_below(path: Path) -> str | None:
    """A model saved one folder below ``path`` under another name than model/ (a loop's ``final/``, a Trainer's
    ``checkpoint-500/``), named as the fix; None when there is none."""
    found = sorted(p.name for p in path.iterdir() if p.is_dir() and not p.is_symlink()
                   and ((p / "config.json").is_file() or (p / "adapter_config.json").is_file()))[:3]
    if not found:
        return None
    return (f"a model lies in {found[0]}/" + (f" (and {', '.join(found[1:])})" if found[1:] else "") +
            ": name the one the card describes model/, or move privacy_card.json and canaries.json beside its weights")


def _nearby(path: Path) -> str | None:
    """A checkpoint one folder off ``path`` (a run's VARIANT/ or OUT/ instead of its checkpoint/, or model/ instead
    of the folder above it), named as the fix; None when there is none."""
    below = [path / "checkpoint"] + sorted(p for p in path.iterdir() if p.is_dir() and p.name != "checkpoint")[:50] \
        if path.is_dir() else []
    below += [q / "checkpoint" for q in below[1:] if (q / "checkpoint").is_dir()]
    holds_model = path.is_dir() and ((path / "config.json").is_file() or (path / "adapter_config.json").is_file())
    for cand in [*below, path.parent]:
        if cand != path and (cand / "privacy_card.json").is_file():
            if cand == path.parent and holds_model and path.name != "model":  # a Trainer's output_dir/ with the card, checkpoint-N/ given
                return (f"the card is one folder up, in {cand}: copy privacy_card.json and canaries.json into {path}, "
                        "beside the weights the card describes")
            return f"the checkpoint looks one folder off: pass {cand} (it holds privacy_card.json)"
    return None


def write(path: Path, model, tokenizer, card: PrivacyCard, manifest: Manifest, run: dict,
          base_model=None, extra_files: dict | None = None) -> Path:
    """Write a checkpoint atomically (:func:`dpaudit.folders.staged_folder`)."""
    path = Path(path)
    digest = manifest_digest(manifest)  # the canaries and evaluation plan fixed before training, bound to the card
    card.extra["manifest_digest"] = digest
    run = {**run, "manifest_digest": digest}
    with staged_folder(path) as tmp:
        (tmp / "model").mkdir()
        model.save_pretrained(tmp / "model")
        tokenizer.save_pretrained(tmp / "model")
        if base_model is not None:
            base_model.save_pretrained(tmp / "base_model")
            tokenizer.save_pretrained(tmp / "base_model")
        card.save(tmp / "privacy_card.json")
        manifest.save(tmp / "canaries.json")
        (tmp / "run.json").write_text(json.dumps(jsonable(run), indent=2, default=str) + "\n")
        for name, body in (extra_files or {}).items():
            if isinstance(body, bytes):
                (tmp / name).write_bytes(body)
            else:
                (tmp / name).write_text(json.dumps(jsonable(body)) + "\n")
    return path
