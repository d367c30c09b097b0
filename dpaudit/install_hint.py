"""The pip command that adds an extra to the dpaudit this process runs, in the form of the install it came from
(PEP 610's ``direct_url.json``): a wheel file, a git URL, an editable checkout, or a package index. dpaudit is not
published on an index, so a hint of ``pip install 'dpaudit[audit]'`` would send most users to a name pip cannot
find (issue wave 5 · 4/5, item 3). No stage imports: the error paths of every command use it."""

from __future__ import annotations

import json
from urllib.parse import unquote, urlparse


def _direct_url() -> dict | None:
    from importlib import metadata

    # every dpaudit distribution on sys.path: a checkout's own dpaudit.egg-info (no install record) can come
    # before the installed one when the process starts in the checkout
    for dist in metadata.distributions(name="dpaudit"):
        try:
            d = json.loads(dist.read_text("direct_url.json") or "null")
        except ValueError:
            continue
        if isinstance(d, dict) and isinstance(d.get("url"), str):
            return d
    return None


def pip_command(extra: str, direct: dict | None = None, found: bool = True) -> str:
    """``pip install ...`` adding ``extra`` (``audit`` or ``train``) to this install. ``direct``: the install's
    ``direct_url.json`` (read from the installed distribution when None and ``found``); ``found=False``: dpaudit
    runs from a checkout that is not installed."""
    if direct is None and found:
        direct = _direct_url()
    if direct is None:
        return (f"pip install 'dpaudit[{extra}]'" if found and _installed() else
                f"pip install -e '.[{extra}]' (in the checkout) or the wheel built by `pip wheel --no-deps -w dist .`")
    url = direct["url"]
    if "vcs_info" in direct:
        vcs = direct["vcs_info"]
        rev = vcs.get("requested_revision") or vcs.get("commit_id")
        return f"pip install 'dpaudit[{extra}] @ {vcs.get('vcs', 'git')}+{url}{'@' + rev if rev else ''}'"
    if url.startswith("file://"):
        path = unquote(urlparse(url).path)
        if (direct.get("dir_info") or {}).get("editable"):
            return f"pip install -e '{path}[{extra}]'"
        return f"pip install '{path}[{extra}]'"
    return f"pip install 'dpaudit[{extra}] @ {url}'"


def _installed() -> bool:
    from importlib import metadata

    try:
        metadata.distribution("dpaudit")
    except metadata.PackageNotFoundError:
        return False
    return True
