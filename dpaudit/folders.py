"""Whole folders or nothing: a checkpoint, a deployment, an asset cache or a report folder is written in a stage
beside its destination and renamed into place in one step; a failure leaves the destination as it was, and a stage a
dead process left behind is removed by the next writer. No heavy imports."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path


@contextmanager
def staged_folder(dest, replace: bool = True):
    """Write a whole folder at once: ``with staged_folder(dest) as stage:`` fills ``stage`` (beside ``dest``, on
    the same filesystem); on success it becomes ``dest`` in one rename, a previous ``dest`` removed first (with
    ``replace=False`` the stage is dropped instead: a cache another process filled first). On failure the stage is
    removed and ``dest`` is as it was. Checkpoints, deployments and the asset caches are written this way."""
    import errno
    import os
    import shutil
    import tempfile

    dest = Path(dest).expanduser().absolute()
    created = make_parents(dest)
    prefix = f".{dest.name}.partial-"
    remove_stale(dest.parent, prefix)
    stage = _owned(Path(tempfile.mkdtemp(prefix=prefix, dir=dest.parent)))
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        remove_if_empty(created)
        raise
    (stage / OWNER).unlink(missing_ok=True)
    share(stage)
    for attempt in range(3):  # another writer may make ``dest`` between the removal and the rename: the last one wins
        if dest.exists() or dest.is_symlink():
            if not replace:
                shutil.rmtree(stage, ignore_errors=True)
                return
            if dest.is_symlink() or not dest.is_dir():
                dest.unlink()  # a link is replaced, never written through
            else:
                shutil.rmtree(dest, ignore_errors=attempt > 0)
        try:
            os.replace(stage, dest)
            return
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST) or attempt == 2:
                shutil.rmtree(stage, ignore_errors=True)
                raise


def share(root: Path) -> None:
    """Give a finished stage the permissions an ordinary write would have: folders ``0o777`` and files ``0o666``
    less the umask. ``mkdtemp`` makes the stage private, and safetensors (0.8.1 on, safetensors issue #782) saves
    every ``*.safetensors`` as 0o600, so a checkpoint would otherwise be readable by its writer alone (a colleague,
    a serving container's user)."""
    import os

    from dpaudit.io import umask

    mask = umask()
    os.chmod(root, 0o777 & ~mask)
    for where, dirs, files in os.walk(root):
        for name in dirs:
            if not os.path.islink(os.path.join(where, name)):
                os.chmod(os.path.join(where, name), 0o777 & ~mask)
        for name in files:
            path = os.path.join(where, name)
            if not os.path.islink(path):
                os.chmod(path, 0o666 & ~mask)


OWNER = ".dpaudit-owner"  # inside a partial folder: the pid of the process writing it


def make_parents(path: Path) -> list[Path]:
    """Create the missing folders above ``path``; returns them, deepest first, for :func:`remove_if_empty`."""
    created = [p for p in Path(path).parents if not p.exists()]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return created


def remove_if_empty(created: list[Path]) -> None:
    """Remove the folders a write created (deepest first) while they hold no file: a refusal or failure leaves the
    disk as it found it, never an empty folder; a folder something else wrote into meanwhile is kept."""
    import os
    import shutil

    for p in created:
        if p.is_dir() and not p.is_symlink() and not any(f for _, _, fs in os.walk(p) for f in fs):
            shutil.rmtree(p, ignore_errors=True)


def _owned(stage: Path) -> Path:
    import os

    (stage / OWNER).write_text(str(os.getpid()))
    return stage


def remove_stale(where: Path, prefix: str) -> None:
    """Partial folders under ``where`` named ``prefix...`` whose writer is gone (killed mid-write): removed, so a
    killed evaluation or run never leaves debris that later runs keep. A partial of a live process is kept."""
    import os
    import shutil
    import time

    try:
        entries = [p for p in Path(where).iterdir() if p.name.startswith(prefix) and p.is_dir() and not p.is_symlink()]
    except OSError:
        return
    for p in entries:
        try:
            pid = int((p / OWNER).read_text().strip())
        except (OSError, ValueError):
            pid = None
        if pid is not None:
            try:
                os.kill(pid, 0)
                continue  # its writer is alive
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
        elif time.time() - p.stat().st_mtime < 3600:
            continue  # no owner recorded (an older dpaudit): only once it is an hour old
        shutil.rmtree(p, ignore_errors=True)


class atomic_folder:
    """``with atomic_folder(out) as tmp:`` write files into ``tmp``; on success they replace their namesakes in
    ``out`` (other files there are kept, except those of ``owned`` this write did not make), on failure ``tmp`` is removed and ``out`` is untouched. ``tmp`` lives
    inside ``out`` when it exists (same filesystem as the target even when ``out`` is a mount point), else beside
    it, so every move is a rename."""

    def __init__(self, out, owned: tuple = ()):
        self.out = Path(out).expanduser().absolute()
        self.owned = owned  # names of this writer's own outputs: one it did not write this time is removed

    def __enter__(self) -> Path:
        import tempfile

        self.created = []
        if self.out.is_dir():
            where, prefix = self.out, ".dpaudit-partial-"
        else:
            self.created = make_parents(self.out)
            where, prefix = self.out.parent, f".{self.out.name}.partial-"
        remove_stale(where, prefix)  # what a killed earlier run left behind
        self.tmp = _owned(Path(tempfile.mkdtemp(prefix=prefix, dir=where)))
        return self.tmp

    def __exit__(self, kind, value, tb) -> bool:
        import errno
        import os
        import shutil

        if kind is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            remove_if_empty(self.created)
            return False
        (self.tmp / OWNER).unlink(missing_ok=True)
        share(self.tmp)
        if not self.out.exists():
            try:
                os.replace(self.tmp, self.out)
                return False
            except OSError as e:  # another writer made ``out`` meanwhile: merge into it as into any folder
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
        try:
            if self.owned:
                with _held(self.out):  # two reports' files never interleave: each replaces the other whole
                    self._merge()
            else:
                self._merge()
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)  # what was not moved in is no debris either
            raise
        return False

    def _merge(self) -> None:
        import os
        import shutil

        written = {f.name for f in self.tmp.iterdir()}
        for name in self.owned:  # an earlier report's plot (another model's clipping.png) never stays beside this one
            stale = self.out / name
            if name not in written and (stale.is_file() or stale.is_symlink()):
                stale.unlink()
        for f in sorted(self.tmp.iterdir()):
            dest = self.out / f.name
            if dest.is_symlink():
                dest.unlink()  # a link planted under an output's name is replaced, never written through
            elif dest.is_file() and f.is_file():
                os.chmod(f, dest.stat().st_mode & 0o7777)  # a replaced file keeps its permissions
            elif dest.is_dir():
                shutil.rmtree(dest)
            os.replace(f, dest)
        self.tmp.rmdir()


@contextmanager
def _held(folder: Path, wait_s: float = 60.0):
    """:func:`held` for a writer moving its files in: it waits its turn, at most ``wait_s``."""
    from dpaudit.io import printable

    with held(folder, wait_s, f"another dpaudit process is writing into {printable(folder)}; wait for it to finish, "
                              "or choose another --out"):
        yield


@contextmanager
def held(folder: Path, wait_s: float, busy: str):
    """An exclusive ``flock`` on ``folder`` itself (no lock file: the kernel drops it when the process ends, even by
    SIGKILL, so nothing stale is left): one holder at a time; another waits up to ``wait_s`` seconds (0: not at
    all), then the one-line DpauditError ``busy``. Where the platform has no ``flock`` nothing is held."""
    import os
    import time

    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        end = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() >= end:
                    from dpaudit.errors import DpauditError

                    raise DpauditError(busy) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)
