"""Every task reads the user's own data (tasks/data_source.py): files, folders, save_to_disk folders, named
columns; bad data is refused in one line before any training; a hub name offline is refused with the reason."""

import csv
import dataclasses
import json

import pytest

from dpaudit.errors import DpauditError
from dpaudit.run import config
from dpaudit.run.config import TaskConfig
from dpaudit.tasks import registry, sentiment, table2text, userlm


def _write(path, rows):
    """rows (dicts) as .jsonl, .csv or .tsv by the path's suffix."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t" if path.suffix == ".tsv" else ",")
            w.writeheader()
            w.writerows(rows)


def _reviews(n=40, offset=0):
    return [{"review": f"film number {i} was {'good' if i % 2 else 'bad'}", "stars": i % 2, "id": i}
            for i in range(offset, offset + n)]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".tsv"])
def test_sentiment_reads_named_columns_from_every_file_type(tmp_path, suffix):
    _write(tmp_path / f"d{suffix}", _reviews())
    d = sentiment.load(str(tmp_path / f"d{suffix}"), test_fraction=0.25, columns={"text": "review", "label": "stars"})
    assert len(d.train) == 30 and len(d.test) == 10
    by_text = {r["review"]: r["stars"] for r in _reviews()}
    assert all(by_text[e["sentence"]] == e["label"] for e in d.train + d.test)
    # the same data under the default column names gives the same split and the same hash
    _write(tmp_path / f"e{suffix}", [{"text": r["review"], "label": r["stars"]} for r in _reviews()])
    assert sentiment.load(str(tmp_path / f"e{suffix}"), test_fraction=0.25).fingerprint() == d.fingerprint()


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".tsv"])
def test_a_leading_byte_order_mark_is_not_data(tmp_path, suffix):
    """A file saved by Excel or Notepad as "UTF-8 with BOM": the same rows, split and hash as without the mark (its
    first column was named '\ufefftext' and refused as missing)."""
    _write(tmp_path / f"d{suffix}", _reviews())
    (tmp_path / f"b{suffix}").write_bytes(b"\xef\xbb\xbf" + (tmp_path / f"d{suffix}").read_bytes())
    cols = {"text": "review", "label": "stars"}
    plain, bom = (sentiment.load(str(tmp_path / f"{n}{suffix}"), test_fraction=0.25, columns=cols) for n in "db")
    assert bom.fingerprint() == plain.fingerprint() and len(bom.train) == 30


@pytest.mark.parametrize("brk", ["\u2028", "\u2029", "\x85", "\x0c", "\x1e"])
def test_a_jsonl_text_holding_a_unicode_line_separator_is_one_record(tmp_path, brk):
    """json.dumps(..., ensure_ascii=False) (pandas' force_ascii=False, most scrapers) writes U+2028, U+2029 and NEL
    raw inside a string: str.splitlines broke such a record in two ("line 3 is not valid JSON"). Lines end at
    \\n (or \\r\\n) only, in every reader of records (the tasks' data, the post-hoc audit's texts)."""
    from dpaudit.evaluation import posthoc
    from dpaudit.tasks.files import read_rows

    rows = [{"review": f"film {i} was{brk}{'good' if i % 2 else 'bad'}", "stars": i % 2} for i in range(40)]
    f = tmp_path / "d.jsonl"
    f.write_text("".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in rows), encoding="utf-8", newline="")
    assert (brk in f.read_text(encoding="utf-8")) == (brk >= "\x80")  # JSON escapes control characters only
    assert read_rows(f, "data", "") == rows
    assert posthoc.read_texts(f, "review")[0] == [r["review"] for r in rows]
    txt = tmp_path / "d.txt"
    txt.write_text("".join(r["review"] + "\n" for r in rows), encoding="utf-8", newline="")
    assert posthoc.read_texts(txt)[0] == [r["review"] for r in rows]


def test_json_arrays_json_lines_and_parquet_read_as_the_same_rows(tmp_path):
    """The formats other tools write: an Alpaca-style JSON array, datasets' to_json (JSON Lines in a .json file),
    pandas' to_json(orient="records"), datasets' to_parquet. The same rows, split and hash as the .jsonl file;
    the post-hoc audit's reader takes them too. A pretty-printed single object, an array of non-objects and a
    damaged Parquet file are one line each; a folder with two train files is refused, not one picked."""
    import datasets

    from dpaudit.evaluation import posthoc

    rows = [{"text": r["review"], "label": r["stars"]} for r in _reviews()]
    _write(tmp_path / "d.jsonl", rows)
    (tmp_path / "array.json").write_text(json.dumps(rows, indent=2))
    ds = datasets.Dataset.from_list(rows)
    ds.to_json(str(tmp_path / "lines.json"))
    ds.to_parquet(str(tmp_path / "d.parquet"))
    want = sentiment.load(str(tmp_path / "d.jsonl"), test_fraction=0.25).fingerprint()
    for name in ("array.json", "lines.json", "d.parquet"):
        assert sentiment.load(str(tmp_path / name), test_fraction=0.25).fingerprint() == want, name
        assert posthoc.read_texts(tmp_path / name)[0] == [r["text"] for r in rows], name
    (tmp_path / "one.json").write_text(json.dumps({"data": rows}, indent=2))
    (tmp_path / "ints.json").write_text("[1, 2]")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    for name, needle in (("one.json", "one JSON object over several lines"), ("ints.json", "item 1 of the array is a "
                                                                                           "JSON number"),
                         ("bad.parquet", "not a readable Parquet file")):
        with pytest.raises(DpauditError, match=needle) as e:
            sentiment.load(str(tmp_path / name))
        assert "\n" not in str(e.value)
    folder = tmp_path / "two"
    folder.mkdir()
    for name in ("train.json", "train.jsonl", "test.jsonl"):
        (folder / name).write_text((tmp_path / "d.jsonl").read_text())
    with pytest.raises(DpauditError, match="holds two train files"):
        sentiment.load(str(folder))


def test_save_to_disk_folders_for_every_task(tmp_path):
    import datasets

    datasets.DatasetDict({
        "train": datasets.Dataset.from_list(_reviews(30)),
        "validation": datasets.Dataset.from_list(_reviews(8, offset=100)),
    }).save_to_disk(str(tmp_path / "sst"))
    d = sentiment.load(str(tmp_path / "sst"), columns={"text": "review", "label": "stars"})
    assert len(d.train) == 30 and len(d.test) == 8 and d.test[0]["sentence"] == "film number 100 was bad"

    rows = [{"meaning": f"name[{i % 5}], food[x{i % 3}]", "human": f"text {i}"} for i in range(40)]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "e2e"))
    t = table2text.load(str(tmp_path / "e2e"), test_fraction=0.2, columns={"table": "meaning", "reference": "human"})
    assert len(t.train) + sum(len(e["refs"]) for e in t.test) == 40
    assert {e["mr"] for e in t.test}.isdisjoint({e["mr"] for e in t.train})  # an MR's references stay together

    mails = [{"from": f"u{i % 6}", "body": f"mail {i}"} for i in range(60)]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(mails[:48]),
                          "test": datasets.Dataset.from_list([{"from": "held", "body": f"x {i}"} for i in range(5)])}
                         ).save_to_disk(str(tmp_path / "mails"))
    u = userlm.load(str(tmp_path / "mails"), columns={"user": "from", "text": "body"})
    assert len(u.by_user()) == 6 and {r["user"] for r in u.test} == {"held"} and len(u.test) == 5


def test_a_folder_of_split_files_keeps_its_splits(tmp_path):
    (tmp_path / "data").mkdir()
    _write(tmp_path / "data" / "train.csv", [{"mr": f"name[{i}]", "ref": f"it is {i}"} for i in range(10)])
    _write(tmp_path / "data" / "test.csv", [{"mr": "name[z]", "ref": "z one"}, {"mr": "name[z]", "ref": "z two"}])
    t = table2text.load(str(tmp_path / "data"))
    assert len(t.train) == 10 and t.test == [{"mr": "name[z]", "refs": ["z one", "z two"]}]


def test_bad_data_is_one_line_before_training(tmp_path):
    _write(tmp_path / "d.csv", _reviews())
    with pytest.raises(DpauditError, match=r"no column 'body' \(task.columns.text\); its columns are 'review', 'stars', 'id'"):
        sentiment.load(str(tmp_path / "d.csv"), columns={"text": "body", "label": "stars"})
    with pytest.raises(DpauditError, match=r"no text column .*\[task.columns\] text"):
        sentiment.load(str(tmp_path / "d.csv"))
    _write(tmp_path / "one.jsonl", [{"text": f"t {i}", "label": 1} for i in range(20)])
    with pytest.raises(DpauditError, match="one class only"):
        sentiment.load(str(tmp_path / "one.jsonl"))
    _write(tmp_path / "gap.jsonl", [{"text": "a", "label": 0}, {"text": "", "label": 1}])
    with pytest.raises(DpauditError, match="row 1 has no text"):
        sentiment.load(str(tmp_path / "gap.jsonl"))
    # a text field holding chat messages or a number trained on its Python repr (a hostile round, 2026-12-01)
    _write(tmp_path / "chat.jsonl", [{"text": [{"role": "user", "content": "hi"}], "label": 0}])
    with pytest.raises(DpauditError, match="row 0's text .* is not text but a list"):
        sentiment.load(str(tmp_path / "chat.jsonl"))
    _write(tmp_path / "num.jsonl", [{"user": 7, "text": 12345}])
    with pytest.raises(DpauditError, match="not text but a int"):
        userlm.load(str(tmp_path / "num.jsonl"))
    _write(tmp_path / "frac.jsonl", [{"text": "a", "label": 0.5}])
    with pytest.raises(DpauditError, match="non-integer label"):
        sentiment.load(str(tmp_path / "frac.jsonl"))
    (tmp_path / "empty.csv").write_text("text,label\n")
    with pytest.raises(DpauditError, match="is empty"):
        sentiment.load(str(tmp_path / "empty.csv"))
    _write(tmp_path / "u.jsonl", [{"user": "a", "text": "hi"}, {"user": None, "text": "who"}])
    with pytest.raises(DpauditError, match="row 1 has no user"):
        userlm.load(str(tmp_path / "u.jsonl"))
    (tmp_path / "split").mkdir()
    _write(tmp_path / "split" / "train.jsonl", [{"user": "a", "text": "x"}, {"user": "b", "text": "y"}])
    _write(tmp_path / "split" / "test.jsonl", [{"user": "b", "text": "z"}])
    with pytest.raises(DpauditError, match="both the train and the test split"):
        userlm.load(str(tmp_path / "split"))


def test_hub_names_offline_and_config_checks(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DpauditError, match=r"'stanfordnlp/sst2' is not a local file or folder.*HF_DATASETS_OFFLINE=1"):
        sentiment.load("stanfordnlp/sst2")
    with pytest.raises(DpauditError, match="task.columns.review is not a field"):
        TaskConfig(name="sentiment", source=str(tmp_path), columns={"review": "text"})
    with pytest.raises(DpauditError, match="bundled data has fixed columns"):
        TaskConfig(name="userlm", columns={"user": "from"})
    # run.json's task section carries the columns; registry.load_data reads them back
    _write(tmp_path / "d.jsonl", _reviews())
    task = TaskConfig(name="sentiment", source=str(tmp_path / "d.jsonl"), columns={"text": "review", "label": "stars"},
                      n_test=3)
    data = registry.load_data(task.__dict__)
    assert len(data.test) == 3 and data.source == str(tmp_path / "d.jsonl")


def test_docs_blocks_dry_run_on_data_of_those_shapes(tmp_path, monkeypatch, capsys):
    """Every TOML block of docs/your_data.md plans (dpaudit run --dry-run) on a stand-in model and data files with
    the block's columns: the data is read, renamed and counted."""
    import re
    from pathlib import Path

    import datasets

    from dpaudit.cli import main
    from dpaudit.tasks import models
    from dpaudit.tasks.model_spec import ModelSpec

    model, tok = models.build(ModelSpec(name="tiny-gpt2", vocab_size=512, n_embd=32, n_layer=2, n_head=2, max_len=128))
    model.save_pretrained(tmp_path / "my-model")
    tok.save_pretrained(tmp_path / "my-model")
    (tmp_path / "data").mkdir()
    _write(tmp_path / "data" / "reviews.csv", _reviews(50))
    e2e = [{"meaning_representation": f"name[{i}], food[f{i % 4}]", "human_reference": f"{i} serves f{i % 4}."}
           for i in range(30)]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(e2e[:24] + e2e[:6]),
                          "validation": datasets.Dataset.from_list(e2e[24:])}).save_to_disk(str(tmp_path / "data" / "e2e_nlg"))
    _write(tmp_path / "data" / "mail.jsonl", [{"from": f"u{i % 20}", "body": f"mail {i}"} for i in range(100)])
    monkeypatch.chdir(tmp_path)
    text = (Path(__file__).resolve().parents[2] / "docs" / "your_data.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 3
    # training units read: 45 of 50 texts; 24 tables (30 references, six tables twice); 18 of 20 users
    expected = {"sentiment": (45, 45), "table2text": (30, 24), "userlm": (18 * 5, 18)}
    for b in blocks:
        (tmp_path / "c.toml").write_text(b)
        assert main(["run", "c.toml", "--dry-run", "--quiet"]) == 0
        assert "| sampled from |" in capsys.readouterr().out
        cfg = config.load(tmp_path / "c.toml")
        data = registry.load_data(dataclasses.asdict(cfg.task))
        units = {"sentiment": len, "table2text": lambda t: len({e["mr"] for e in t}),
                 "userlm": lambda t: len({e["user"] for e in t})}[cfg.task.name](data.train)
        assert (len(data.train), units) == expected[cfg.task.name]
    # a wrong column name in the same config is one line and exit 2, before anything is planned
    (tmp_path / "c.toml").write_text(blocks[0].replace('text = "review"', 'text = "body"'))
    assert main(["run", "c.toml", "--dry-run", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "no column 'body' (task.columns.text)" in err and len(err.strip().splitlines()) == 1


def test_a_file_larger_than_memory_allows_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """Every reader of records reads a file whole: one whose rows would not fit is refused in one line, by its size,
    before any byte is read (the machine's memory pretended small)."""
    from dpaudit.tasks import model_spec
    from dpaudit.tasks.files import read_rows

    f = tmp_path / "d.jsonl"
    _write(f, _reviews())
    monkeypatch.setattr(model_spec, "available_memory", lambda: f.stat().st_size * 5)
    with pytest.raises(DpauditError, match="its rows would need about .* more than this machine's"):
        read_rows(f, "data", "")
    monkeypatch.setattr(model_spec, "available_memory", lambda: f.stat().st_size * 50)
    assert len(read_rows(f, "data", "")) == 40


def test_labels_as_other_tools_write_them_read_as_the_same_classes(tmp_path):
    """pandas writes an int column that once held NaN as 1.0 in CSV and JSON alike; a CSV's "1.0" was refused while
    JSON's 1.0 was taken. Every such spelling is the same class and the same split; true/false (no class index),
    fractions, other scripts' digits and float()'s own extras ("1_0", "inf") are refused in one line."""
    rows = [{"text": f"film {i}", "label": i % 2} for i in range(20)]
    _write(tmp_path / "int.csv", rows)
    want = sentiment.load(str(tmp_path / "int.csv"), test_fraction=0.25).fingerprint()
    for name, spell in [("float.csv", lambda y: f"{y}.0"), ("pad.tsv", lambda y: f" {y} "), ("f.jsonl", float)]:
        _write(tmp_path / name, [{"text": r["text"], "label": spell(r["label"])} for r in rows])
        assert sentiment.load(str(tmp_path / name), test_fraction=0.25).fingerprint() == want, name
    for bad in ["1_0", "inf", "١", "0x1", "1.5", "yes"]:
        _write(tmp_path / "bad.csv", rows[:-1] + [{"text": "x", "label": bad}])
        with pytest.raises(DpauditError, match="row 19 has a non-integer label"):
            sentiment.load(str(tmp_path / "bad.csv"))
    (tmp_path / "bool.jsonl").write_text("".join(json.dumps({"text": r["text"], "label": bool(r["label"])}) + "\n"
                                                 for r in rows))
    with pytest.raises(DpauditError, match="row 0 has a non-integer label False"):
        sentiment.load(str(tmp_path / "bool.jsonl"))


@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_a_header_naming_a_column_twice_is_refused(tmp_path, suffix):
    """A spreadsheet export with two label columns: DictReader kept the last without a word."""
    sep = "\t" if suffix == ".tsv" else ","
    (tmp_path / f"d{suffix}").write_text(sep.join(["text", "label", "label"]) + "\n"
                                         + "".join(sep.join([f"t{i}", str(i % 2), "1"]) + "\n" for i in range(20)))
    with pytest.raises(DpauditError, match="names the column 'label' twice; rename or remove one"):
        sentiment.load(str(tmp_path / f"d{suffix}"))


def test_a_json_record_naming_a_key_twice_is_refused(tmp_path):
    """{"text": ..., "label": 1, "label": 0}: Python keeps the last, other readers the first; a record that says two
    things is refused, by line, in JSON Lines and in a JSON array alike."""
    good = [{"text": f"film {i}", "label": i % 2} for i in range(19)]
    body = "".join(json.dumps(r) + "\n" for r in good) + '{"text": "x", "label": 1, "label": 0}\n'
    (tmp_path / "d.jsonl").write_text(body)
    with pytest.raises(DpauditError, match="line 20 names the key 'label' twice"):
        sentiment.load(str(tmp_path / "d.jsonl"))
    (tmp_path / "a.json").write_text("[" + ", ".join(body.strip().splitlines()) + "]")
    with pytest.raises(DpauditError, match="a record names the key 'label' twice"):
        sentiment.load(str(tmp_path / "a.json"))


def test_a_parquet_file_naming_a_column_twice_is_refused_by_name(tmp_path):
    """pyarrow writes such a file; reading it failed inside pyarrow ("Multiple matches for FieldRef") and the line
    told the user to save it again. It now names the column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table([pa.array([f"t{i}" for i in range(20)]), pa.array([i % 2 for i in range(20)]),
                             pa.array([1] * 20)], names=["text", "label", "label"]), tmp_path / "d.parquet")
    with pytest.raises(DpauditError, match="names the column 'label' twice; rename or remove one"):
        sentiment.load(str(tmp_path / "d.parquet"))
