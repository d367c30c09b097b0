"""Small file helpers with no heavy imports (``dpaudit check`` and ``compare`` load through these without
torch): JSON and TOML readers whose failures are one-line :class:`DpauditError` messages naming the fix,
and strict JSON values (infinities as the string "inf"), and the one writer (:func:`write_atomic`).

Over 300 lines on purpose: every input file dpaudit reads and every file it writes pass through this one module
(docs/security.md, "One writer"), so that a defence added here reaches every command at once."""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from pathlib import Path

from dpaudit.errors import DpauditError, first_line

MAX_JSON_BYTES = 256 * 2 ** 20  # the largest dpaudit JSON file read (a 10^6-canary white-box record is ~50 MB)


def regular_file(path: Path, what: str, fix: str) -> None:
    """Refuse, in one line, a path that is not a regular file, saying what it is: missing, a folder, or a device,
    pipe or socket (read whole, those can be endless: /dev/zero, a pipe whose writer never closes).

    Args:
        path: The path given.
        what: What the file is meant to be, for the message.
        fix: What to do instead.

    Raises:
        DpauditError: The path is not a regular file.
    """
    path = Path(path)
    if path.is_file():
        return
    if path.is_dir():
        raise DpauditError(f"{what} at {path} is a folder, not a file; {fix}")
    raise DpauditError((f"{what} at {path} is not a regular file (a device, a pipe or a socket: write it to a file "
                        "first)" if path.exists() else f"{what} not found at {path}") + f"; {fix}")


def read_json(path: Path, what: str, fix: str) -> dict:
    """A JSON file, or a one-line DpauditError (missing file, unreadable, invalid JSON, larger than
    :data:`MAX_JSON_BYTES`: refused before it is read)."""
    path = Path(path)
    regular_file(path, what, fix)
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise DpauditError(f"{what} {path} is {size:,} bytes, more than any dpaudit file ({MAX_JSON_BYTES:,}); it is "
                           "not one: restore the file")
    try:
        return json.loads(path.read_text(), parse_constant=_no_constant, object_pairs_hook=unique_keys)
    except DuplicateKey as e:
        raise DpauditError(f"{what} {path} names the key {printable(str(e))!r} twice in one object (JSON readers "
                           "disagree on which one counts); keep one") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DpauditError(f"cannot read {what} {path}: {e}") from None
    except json.JSONDecodeError as e:
        raise DpauditError(f"{what} {path} is not valid JSON (line {e.lineno}: {e.msg})") from None
    except _NonFinite as e:
        raise DpauditError(f"{what} {path} holds the non-finite number {e} (not JSON); write a finite number, or "
                           "null where the field allows 'none' (e.g. claim.epsilon of a non-private model)") from None
    except RecursionError:
        raise DpauditError(f"{what} {path} is nested too deeply to be a dpaudit file") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts (a 5,001-digit number)
        raise DpauditError(f"{what} {path} cannot be read as dpaudit JSON ({first_line(e, 200)}); restore the file") \
            from None


class _NonFinite(ValueError):
    pass


class DuplicateKey(ValueError):
    """A JSON object naming one key twice (the key is the message)."""


def unique_keys(pairs: list) -> dict:
    """json's ``object_pairs_hook`` that refuses a key named twice in one object: Python keeps the last value, other
    readers the first, so a file holding both says two things (a card with two epsilons).

    Args:
        pairs: The object's (key, value) pairs in file order.

    Returns:
        The object as a dict.

    Raises:
        DuplicateKey: A key occurs twice.
    """
    out = dict(pairs)
    if len(out) != len(pairs):
        raise DuplicateKey(repeated([k for k, _ in pairs]))
    return out


def repeated(names):
    """The first of ``names`` (hashable, in order) that occurs a second time, or None: one reading of "named
    twice" for JSON keys, CSV/TSV headers and Parquet columns, each of which a reader would take one of silently.

    Args:
        names: The keys or column names, in file order.

    Returns:
        The first name seen twice, or None.
    """
    seen: set = set()
    return next((n for n in names if n in seen or seen.add(n)), None)


