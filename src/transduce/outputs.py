"""Where transduce writes, and the one rule it keeps there: nothing a user already has is deleted or overwritten.

Every folder transduce creates (a run, a prepared-data cache, a checkpoint, a folder of pictures, an export) holds a
manifest, `transduce-manifest.json`, naming what kind of output it is. A destination that exists is only ever
replaced or written into when it is provably ours (its manifest says so) or an empty folder; anything else is
refused with a one-line `OutputError`. Replacing our own output stays atomic: the new content is written beside the
target under a temporary name, the old one is renamed aside, the new one renamed in, and only then is the old one
(ours) removed. Files get the permissions the user's umask gives: temporary files and folders are created with
the modes open() and mkdir() use (0666, 0777), which the kernel reduces by the umask, so the umask is never read or
set here (reading it means setting it: os.umask, a process-wide change other threads would see).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

MANIFEST = "transduce-manifest.json"


class OutputError(ValueError):
    """A destination transduce refuses to write (not its own output, not a folder, locked by another process)."""


def new_beside(parent: Path, prefix: str, create: Callable[[Path], object]) -> Path:
    """`create` an entry under an unused name `prefix` + 8 random hex digits in `parent` (tempfile's naming, without
    its 0600/0700 modes); `create` raises FileExistsError when the name is taken."""
    for _ in range(100):
        path = parent / f"{prefix}{secrets.token_hex(4)}"
        try:
            create(path)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{parent}: no unused temporary name {prefix}* after 100 tries")


def _temp_folder(parent: Path, prefix: str) -> Path:
    return new_beside(parent, prefix, lambda path: os.mkdir(path, 0o777))  # 0777 less the umask, as mkdir(1)


def _temp_file(parent: Path, prefix: str) -> Path:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    return new_beside(parent, prefix, lambda path: os.close(os.open(path, flags, 0o666)))  # less the umask


# The layout of run and prepared-data folders, written in their manifests. A folder of another format is refused in
# one line (`check_format`), not read through branches kept for it (issue 61: there are no outside runs to keep).
# Raise it with any change this version could not read an earlier run or cache through.
FORMAT = 1
FORMATTED = {"run": ("a run", "train again into a new --out"), "data": ("prepared data", "remove it and prepare again")}
HF_EXPORT = "huggingface-export"  # the manifest kind of a Hugging Face export (export/huggingface.py)
CT2_EXPORT = "ctranslate2-export"  # the manifest kind of a CTranslate2 export (export/; checkpoint.py recognises one)


def read_manifest(folder: str | Path) -> dict | None:
    """The manifest of one of our output folders, or None when `folder` has none (or it is not ours). Every reader
    of a run's or a prepared-data folder's manifest comes here, so one of another format is refused here."""
    try:
        data = json.loads((Path(folder) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # unreadable, or nested too deeply: not a manifest of ours
        return None
    if not isinstance(data, dict) or "kind" not in data:
        return None
    check_format(Path(folder), data)
    return data


def check_format(folder: Path, manifest: dict) -> None:
    """Refuse (OutputError, one line) a run or prepared-data folder whose manifest names another FORMAT."""
    found = manifest.get("format", 0)  # the manifests of earlier versions had none
    if manifest["kind"] in FORMATTED and found != FORMAT:
        what, again = FORMATTED[manifest["kind"]]
        raise OutputError(
            f"{folder}: {what} made by another version of transduce (format {found}; this version reads format "
            f"{FORMAT}): {again}"
        )


def write_manifest(folder: str | Path, kind: str, **extra) -> None:
    formatted = {"format": FORMAT} if kind in FORMATTED else {}
    atomic_write_text(Path(folder) / MANIFEST, json.dumps({"kind": kind, **formatted, **extra}, indent=2) + "\n")


def refuse_link(path: str | Path) -> None:
    """Refuse (OutputError, one line) an output destination that is a symbolic link, whatever it points to. Replacing
    an output renames the new one onto its name, which would replace the link itself (or move it aside, dangling,
    with an earlier output of ours); writing into it would write where the link points: neither is what was asked.
    Only the last part of the path counts: a folder above it may be a link (runs/ on another disk)."""
    path = Path(path)
    if path.is_symlink():
        raise OutputError(
            f"{path}: is a symbolic link (to {os.readlink(path)}); transduce never writes its output through a link: "
            "give the path it points to, or a new name"
        )


def _check_folder(path: Path, kind: str) -> bool:
    """True when `path` is already our output of this kind; False when it does not exist or is an empty folder."""
    refuse_link(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{path}: exists and is not a folder")
    if not path.is_dir():
        return False
    manifest = read_manifest(path)
    if manifest is None:
        if any(path.iterdir()):
            raise OutputError(
                f"{path}: the folder exists and was not made by transduce (no {MANIFEST}); "
                "nothing in it is touched: choose a new or empty folder"
            )
        return False
    if manifest["kind"] != kind:
        raise OutputError(
            f"{path}: holds transduce output of another kind ({manifest['kind']}, not {kind}); choose another folder"
        )
    return True


def claim_folder(path: str | Path, kind: str, **extra) -> Path:
    """Make `path` an output folder of `kind`: create it, adopt it when empty, accept it when it is already ours."""
    path = Path(path)
    if not _check_folder(path, kind):
        path.mkdir(parents=True, exist_ok=True)
        write_manifest(path, kind, **extra)
    return path


def check_replaceable(path: str | Path, kind: str) -> None:
    """Refuse (OutputError) unless `path` is absent, an empty folder, or our own output folder of `kind`."""
    _check_folder(Path(path), kind)


@contextlib.contextmanager
def atomic_folder(final: str | Path, kind: str, **extra) -> Iterator[Path]:
    """Yield a temporary folder beside `final`; on success it replaces `final` (ours or empty), else it is removed.

    The destination is checked before the work starts and again before the rename.
    """
    final = Path(final)
    check_replaceable(final, kind)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_folder(final.parent, f".tmp-{final.name}-")
    try:
        with names_file(final, temp=tmp, only_full=True):  # a full disk names the output, not the temporary
            write_manifest(tmp, WRITING, of=kind)  # marked ours from the start: a kill leaves a folder known ours
            yield tmp
            # the manifest lists what we wrote: anything else found in the folder later is the user's, and is kept
            write_manifest(tmp, kind, **extra, files=sorted(p.name for p in tmp.iterdir() if p.name != MANIFEST))
        # some writers (safetensors) create files 0600 whatever the umask: everything gets the modes open() and
        # mkdir() give, found from the folder's own (0777 less the umask; files without the execute bits)
        folder_mode = tmp.stat().st_mode & 0o777
        for path in tmp.rglob("*"):
            os.chmod(path, folder_mode if path.is_dir() else folder_mode & 0o666)
        _replace_folder(tmp, final, kind)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _replace_folder(new: Path, final: Path, kind: str) -> None:
    if not _check_folder(final, kind):  # absent or an empty folder
        if final.is_dir():
            final.rmdir()
        os.replace(new, final)
        return
    theirs = users_entries(final)
    for name in theirs:
        if (new / name).exists():
            raise OutputError(
                f"{final / name}: not made by transduce, and the new output has an entry of that name; move it "
                "elsewhere and run again (nothing was changed)"
            )
    aside = _temp_folder(final.parent, f".old-{final.name}-")
    os.replace(final, aside / final.name)  # our old output, moved aside (same filesystem: a rename)
    os.replace(new, final)
    for name in theirs:  # what the user put in our folder goes on living there
        os.replace(aside / final.name / name, final / name)
    shutil.rmtree(aside, ignore_errors=True)


def users_entries(folder: Path) -> list[str]:
    """The entries of our output `folder` that we did not write: its manifest lists ours (`atomic_folder`)."""
    ours = set((read_manifest(folder) or {}).get("files", []))
    return sorted(p.name for p in folder.iterdir() if p.name not in ours and p.name not in (MANIFEST, LOCK))


WRITING = "being written"  # the manifest kind of an atomic_folder's temporary folder until it is complete


def _leftover_of(entry: Path, prefix: str) -> str | None:
    """The output name an `atomic_folder` temporary (`.tmp-NAME-` / `.old-NAME-` + 8 hex digits) was made for."""
    name = entry.name
    if not name.startswith(prefix) or len(name) < len(prefix) + 10 or name[-9] != "-":
        return None
    if any(c not in "0123456789abcdef" for c in name[-8:]) or not entry.is_dir() or entry.is_symlink():
        return None
    return name[len(prefix) : -9]


def remove_leftovers(parent: Path, stem: str, *, exact: bool = False) -> None:
    """Clear up what `atomic_folder` left beside its outputs in `parent` when it was killed mid-save, for outputs
    named `stem` (exact) or starting with it (`step-`). Only our own folders go, named exactly as atomic_folder
    names them (`prepare --out c` leaves `c-2`'s alone): a `.tmp-` folder whose manifest is ours, or empty; an
    `.old-NAME-` folder holds our previous output NAME, moved aside: it goes back in place when NAME is missing (a
    kill between the two renames), else the user's files in it join the new NAME (as the save would have done)
    and the rest, ours, goes. Anything else is kept."""
    if not parent.is_dir():
        return
    matches = (lambda name: name == stem) if exact else (lambda name: name.startswith(stem))
    entries = sorted(parent.iterdir())
    for entry in entries:  # the old outputs first: one restored in place is then found by its reader
        name = _leftover_of(entry, ".old-")
        if name is not None and matches(name):
            _settle_old(entry, parent / name)
    for entry in entries:
        name = _leftover_of(entry, ".tmp-")
        if name is None or not matches(name) or not entry.is_dir():
            continue
        try:
            ours = read_manifest(entry) is not None
        except OutputError:  # ours, of another format
            ours = True
        if ours or not any(entry.iterdir()):
            shutil.rmtree(entry, ignore_errors=True)


def _settle_old(aside: Path, final: Path) -> None:
    """One `.old-NAME-` folder (see remove_leftovers)."""
    inside = list(aside.iterdir())
    if not inside:
        aside.rmdir()
        return
    old = aside / final.name
    if inside != [old] or not old.is_dir() or old.is_symlink():
        return  # not what atomic_folder leaves: kept
    try:
        kind = (read_manifest(old) or {}).get("kind")
    except OutputError:
        return
    if kind is None:
        return
    if not final.exists():  # killed between moving the old output aside and the new one in: the old one is whole
        os.replace(old, final)
        aside.rmdir()
        return
    theirs = users_entries(old)
    for name in theirs:
        if not (final / name).exists():
            os.replace(old / name, final / name)
    if not users_entries(old):
        shutil.rmtree(aside, ignore_errors=True)


def remove_own_folder(path: Path, kind: str) -> bool:
    """Delete `path` only when its manifest says it is our output of `kind` (old checkpoints). Returns whether."""
    manifest = read_manifest(path)
    if manifest is None or manifest["kind"] != kind:
        return False
    shutil.rmtree(path, ignore_errors=True)
    return True


# The errors of a destination that cannot take more: about the file being written, whatever file they name
# (shutil.copyfile's names the file it copies from: its sendfile error gets the source's name).
FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


@contextlib.contextmanager
def names_file(path: str | Path, *, temp: Path | None = None, only_full: bool = False) -> Iterator[None]:
    """An OSError of writing `path` is raised again naming `path`, so its one line says where (issue 65 item 9):
    one raised without a file name (a full disk's errno 28 comes from f.write, which names nothing), one of a full
    disk naming another file (FULL), and one naming `temp`, the temporary `path` is written as (a file inside a
    temporary folder: the same file inside `path`), which is gone by the time the user reads the message.
    `only_full`: of those without a file name, only a full disk's (around work that reads inputs too)."""
    try:
        yield
    except OSError as err:
        named = _written_name(err, Path(path), temp, only_full)
        if named is None:
            raise
        raise OSError(err.errno, err.strerror or str(err), named) from None


def _written_name(err: OSError, path: Path, temp: Path | None, only_full: bool) -> str | None:
    """The file name `names_file` gives `err`, or None to leave it as it is."""
    if err.errno is None:
        return None
    full = err.errno in FULL
    if err.filename is None:
        return str(path) if full or not only_full else None
    # a full disk is the destination's: a copy's error names its source first, its destination second
    given = err.filename2 if full and err.filename2 is not None else err.filename
    if not isinstance(given, (str, bytes)):
        return str(path) if full else None
    named = Path(os.fsdecode(given))
    if temp is not None and (named == temp or temp in named.parents):
        return str(path / named.relative_to(temp))
    if named == path or path in named.parents:  # names it already, or a file inside it (more exactly)
        return None if given is err.filename else str(named)
    return None  # another file it names (a work folder's, written for this output): that is where it failed


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def atomic_write(path: str | Path, write) -> None:
    """Call write(tmp) for a temporary file beside `path`, then rename it into place (umask permissions). A symbolic
    link at `path` is refused (the rename would replace the link), and an error of the write names `path`."""
    path = Path(path)
    refuse_link(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_file(path.parent, f".{path.name}.")
    try:
        mode = tmp.stat().st_mode & 0o777  # 0666 less the umask
        with names_file(path, temp=tmp):  # a full disk's error names `path` (a copy's names its source)
            write(str(tmp))
        os.chmod(tmp, mode)  # a writer may have made it anew with its own mode (safetensors: 0600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def refuse_existing_file(path: str | Path, what: str = "output file") -> None:
    """For outputs whose format cannot carry a mark of ours (plain text): an existing file is never replaced."""
    path = Path(path)
    refuse_link(path)  # a dangling one too: it is the user's, and the write would replace it
    if path.is_dir():
        raise OutputError(f"{path}: is a folder; give a file name for the {what}")
    if path.exists():
        raise OutputError(
            f"{path}: already exists; transduce does not overwrite files it did not make "
            f"(choose another name for the {what})"
        )


def open_own(path: str | Path, flags: int) -> int:
    """os.open of a file inside a folder of ours, never through a symbolic link (O_NOFOLLOW): a link placed there
    (train.log -> a file elsewhere) would make a run write outside its folder. Refused in one line."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, 0o666)  # less the umask, by the kernel
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise OutputError(f"{path}: a symbolic link; a run writes only its own files (remove the link)") from None
        raise


def append_text(path: str | Path, text: str) -> None:
    """Append `text` to a log of ours (created if missing), not through a symbolic link (open_own)."""
    with os.fdopen(open_own(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a", encoding="utf-8") as f:
        f.write(text)


# Run-directory lock ---------------------------------------------------------------------------------------------------
LOCK = ".transduce.lock"


@contextlib.contextmanager
def exclusive(folder: str | Path, what: str = "training") -> Iterator[None]:
    """Hold an exclusive lock on `folder` (flock on FOLDER/.transduce.lock); a second writer is refused at once."""
    path = Path(folder) / LOCK
    fd = open_own(path, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            raise OutputError(
                f"{folder}: another process ({holder}) is {what} in this run directory; wait for "
                "it to finish or use another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def lock_holder(folder: str | Path) -> str | None:
    """Who holds `folder`'s lock (`exclusive`: "pid N"), or None when nobody does. Reads only: no lock file is made."""
    try:
        fd = os.open(Path(folder) / LOCK, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
    finally:
        os.close(fd)


def remove_if_bare(folder: str | Path, created: str | Path | None = None, *, keep: bool = False) -> bool:
    """Remove `created` (a folder this command made: `folder` or one above it) when all it holds is `folder`'s
    manifest and lock file and empty folders (what a run refused before its first write leaves), so a refused command
    leaves no debris. Anything else in it and it stays. `keep`: the user's own empty folder, made empty again (what
    is in it goes, the folder stays)."""
    folder = Path(folder)
    top = Path(created) if created is not None else folder
    if not top.is_dir():
        return False
    ours = {folder / MANIFEST, folder / LOCK}
    if any(not p.is_dir() and p not in ours for p in top.rglob("*")):
        return False
    if not keep:
        shutil.rmtree(top, ignore_errors=True)
        return True
    empty_folder(top)
    return True


def empty_folder(folder: Path) -> None:
    """Remove everything in `folder` (a folder whose contents are all this command's), keeping the folder."""
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


@contextlib.contextmanager
def exclusive_output(final: str | Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on the output `final` and everything made beside it for it (its `.tmp-`, `.old-` and
    `.partial-` folders), whether `final` exists yet or not: flock on PARENT/.NAME.transduce.lock, a file removed
    again when done. A second writer is refused at once, in one line. A lock file a killed holder left is taken
    over; one removed by its holder between our open and our lock is opened anew (its inode is checked). Where
    the parent cannot be written (a read-only cache being reused) no one can write beside `final`: nothing to lock."""
    final = Path(final)
    refuse_link(final)
    path = final.parent / f".{final.name}{LOCK}"
    while True:
        try:
            fd = open_own(path, os.O_RDWR | os.O_CREAT)
        except OSError as err:
            if err.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise OutputError(
                f"{final}: another process ({holder}) is {what} into this folder; wait for it to finish or use "
                "another --out"
            ) from None
        try:
            current = os.stat(path, follow_symlinks=False).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            break
        os.close(fd)  # the holder removed that file as it finished: the lock is the new file's
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        yield
    finally:
        path.unlink(missing_ok=True)  # while still held: a process that opened it meanwhile opens anew
        os.close(fd)
