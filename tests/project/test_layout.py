"""docs/layout.md held to the tree: its module index is what scripts/layout.py generates from the modules and their
docstrings (a module added, removed or re-described without re-running it fails here), and every file its folder
table names exists in that folder."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("layout_script", ROOT / "scripts" / "layout.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_module_index_is_the_trees():
    layout = _script()
    text = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    assert layout.BEGIN in text and layout.END in text
    assert layout.rendered(text) == text, "docs/layout.md's module index differs from the tree: run python scripts/layout.py"
    for top in layout.FOLDERS:  # every module of every package is a row of its folder's table
        for p in (ROOT / top).rglob("*.py"):
            if "__pycache__" not in p.parts:
                folder = p.parent.relative_to(ROOT).as_posix()
                section = text.split(f"### `{folder}/`", 1)[1].split("###", 1)[0]
                assert f"| `{p.name}` |" in section, p


def test_the_index_notices_a_new_module(tmp_path, monkeypatch):
    """The check can fail: a module that is not in the committed index changes the rendering."""
    layout = _script()
    text = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    fake = tmp_path / "root"
    for top in layout.FOLDERS:
        for p in (ROOT / top).rglob("*.py"):
            if "__pycache__" not in p.parts:
                dest = fake / p.relative_to(ROOT)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(p.read_text(encoding="utf-8"), encoding="utf-8")
    (fake / "trainers" / "brand_new.py").write_text('"""A module nobody indexed."""\n', encoding="utf-8")
    monkeypatch.setattr(layout, "ROOT", fake)
    assert layout.rendered(text) != text and "| `brand_new.py` | A module nobody indexed. |" in layout.rendered(text)


def test_every_file_the_folder_table_names_exists():
    text = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8").split("## Modules", 1)[0]
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) >= 10
    missing = []
    for line in rows:
        folder = ROOT / re.match(r"\| `([^`]+)`", line).group(1)
        for name in re.findall(r"`([A-Za-z0-9_./-]+\.(?:py|toml|sh|md))`", line):
            if not (list(folder.rglob(Path(name).name)) if folder.is_dir() else []) and not (ROOT / name).exists():
                missing.append(f"{folder.name}/{name}")
    assert not missing, f"docs/layout.md names files that do not exist: {missing}"