def _no_constant(name: str):
    """json's hook for the non-standard NaN / Infinity / -Infinity literals: refused (a NaN threshold switches a
    rule off, an infinite epsilon reads as a claim)."""
    raise _NonFinite(name)


def read_toml(path: Path, what: str, fix: str) -> dict:
    """A TOML file as a dict, or a one-line DpauditError (missing file, invalid TOML)."""
    import tomllib

    path = Path(path)
    regular_file(path, what, fix)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8-sig"))  # a leading BOM (Notepad) is not TOML
    except tomllib.TOMLDecodeError as e:
        raise DpauditError(f"{what} {path} is not valid TOML: {e}") from None
    except UnicodeDecodeError as e:
        raise DpauditError(f"{what} {path} is not UTF-8 text (byte {e.start}); save it as UTF-8") from None
    except (OSError, ValueError) as e:
        raise DpauditError(f"cannot read {what} {path}: {first_line(e, 200)}") from None


def refuse_link(path: Path, what: str = "output") -> None:
    """A path dpaudit is about to write (or read in order to rewrite) must not be a symlink: a link planted where
    an output goes would turn the write into one over any file the user can write, or copy a system file's text
    into the output (docs/security.md, "One writer")."""
    import os

    path = Path(path)
    if path.is_symlink():
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        raise DpauditError(f"{what} {printable(path)} is a symlink (to {printable(target)}); dpaudit never writes "
                           "through links: remove the link, or name the file it points to")


def umask() -> int:
    """This process's umask (read by setting it and setting it back: the only way POSIX offers)."""
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def _mode_for(path: Path) -> int:
    """The permissions the written file gets: those of the file it replaces, else the default for new files
    (0o666 less the umask), never the private 0o600 of a temporary file."""

    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        return 0o666 & ~umask()


def _check_target(path: Path) -> None:
    import os

    refuse_link(path)
    if path.is_dir():
        raise DpauditError(f"{path} is a folder, not a file to write; name a file path (a new file, or one to "
                           "overwrite)")
    if path.exists() and not path.is_file():
        raise DpauditError(f"{path} is not a regular file (a FIFO, socket or device); name a file path")
    if path.exists() and (not os.access(path, os.W_OK) or not path.stat().st_mode & 0o222):  # root: by its bits
        raise DpauditError(f"{path} is read-only; make it writable (chmod u+w) to let dpaudit replace it, or name "
                           "another file")
    if not path.parent.is_dir():
        raise DpauditError(f"{path.parent} is not a folder; create it first, or name a file in an existing folder")


def _fresh_sibling(path: Path) -> Path:
    """A new, empty file beside ``path`` under a name nobody could predict, created exclusively (``O_EXCL``: a
    link planted under that name makes the creation fail instead of being followed); it keeps ``path``'s suffix,
    for writers that choose a format by it."""
    import os
    import tempfile

    fd, name = tempfile.mkstemp(prefix=f".{path.stem[:60]}.partial-", suffix=path.suffix[:20], dir=path.parent)
    os.close(fd)
    return Path(name)


def write_atomic(path: Path, save, mode: int | None = None) -> None:
    """The one way dpaudit writes a single file: ``save(tmp)`` fills a fresh, exclusively created temporary file
    beside ``path`` (:func:`_fresh_sibling`), which gets the permissions of the file it replaces (or the
    default for a new file) and then replaces ``path`` in one rename. A ``path`` that is a symlink, a folder, a
    device or read-only is refused before anything is written; a failure leaves no partial file. Folders of
    files go through :mod:`dpaudit.folders` (a fresh private stage, renamed into place). ``mode``: the
    permissions to give it instead (0o600 for a secret)."""
    write_atomic_all([(path, save)], mode)


def write_text(path: Path, text: str) -> None:
    """:func:`write_atomic` of UTF-8 ``text``."""
    write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_atomic_all(files: list, mode: int | None = None) -> None:
    """:func:`write_atomic` for several files that belong together (``[(path, save), ...]``): every one is written
    beside its path first, and only when all are whole do they replace their paths (renames, which need no space);
    a failure (a full disk half-way) leaves none of them, new or partial."""
    import os

    targets = [Path(path) for path, _ in files]
    for path in targets:
        _check_target(path)
    tmps = []
    try:
        for path, (_, save) in zip(targets, files):
            tmp = _fresh_sibling(path)
            tmps.append((tmp, path))
            save(tmp)
            os.chmod(tmp, _mode_for(path) if mode is None else mode)
    except BaseException:
        for tmp, _ in tmps:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, path in tmps:
        os.replace(tmp, path)


