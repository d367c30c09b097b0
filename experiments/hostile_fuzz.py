"""A hostile round by machine ([2/5]): every leaf of a DP variant's report.json, and of its checkpoint's JSON files,
replaced in turn by a hostile value, and every command that reads it run in-process on the result.

    dpaudit run configs/tiny.toml --out RUN
    python experiments/hostile_fuzz.py RUN --out reports/security/hostile_fuzz

Modes (``--modes``, all by default):

* ``check``, ``card`` (model-card), ``table``: report.json's leaves x up to 12 values (markup, null, a dropped key,
  the wrong type, 2x, -1, 1e308, NaN, an empty list or object). A defect is exit 3 (an internal error), a refusal
  of more than one line, or markup from the report in the model card or the table.
* ``compare``: the same edits, ``compare ORIGINAL EDITED`` (a defect also: markup in the diff).
* ``checkck`` (``check --checkpoint``): the same edits of the sections the evidence decides (the test rows, limits,
  checks, attack metrics, canary plan, tiers, verdict, claim, mechanism, accounting, exposure, plan), one per leaf;
  a defect is an edit the gate passes (exit 0) although it changed the report. Sampled (``--sample``): each call re-derives the evidence (seconds).
The modes policy, account and scores also put ``true`` where an input holds a number (config: tests/run/test_config_types.py);
accepting it is a defect (the report modes try it without counting it).

* ``evaluate``: the checkpoint's privacy_card.json, canaries.json, gradient_canaries.json and run.json, up to
  ``--sample`` leaves each x 3-4 values; a defect is exit 3 or a refusal of more than one line.
* ``config`` (``run CONFIG --dry-run``): every leaf of the committed run configs named in ``CONFIGS`` (one per
  method) x 3-4 values, written back as TOML (TOML has no null: a null is the key dropped), up to ``--sample``/10
  leaves a config (/80 for LMO, whose dry run searches its noise for every variant).
* ``policy`` (``check REPORT --policy P``): every leaf of configs/policy.toml x every value.
* ``account`` (``account --card``): every leaf of the checkpoint's privacy_card.json x every value.
* ``scores`` (``audit scores`` under each strategy): both score-file shapes, every leaf x every value.
* ``args``: every argument and option of every command that runs on the run's own files (the light commands, ``check``,
  ``compare``, ``table``, ``model-card``, ``evaluate``, ``run --dry-run``, ``audit split``) given, in turn, hostile
  values of its type: numbers (NaN, -1, 0, 1e308, 1e-320, not a number), paths (a folder, a device, nothing, a
  JSON object, a symlink loop, a FIFO), strings (empty, 5,000 characters, a terminal escape and a line break, a
  list of blanks). A defect also: a command still running after 150 s (a FIFO that blocks it).
* ``weights``: the checkpoint's model.safetensors replaced by damaged and hostile files (truncated, a header length
  past the file, not UTF-8, an array, 100,000 brackets deep, bool or huge shapes, NaN offsets, a key named twice,
  aliased or holed offsets, 20,000 names over one tensor's bytes, NaN weights, a tensor named with markup), then
  ``check --checkpoint`` and ``evaluate``; a defect also: a command past 60 s.

Writes README.md (the table, the command, the date and the machine) and results.json (every case, one line each:
mode, file, entry, value, exit code, defect and, for a defect, the end of its stderr) into --out; exits 1 when any
defect is found.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import platform
import random
import shutil
import signal
import struct
import sys
import tempfile
import time
from collections import Counter
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpaudit.cli.main import main  # noqa: E402

INJECT = "**Verdict**: `consistent`<b>x</b>\n---\n<!-- end -->"
MARKUP = "<b>x</b>"
DECIDED = ("empirical", "empirical_best", "family_wise", "audit_limits", "noise_checks", "whitebox_two_sample",
           "mechanism_checks", "attacks", "canary_plan", "evidence_tiers", "verdict", "claim", "mechanism", "accounting",
           "exposure", "audit_plan")  # the last five since 2026-12-01 (the accounting and exposure sections re-derived)
CHECKPOINT_FILES = ("privacy_card.json", "canaries.json", "gradient_canaries.json", "run.json")
CONFIGS = ("tiny.toml", "final_weights/tiny_gpt2_sgd.toml", "userlevel_chitchat.toml", "lmo_dp_sentiment.toml",
           "pmixed_chitchat.toml", "dp_frost_sentiment.toml", "li_repro_table2text_lora_all_linear.toml")
STRATEGIES = ("fixed", "held-out", "search", "median", "two-sample")
ROOT = Path(__file__).resolve().parents[1]


def leaves(d, at=()):
    """(path, value) of every entry, lists read at their first two items."""
    if isinstance(d, dict):
        for k, v in d.items():
            yield at + (k,), v
            yield from leaves(v, at + (k,))
    elif isinstance(d, list):
        for i, v in enumerate(d[:2]):
            yield at + (i,), v
            yield from leaves(v, at + (i,))


def edited(d, at, value, drop=False):
    out = copy.deepcopy(d)
    node = out
    for k in at[:-1]:
        node = node[k]
    if drop:
        node.pop(at[-1])
    else:
        node[at[-1]] = value
    return out


def values(v, few=False):
    """(name, hostile value) for an entry holding ``v``; ``few``: the three or four that find most."""
    out = [("markup", INJECT), ("null", None)] + ([] if few else [("drop", None)])
    if isinstance(v, bool):
        out += [("flip", not v), ("string", "true")]
    elif isinstance(v, (int, float)):
        out += ([("x2", v * 2 if v else 1)] if not few else []) + [("negative", -abs(v) - 1), ("1e308", 1e308)]
        out += [] if few else [("nan", float("nan")), ("string", str(v)), ("true", True)]  # bool is an int
    elif isinstance(v, str):
        out += [("number", 1.5)] + ([] if few else [("empty", "")])
    elif isinstance(v, list):
        out += [("empty", [])] + ([] if few else [("object", {})])
    elif isinstance(v, dict):
        out += [("list", [])] + ([] if few else [("empty", {})])
    return out


class _Hang(Exception):
    pass


def _alarm(*_):
    raise _Hang()


def call(argv, limit: int = 0) -> tuple:
    """(exit code, stderr, stdout) of ``dpaudit ARGV`` in-process; ``limit`` > 0: code "hang" past that many s."""
    err, out = io.StringIO(), io.StringIO()
    if limit:
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(limit)
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as e:
            code = e.code
        except _Hang:
            code = "hang"
        finally:
            if limit:
                signal.alarm(0)
    return code, err.getvalue(), out.getvalue()


def defect(code, err, value: str = "") -> str | None:
    """``value``: the hostile value's name; ``true`` put where an input holds a number must be refused (Python's
    bool is an int: a check that forgets it reads true as 1)."""
    lines = [ln for ln in err.strip().splitlines() if ln.strip() and not ln.startswith("warning")]
    if code == "hang":
        return "still running at its time limit"
    if code not in (0, 1, 2):
        return f"exit {code}"
    if code == 2 and len(lines) != 1:
        return "a refusal of more than one line"
    if value == "true" and code != 2:
        return "true accepted where a number belongs"
    return None


def report_cases(run: Path, variant: str, mode: str, work: Path, sample: int, rng) -> list[dict]:
    src = run / variant
    orig = json.loads((src / "report" / "report.json").read_text())
    cases = [(at, name, new) for at, v in leaves(orig) for name, new in values(v)]
    if mode == "checkck":  # one value a leaf, in the sections the evidence decides
        firsts: dict = {}
        for at, name, new in cases:
            if at[0] in DECIDED and name in ("x2", "flip", "markup", "drop") and at not in firsts:
                firsts[at] = (at, name, new)
        cases = list(firsts.values())
        cases = rng.sample(cases, min(sample, len(cases)))
    columns = None
    if mode == "table":
        columns = _table_columns(run)
    out = []
    for at, name, new in cases:
        if work.exists():
            shutil.rmtree(work)
        shutil.copytree(run if mode == "table" else src, work)
        rj = work / (f"{variant}/report/report.json" if mode == "table" else "report/report.json")
        changed = edited(orig, at, new, drop=name == "drop")
        rj.write_text(json.dumps(changed))
        if mode == "check":
            argv = ["check", rj]
        elif mode == "checkck":
            argv = ["check", rj, "--checkpoint", work / "checkpoint"]
        elif mode == "compare":
            argv = ["compare", src / "report" / "report.json", rj]
        elif mode == "card":
            (work / "README.md").write_text("# model\n")
            argv = ["model-card", rj, "--to", work / "README.md"]
        else:
            argv = ["table", work, "--columns", columns]
        code, err, text = call(argv)
        bad = defect(code, err)
        if mode == "card" and code == 0 and MARKUP in (work / "README.md").read_text():
            bad = "markup from the report in the model card"
        if mode in ("table", "compare") and code == 0 and MARKUP in text:
            bad = f"markup from the report in the {mode} output"
        if mode == "checkck" and code == 0 and changed != orig:
            bad = "an edit of the evidence passed the gate"
        out.append({"mode": mode, "path": "/".join(map(str, at)), "value": name, "code": code, "defect": bad,
                    "stderr": err.strip()[-300:]})
    return out


def _table_columns(run: Path) -> str:
    from dpaudit.report.table import COLUMNS

    return ",".join(c for c in COLUMNS if call(["table", run, "--columns", c])[0] == 0)


def checkpoint_cases(run: Path, variant: str, work: Path, sample: int, rng) -> list[dict]:
    src = run / variant / "checkpoint"
    out = []
    for fname in CHECKPOINT_FILES:
        if not (src / fname).is_file():
            continue
        orig = json.loads((src / fname).read_text())
        entries = list(leaves(orig))
        entries = rng.sample(entries, min(sample, len(entries)))
        for at, v in entries:
            for name, new in values(v, few=True):
                if work.exists():
                    shutil.rmtree(work)
                shutil.copytree(src, work / "ck")
                (work / "ck" / fname).write_text(json.dumps(edited(orig, at, new)))
                code, err, _ = call(["evaluate", work / "ck", "--out", work / "out", "--attacks", "loss",
                                     "--off-plan", "--quiet"])
                out.append({"mode": "evaluate", "file": fname, "path": "/".join(map(str, at)), "value": name,
                            "code": code, "defect": defect(code, err, name), "stderr": err.strip()[-300:]})
    return out


def toml_text(d: dict) -> str:
    """``d`` as TOML (enough for configs: tables, arrays of tables, scalars, lists); a None is left out."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float):
            return "nan" if v != v else ("inf" if v == float("inf") else "-inf" if v == -float("inf") else repr(v))
        if isinstance(v, int):
            return str(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v if x is not None) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items() if x is not None) + "}"
        raise TypeError(type(v))

    def table(d, name):
        lines = [f"{json.dumps(k)} = {value(v)}" for k, v in d.items() if v is not None and not (
            isinstance(v, dict) or (isinstance(v, list) and v and all(isinstance(x, dict) for x in v)))]
        out = ([f"[{name}]"] if name else []) + lines
        for k, v in d.items():
            sub = f"{name}.{json.dumps(k)}" if name else json.dumps(k)
            if isinstance(v, dict):
                out += ["", table(v, sub)]
            elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
                for x in v:  # an array of tables: its scalars under [[name]], its sub-tables inline
                    out += ["", f"[[{sub}]]"] + [f"{json.dumps(k2)} = {value(x2)}" for k2, x2 in x.items()
                                                 if x2 is not None]
        return "\n".join(out)

    return table(d, "") + "\n"


