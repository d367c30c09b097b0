"""The pip command an install hint prints (dpaudit/install_hint.py) takes the form of the install it runs in, read from
PEP 610's direct_url.json, since dpaudit is not on a package index (issue wave 5 · 4/5, item 3)."""

import json
import subprocess
import sys

from dpaudit.install_hint import pip_command


def test_each_kind_of_install_gets_its_own_command():
    wheel = {"url": "file:///home/me/dist/dpaudit-0.1.0-py3-none-any.whl", "archive_info": {}}
    assert pip_command("audit", wheel) == "pip install '/home/me/dist/dpaudit-0.1.0-py3-none-any.whl[audit]'"
    spaced = {"url": "file:///home/me/my%20dist/dpaudit-0.1.0-py3-none-any.whl", "archive_info": {}}
    assert pip_command("train", spaced) == "pip install '/home/me/my dist/dpaudit-0.1.0-py3-none-any.whl[train]'"
    git = {"url": "https://github.com/acme/dpaudit", "vcs_info": {"vcs": "git", "commit_id": "abc123",
                                                                  "requested_revision": "v0.1.0"}}
    assert pip_command("audit", git) == "pip install 'dpaudit[audit] @ git+https://github.com/acme/dpaudit@v0.1.0'"
    pinned = {"url": "https://github.com/acme/dpaudit", "vcs_info": {"vcs": "git", "commit_id": "abc123"}}
    assert pip_command("train", pinned).endswith("git+https://github.com/acme/dpaudit@abc123'")
    editable = {"url": "file:///src/dpaudit", "dir_info": {"editable": True}}
    assert pip_command("train", editable) == "pip install -e '/src/dpaudit[train]'"
    remote = {"url": "https://example.org/dpaudit-0.1.0-py3-none-any.whl", "archive_info": {}}
    assert pip_command("audit", remote) == "pip install 'dpaudit[audit] @ https://example.org/dpaudit-0.1.0-py3-none-any.whl'"
    assert "pip install -e '.[audit]'" in pip_command("audit", found=False)


def test_this_checkout_reads_its_own_install_record(tmp_path):
    """The suite's venv installs the checkout editable: the hint names that folder, as pip recorded it."""
    from importlib import metadata

    records = [d.read_text("direct_url.json") for d in metadata.distributions(name="dpaudit")]
    got = pip_command("train")
    recorded = [json.loads(t) for t in records if t]
    assert got == (pip_command("train", recorded[0]) if recorded else "pip install 'dpaudit[train]'")
    out = subprocess.run([sys.executable, "-c", "from dpaudit.install_hint import pip_command; print(pip_command('audit'))"],
                         capture_output=True, text=True, cwd=tmp_path)  # from another folder: the same record
    assert out.stdout.strip() == pip_command("audit")