def check_append_target(path: Path, what: str) -> Path:
    """Before any work, the refusals :func:`open_append` would give at the end, without creating the file: a link,
    a folder, a pipe or device, a missing or read-only folder (one line, naming the fix)."""
    import os

    path = Path(path)
    shown = printable(path)
    if path.is_symlink():
        raise DpauditError(f"cannot open {what} {shown}: it is a symlink: remove it, then retry")
    if path.exists():
        if path.is_dir():
            raise DpauditError(f"cannot open {what} {shown}: it is a folder: pass a file's path")
        if not path.is_file():
            raise DpauditError(f"cannot open {what} {shown}: it is not a regular file (a pipe, a device or a socket); "
                               "pass a regular file's path")
        if not os.access(path, os.W_OK):
            raise DpauditError(f"cannot open {what} {shown}: it is not writable; pass a file you can write")
    elif not path.parent.is_dir():
        raise DpauditError(f"cannot open {what} {shown}: its folder does not exist: create it or pass another path")
    elif not os.access(path.parent, os.W_OK | os.X_OK):
        raise DpauditError(f"cannot open {what} {shown}: its folder is not writable; pass another path")
    return path


def open_append(path: Path, what: str):
    """``path`` opened for appending (a log, a lock, a CI job's summary page), created when missing, never through a
    link (``O_NOFOLLOW``: a link planted under its name is a one-line DpauditError) and only as a regular file (a
    FIFO is opened without waiting for a reader, then refused: it would block the command for ever)."""
    import errno
    import fcntl
    import os
    import stat

    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as e:
        fix = {errno.ELOOP: "it is a symlink: remove it, then retry",
               errno.ENOENT: "its folder does not exist: create it or pass another path",
               errno.ENOTDIR: "its folder does not exist: create it or pass another path",
               errno.ENXIO: "it is a pipe (FIFO): pass a regular file's path",
               errno.EISDIR: "it is a folder: pass a file's path"}.get(e.errno, "fix it or pass another path")
        raise DpauditError(f"cannot open {what} {printable(path)} ({e.strerror}); {fix}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise DpauditError(f"cannot open {what} {printable(path)}: it is not a regular file (a pipe, a device or a "
                           "socket); pass a regular file's path")
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return os.fdopen(fd, "a")


def jsonable(x):
    """Strict JSON: infinities and NaN become strings ("inf", "nan"; readers map "inf" back)."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return str(x)
    return x


def number(x):
    """A value read back from strict JSON: "inf" is infinity again."""
    return math.inf if x == "inf" else x


REPORT_FILES = ("report.json", "REPORT.md", "roc.png", "scores.png", "exposure.png", "clipping.png")


def check_out(out, protected=(), what: str = "--out", outputs: tuple = (), owner: str = "report.json") -> Path:
    """``out`` as an absolute folder path, refused before any work when it cannot take a report: an existing file
    (or a file on its way), a folder inside (or equal to) one of ``protected`` (the checkpoint being audited:
    writing there would change its hash), a place that cannot be written, or a folder that holds one of
    ``outputs`` (the names the command writes, replacing their namesakes) without being a folder of the same kind
    written by dpaudit: its ``owner`` file (report.json of an evaluation; search.json of a PMixED search) is
    dpaudit's own. A user's REPORT.md or SEARCH.md, and a `dpaudit run` folder's comparison, are never replaced."""
    import os

    out = Path(out).expanduser().absolute()
    long = [part for part in out.parts if len(part.encode()) > 255]
    if long:
        raise DpauditError(f"{what}: the name {long[0][:40]}... is {len(long[0].encode())} bytes, more than a file "
                           "system allows (255); pass a shorter name")
    for p in (out, *out.parents):
        if p.exists():
            if not p.is_dir():
                raise DpauditError(f"{what} {out}: {p} is a file; pass a folder path")
            if not os.access(p, os.W_OK | os.X_OK):
                raise DpauditError(f"{what} {out}: {p} is not writable; pass a folder you can write")
            break
    real = out.resolve()  # a symlink into the checkpoint is the checkpoint
    for p in protected:
        p = Path(p).expanduser().absolute()
        rp = p.resolve()
        if out == p or p in out.parents or real == rp or rp in real.parents:
            raise DpauditError(f"{what} {out} is inside the checkpoint {p} (it would change what is audited); write "
                               "the report elsewhere")
    present = [n for n in outputs if (out / n).exists() or (out / n).is_symlink()]
    if not present:
        return out
    kind, want = _dpaudit_kind(out / owner), OWNER_KIND[owner]
    if kind is None:
        raise DpauditError(f"{what} {out} holds {present[0]} but no {owner} of dpaudit's: the file is not "
                           "dpaudit's to replace; pass a new folder, or one dpaudit wrote the same kind of output into")
    if kind != want:  # a `dpaudit run` folder: its comparison is not one evaluation's to replace
        raise DpauditError(f"{what} {out} holds a dpaudit {kind} report (a `dpaudit run` folder, whose variants' "
                           f"reports it compares): the {want} would replace it; pass a new folder")
    return out


OWNER_KIND = {"report.json": "evaluation", "search.json": "search"}  # the file that says whose a folder is


def _dpaudit_kind(path: Path) -> str | None:
    """What dpaudit wrote ``path`` as: ``evaluation`` or ``comparison`` (a report.json of a known schema), ``search``
    (a search.json of ``dpaudit pmixed search``); None when it is not dpaudit's."""
    try:
        d = read_json(path, path.stem, "")
    except DpauditError:
        return None
    if not isinstance(d, dict):
        return None
    if isinstance(d.get("worst"), dict) and str(d.get("command", "")).startswith("dpaudit pmixed search "):
        return "search"
    ok = d.get("kind") in ("evaluation", "comparison") and isinstance(d.get("schema_version"), int) \
        and not isinstance(d.get("schema_version"), bool)
    return d["kind"] if ok else None


@contextmanager
def native_stderr_held():
    """While a file we did not write is parsed by a native library: what the library writes to file descriptor 2
    (a Rust panic message and its backtrace, 136 lines for one hostile tokenizer) is held back, written out after a
    normal return, and dropped when the parse ends in a panic (pyo3's PanicException), which the CLI answers with
    one line of its own."""
    import os
    import sys
    import tempfile

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (AttributeError, OSError, ValueError):  # no fd 2 (an embedding host): nothing to hold
        yield
        return
    panicked = False
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException as e:
            panicked = type(e).__name__ == "PanicException"
            raise
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            if not panicked:
                held.seek(0)
                data = held.read()
                if data:
                    os.write(2, data)


def contained(root: Path, name, what: str) -> Path:
    """``root / name`` where it resolves inside ``root`` and is a regular file: a record's reference to another
    file of its folder may not leave it (an absolute path, ``..``, a symlink out) nor name a FIFO or device."""
    root = Path(root)
    p = root / str(name)
    try:
        real, base = p.resolve(), root.resolve()
    except (OSError, RuntimeError) as e:
        raise DpauditError(f"{what} {name!r}: cannot resolve it ({e}); keep the file inside {root}") from None
    if base != real and base not in real.parents:
        raise DpauditError(f"{what} {name!r} points outside {root}; the evidence must be inside the folder it "
                           "belongs to: copy the file there and name it relative to the folder")
    if not real.is_file():
        raise DpauditError(f"{what} {name!r} is not a regular file in {root}; restore the file")
    return real


def _hub_blob(root: Path, real: Path) -> bool:
    """Whether ``real`` is a file of the Hugging Face hub cache's own store for the snapshot ``root``: a snapshot
    ``<cache>/models--ORG--NAME/snapshots/REV/`` holds links into ``<cache>/models--ORG--NAME/blobs/`` (the layout
    ``snapshot_download`` and ``from_pretrained`` leave), so those links are the folder's own files; a link into
    another repository's store, or anywhere else, is not."""
    snap = Path(root).absolute()
    repo = snap.parent.parent
    if snap.parent.name != "snapshots" or not repo.name.startswith(("models--", "datasets--")):
        return False
    return real.parent == (repo / "blobs").resolve() and real.is_file()


def check_contained(root: Path, what: str) -> None:
    """Every entry under ``root``: a symlink must resolve inside ``root`` (or, for a hub cache's snapshot, into
    its repository's blobs: :func:`_hub_blob`), and nothing may be a FIFO, socket or device: what is audited is
    what the folder ships (docs/security.md)."""
    import os
    import stat

    base = Path(root).resolve()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            try:
                st = p.lstat()
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                try:
                    real = p.resolve(strict=True)
                except (OSError, RuntimeError):
                    raise DpauditError(f"{what} {root}: {p.relative_to(root)} is a broken or looping symlink; "
                                       "replace it by the file itself") from None
                if real != base and base not in real.parents and not _hub_blob(root, real):
                    raise DpauditError(f"{what} {root}: {p.relative_to(root)} is a symlink to {real}, outside the "
                                       "folder; what is audited must be what the folder ships: copy the file in "
                                       "(a hub download: `hf download REPO --local-dir FOLDER`)")
            elif not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise DpauditError(f"{what} {root}: {p.relative_to(root)} is not a regular file (a FIFO, socket or "
                                   "device); remove it")


def printable(text) -> str:
    """``text`` safe to print on one terminal line: control characters (ANSI escapes, line breaks, carriage
    returns, C1 codes) shown as escapes, so a string read from a report or checkpoint cannot print lines of its
    own (a fake "ok" or "FAIL") or drive the terminal; a file name's bytes that were not UTF-8 shown as escapes too."""
    out = []
    for ch in str(text):
        o = ord(ch)
        if o < 32 or o == 127 or 0x80 <= o < 0xA0 or ch in "\u2028\u2029" or 0xD800 <= o < 0xE000:  # a surrogate:
            # a name's byte that was not UTF-8 (no UTF-8 stream can print it)
            out.append(repr(ch)[1:-1] if ch in "\n\r\t" else f"\\x{o:02x}" if o < 256 else f"\\u{o:04x}")
        else:
            out.append(ch)
    return "".join(out)


def shown_path(path) -> str:
    """A path as a report records it: relative to the working folder when it lies inside it (a committed report
    names the project's folders, never the machine's), else as given."""
    p = Path(path)
    if p.is_absolute():
        try:
            return p.relative_to(Path.cwd()).as_posix()
        except ValueError:
            pass
    return str(p)


KINDS = (("a report (report.json)", lambda d: any(k in d for k in ("kind", "verdict", "variants"))),
         ("a privacy card (privacy_card.json)", lambda d: "claim" in d and ("mechanism" in d or "events" in d)),
         ("a canary manifest (canaries.json)", lambda d: "canaries" in d and "template" in d))


def refuse_other_kind(d, path: Path, want: str) -> None:
    """Refuse, in one line, a JSON file of another of dpaudit's kinds given where ``want`` (the start of one of
    :data:`KINDS`' names, e.g. ``"a privacy card"``) is expected: a swapped argument names what it is, rather than
    the first field the expected kind misses.

    Args:
        d: The parsed file.
        path: Its path, for the message.
        want: The kind expected.

    Raises:
        DpauditError: ``d`` looks like another kind than ``want``.
    """
    if not isinstance(d, dict):
        return
    for name, looks in KINDS:  # the first that fits: a report holds a card's claim and mechanism too
        if looks(d):
            if not name.startswith(want):
                raise DpauditError(f"{path} is {name}, not {want}; check which file each argument names")
            return



def env_folder(variable: str, default: str) -> Path:
    """The folder an environment variable names (``DPAUDIT_CACHE``, ``DPAUDIT_STATE``), absolute, ``~`` expanded;
    unset or empty, ``default`` under the home folder. An empty value (a CI job's ``DPAUDIT_CACHE: ${{ env.X }}``
    with X unset) meant the working folder before: caches written into the user's checkout."""
    import os

    value = os.environ.get(variable, "").strip()
    return Path(value or Path.home() / default).expanduser().absolute()