def file_cases(mode: str, orig, write, argv, work: Path, few: bool, sample: int, rng, label: str) -> list[dict]:
    """Each leaf of ``orig`` (up to ``sample``) x its hostile values: ``write(path, edited)`` then ``argv(path)``."""
    entries = list(leaves(orig))
    entries = rng.sample(entries, min(sample, len(entries)))
    out = []
    for at, v in entries:
        for name, new in values(v, few=few):
            if work.exists():
                shutil.rmtree(work)
            work.mkdir(parents=True)
            path = write(work, edited(orig, at, new, drop=name == "drop"))
            for args in argv(path):
                code, err, _ = call(args)
                out.append({"mode": mode, "file": label, "path": "/".join(map(str, at)), "value": name,
                            "code": code, "defect": defect(code, err, name), "stderr": err.strip()[-300:]})
    return out


def input_cases(mode: str, run: Path, variant: str, work: Path, sample: int, rng) -> list[dict]:
    """The modes that edit an input file rather than the run's outputs: config, policy, account, scores."""
    import tomllib

    def put(name, text_of):
        def write(folder, d):
            (folder / name).write_text(text_of(d))
            return folder / name
        return write

    if mode == "config":
        out = []
        for rel in CONFIGS:  # LMO's dry run searches its noise for every variant (about 35 s): fewer leaves
            orig = tomllib.loads((ROOT / "configs" / rel).read_text())
            n = max(1, sample // 80) if rel.startswith("lmo") else max(1, sample // 10)
            out += file_cases(mode, orig, put("c.toml", toml_text), lambda p: [["run", p, "--dry-run"]], work,
                              True, n, rng, rel)
        return out
    if mode == "policy":
        orig = tomllib.loads((ROOT / "configs" / "policy.toml").read_text())
        report = run / variant / "report" / "report.json"
        return file_cases(mode, orig, put("p.toml", toml_text), lambda p: [["check", report, "--policy", p]], work,
                          False, 10**6, rng, "policy.toml")
    if mode == "account":
        orig = json.loads((run / variant / "checkpoint" / "privacy_card.json").read_text())
        return file_cases(mode, orig, put("privacy_card.json", json.dumps), lambda p: [["account", "--card", p]],
                          work, False, 10**6, rng, "privacy_card.json")
    gen = random.Random(1)
    inserted = [gen.random() < 0.5 for _ in range(200)]
    scores = [gen.gauss(1.0 if i else 0.0, 1.0) for i in inserted]
    shapes = {"scores-inserted": {"scores": scores, "inserted": inserted},
              "inserted-held_out": {"inserted": [s for s, i in zip(scores, inserted) if i],
                                    "held_out": [s for s, i in zip(scores, inserted) if not i]}}
    out = []
    for label, orig in shapes.items():
        out += file_cases(mode, orig, put("s.json", json.dumps),
                          lambda p: [["audit", "scores", p, "--strategy", st] for st in STRATEGIES], work, False,
                          10**6, rng, label)
    return out


NUMBERS = ("nan", "-1", "0", "1e308", "1e-320", "x")
STRINGS = ("", "x" * 5000, "\x1b[31mred\nline2", "a,,  ,b")


def _paths(w: Path) -> list:
    """Hostile paths: a folder, a device, nothing, a JSON object, a symlink loop, a FIFO."""
    import os

    w.mkdir(parents=True, exist_ok=True)
    (w / "folder").mkdir(exist_ok=True)
    (w / "obj.json").write_text("{}")
    for name, make in (("loop", lambda p: os.symlink(p, p)), ("fifo", os.mkfifo)):
        if not (w / name).is_symlink() and not (w / name).exists():
            make(w / name)
    return [w / "folder", "/dev/null", w / "nothing", w / "obj.json", w / "loop", w / "fifo"]


def args_cases(run: Path, variant: str, work: Path) -> list[dict]:
    """Every option of every command that runs on the run's files, each hostile value of its type in turn."""
    import click

    from dpaudit.cli.main import cli

    ckpt, rep = run / variant / "checkpoint", run / variant / "report" / "report.json"
    plain = work / "plain"  # a model with a card and no planted canaries: what `audit split` audits
    shutil.copytree(ckpt / "model", plain)
    shutil.copy(ckpt / "privacy_card.json", plain)
    rows = {k: [json.dumps({"text": f"{k} record {i} says hello"}) for i in range(40)] for k in ("in", "out")}
    for k, lines in rows.items():
        (work / f"{k}.jsonl").write_text("\n".join(lines) + "\n")
    rr = random.Random(0)
    (work / "scores.json").write_text(json.dumps({"inserted": [rr.gauss(1, 1) for _ in range(60)],
                                                  "held_out": [rr.gauss(0, 1) for _ in range(60)]}))
    noise = '{"a1": 0.3, "a2": 0.2, "a3": 0.5, "gamma_k": 2, "gamma_theta": 0.5, "exp_rate": 5, "u_low": 0.5, "u_high": 1.5}'
    mech = ["--sample-rate", "0.01", "--sigma", "1", "--steps", "100", "--delta", "1e-5"]
    base = {  # OUT: a fresh folder of the case's own
        ("account",): mech,
        ("card",): ["--epsilon", "1", *mech, "--clipping-norm", "1", "--batch-size", "10", "--dataset-size", "1000",
                    "--out", "OUT/card.json"],
        ("canaries", "new"): ["--m", "10", "--out", "OUT/canaries.json"],
        ("audit", "one-run"): ["--canaries", "100", "--guesses", "50", "--correct", "40"],
        ("audit", "plan"): [*mech, "--canaries", "100,1000"],
        ("audit", "many-run"): ["--tp", "10", "--fn", "5", "--fp", "3", "--tn", "12"],
        ("audit", "scores"): [work / "scores.json"],
        ("audit", "strategy"): ["--mechanism", "gaussian:1", "--canaries", "100", "--sims", "3"],
        ("audit", "split"): [plain, "--members", work / "in.jsonl", "--non-members", work / "out.jsonl", "--fair-coin",
                             "--out", "OUT/split", "--quiet"],
        ("lmo", "account"): ["--noise", noise, "--delta", "1e-5", "--steps", "10", "--sample-rate", "0.01"],
        ("lmo", "search"): ["--epsilon", "1", "--delta", "1e-5", "--steps", "10", "--sample-rate", "0.01", "--quiet"],
        ("check",): [rep, "--summary", "OUT/summary.md"],
        ("compare",): [rep, rep],
        ("table",): [run, "--columns", "variant,accuracy,claimed,best,verdict"],
        ("model-card",): [rep, "--to", "OUT/README.md"],
        ("evaluate",): [ckpt, "--out", "OUT/ev", "--quiet"],
        ("run",): [ROOT / "configs" / "tiny.toml", "--dry-run", "--out", "OUT/run"],
    }
    paths = _paths(work / "p")
    out, n = [], 0
    for path, argv in base.items():
        cmd = cli
        for part in path:
            cmd = cmd.commands[part]
        positional = 0  # the base lists give a command's arguments first, in their order
        for p in cmd.params:
            if isinstance(p, click.Option) and p.is_flag:
                continue
            kind = type(p.type).__name__
            hostile = (NUMBERS if kind in ("IntParamType", "FloatParamType", "IntRange", "FloatRange")
                       else paths if kind == "Path" else STRINGS if kind == "StringParamType" else ())
            is_arg = isinstance(p, click.Argument)
            opt = p.name.upper() if is_arg else max(p.opts, key=len)
            at = positional
            positional += is_arg
            for v in hostile:
                n += 1
                own = work / f"o{n}"
                own.mkdir()
                args = [str(a).replace("OUT", str(own)) for a in argv]
                if is_arg:
                    args[at] = str(v)
                elif opt in args:
                    args[args.index(opt) + 1] = str(v)
                else:
                    args += [opt, str(v)]
                code, err, _ = call([*path, *args], limit=150)
                shown = str(v).replace(str(work), "WORK")  # the committed results name no path of the machine
                out.append({"mode": "args", "file": " ".join(path), "path": opt, "value": repr(shown)[:60],
                            "code": code, "defect": defect(code, err), "stderr": err[-300:].replace(str(work), "WORK")})
    return out


def weights_cases(run: Path, variant: str, work: Path) -> list[dict]:
    """The checkpoint's weights replaced by damaged and hostile safetensors files; check --checkpoint and evaluate."""
    import numpy as np

    ckpt, rep = run / variant / "checkpoint", run / variant / "report" / "report.json"
    good = (ckpt / "model" / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", good[:8])
    hdr, data = json.loads(good[8:8 + n]), good[8 + n:]
    first = next(k for k in hdr if k != "__metadata__")

    def pack(h=None, raw=None, body=data):
        b = raw if raw is not None else json.dumps(h).encode()
        return struct.pack("<Q", len(b)) + b + body

    def at(**change):
        return pack({**hdr, first: {**hdr[first], **change}})

    text = json.dumps(hdr)
    offsets = json.dumps(hdr[first]["data_offsets"])
    cases = {
        "empty": b"", "truncated": good[:len(good) // 2], "header length past the file": struct.pack("<Q", 2 ** 64 - 1),
        "not UTF-8": pack(raw=b'{"\xff\xfe": 1}'), "an array": pack(raw=b"[]"),
        "100,000 brackets deep": pack(raw=b"[" * 100000 + b"]" * 100000), "a bool shape": at(shape=[True]),
        "a shape of 2^70 x 0": at(shape=[2 ** 70, 0]), "NaN offsets": pack(raw=text.replace(offsets, "[NaN, 2]").encode()),
        "1e999 offsets": pack(raw=text.replace(offsets, "[1e999, 2]").encode()),
        "a dtype that is an object": at(dtype={"a": 1}), "offsets reversed": at(data_offsets=hdr[first]["data_offsets"][::-1]),
        "a key named twice": pack(raw=(text[:-1] + ", " + json.dumps(first) + ": "
                                       + json.dumps({**hdr[first], "dtype": "F16"}) + "}").encode()),
        "an alias over another tensor's bytes": pack({**hdr, "alias": hdr[first]}),
        "20,000 names over one tensor's bytes": pack({f"t{i}": {"dtype": "F32", "shape": [64], "data_offsets": [0, 256]}
                                                     for i in range(20000)}, body=bytes(256)),
        "NaN weights": pack(hdr, body=np.full(len(data) // 4, np.nan, dtype="<f4").tobytes()),
        "a tensor named with markup": pack({(INJECT if k == first else k): v for k, v in hdr.items()}),
    }
    out = []
    for name, body in cases.items():
        folder = work / f"w{len(out)}"
        shutil.copytree(ckpt, folder)
        (folder / "model" / "model.safetensors").write_bytes(body)
        for argv in (["check", rep, "--checkpoint", folder], ["evaluate", folder, "--out", work / f"e{len(out)}", "--quiet"]):
            code, err, _ = call(argv, limit=60)
            out.append({"mode": "weights", "file": argv[0], "path": "model/model.safetensors", "value": name,
                        "code": code, "defect": defect(code, err), "stderr": err[-300:].replace(str(work), "WORK")})
    return out


def main_(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a `dpaudit run` folder whose variant has probe records")
    ap.add_argument("--variant", default=None, help="the DP variant to edit (default: the first with a claim)")
    ap.add_argument("--modes", default="check,card,table,compare,checkck,evaluate,config,policy,account,scores,args,weights",
                    help="comma-separated, in order")
    ap.add_argument("--sample", type=int, default=250, help="cases of checkck; leaves per file of evaluate (/6)")
    ap.add_argument("--seed", type=int, default=0, help="the sample's seed")
    ap.add_argument("--out", type=Path, required=True, help="folder for README.md and results.json")
    a = ap.parse_args(argv)
    variant = a.variant or next(v.parent.parent.name for v in sorted(a.run.glob("*/report/report.json"))
                                if json.loads(v.read_text())["claim"].get("private"))
    rng = random.Random(a.seed)
    results, took = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in a.modes.split(","):
            t = time.time()
            if mode == "evaluate":
                results += checkpoint_cases(a.run, variant, Path(tmp) / "w", max(1, a.sample // 6), rng)
            elif mode == "args":
                (Path(tmp) / "a").mkdir()
                results += args_cases(a.run, variant, Path(tmp) / "a")
            elif mode == "weights":
                (Path(tmp) / "s").mkdir()
                results += weights_cases(a.run, variant, Path(tmp) / "s")
            elif mode in ("config", "policy", "account", "scores"):
                results += input_cases(mode, a.run, variant, Path(tmp) / "w", a.sample, rng)
            else:
                results += report_cases(a.run, variant, mode, Path(tmp) / "w", a.sample, rng)
            took[mode] = time.time() - t
            print(f"{mode}: {sum(r['mode'] == mode for r in results)} cases in {took[mode]:.0f} s", file=sys.stderr)
    a.out.mkdir(parents=True, exist_ok=True)
    keys = ("mode", "file", "path", "value", "code", "defect")  # one line a case; stderr kept for defects only
    (a.out / "results.json").write_text("[\n" + ",\n".join(
        json.dumps([r.get(k, "report.json" if k == "file" else None) for k in keys]
                   + ([r["stderr"]] if r["defect"] else [])) for r in results) + "\n]\n")
    rows = []
    for mode in a.modes.split(","):
        mine = [r for r in results if r["mode"] == mode]
        codes = Counter(str(r["code"]) for r in mine)
        bad = [r for r in mine if r["defect"]]
        rows.append(f"| {mode} | {len(mine)} | {codes.get('0', 0)} | {codes.get('1', 0)} | {codes.get('2', 0)} | "
                    f"{len(bad)} | {took[mode]:.0f} s |")
    defects = [r for r in results if r["defect"]]
    lines = [
        "# A hostile round by machine", "",
        f"Command: `python experiments/hostile_fuzz.py {a.run.name} --modes {a.modes} --sample {a.sample} "
        f"--seed {a.seed} --out {a.out}` on the `{variant}` variant of a `dpaudit run configs/tiny.toml` folder.",
        f"Date: {date.today().isoformat()}; machine: {platform.machine()}, {platform.system()}, "
        f"Python {platform.python_version()}.", "",
        "| mode | cases | exit 0 | exit 1 | exit 2 | defects | time |", "|---|---|---|---|---|---|---|", *rows, "",
        "A defect: exit 3 (an internal error), a refusal of more than one line, markup from an input in an output, "
        "or (`checkck`) an edit of the evidence that `check --checkpoint` passed. Every case is in results.json.", "",
        "What each mode edits: `check`, `card`, `table`, `compare`: the variant's report.json; `checkck`: its evidence sections; "
        "`evaluate`: the checkpoint's JSON files; `config`: the committed configs " + ", ".join(CONFIGS)
        + " (`run --dry-run`); `policy`: configs/policy.toml (`check --policy`); `account`: the checkpoint's "
        "privacy_card.json (`account --card`); `scores`: a score file of each shape (`audit scores`, every "
        "strategy); `args`: every option of the commands that run on the run's files (`file` names the command); "
        "`weights`: the checkpoint's model.safetensors (`check --checkpoint`, `evaluate`).", "",
    ]
    lines += [f"- {r['mode']} {r.get('file', 'report.json')} `{r['path']}` = {r['value']}: {r['defect']}"
              for r in defects] or ["No defect."]
    (a.out / "README.md").write_text("\n".join(lines) + "\n")
    print(f"{len(defects)} defects in {len(results)} cases; {a.out / 'README.md'}")
    return 1 if defects else 0


if __name__ == "__main__":
    sys.exit(main_())
