"""The evidence bundle (D3): a sealed campaign folder, packed into one archive and restored safely.

A campaign folder *is* the bundle. ``seal`` writes, last of all:

* ``SHA256SUMS`` — the sha256 of every other file in the folder tree, one ``<hex>  <relative/posix/path>``
  line per file, sorted by path (the GNU coreutils format: ``sha256sum -c SHA256SUMS`` checks it too);
* ``SHA256SUMS.sha256`` — exactly ``<sha256 of SHA256SUMS>  SHA256SUMS`` and a newline.

So a deleted, edited or added file is named against ``SHA256SUMS``, and an edited ``SHA256SUMS`` no longer
matches ``SHA256SUMS.sha256``. The hash of ``SHA256SUMS`` (the *seal digest*) is printed by ``pack``: written
down somewhere else (the rental record, the decision note), it also exposes a forger who rewrites every file
and both lists consistently. The independent ``verify`` (``audit.py``) checks the seal *and* recomputes every
verdict from the stored files, so a consistent re-seal of tampered evidence still fails there.

``unpack`` refuses anything that could write outside its destination: absolute names, ``..``, links,
devices, duplicate names, and members outside the bundle's single top folder. It reads the archive's
``SHA256SUMS`` first and refuses, before anything is written, a file that list does not name and files whose
total size exceeds the free disk, so a crafted archive (a decompression bomb) fills nobody's disk.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from iteralab.campaign.folder import CampaignFolder
from iteralab.common.files import FILE_MODE, sha256_file, write_text_atomic
from iteralab.errors import BundleError
from iteralab.lock.carry import include_weights as add_weights

SUMS_NAME = "SHA256SUMS"
SEAL_NAME = "SHA256SUMS.sha256"
SEAL_FILES = (SUMS_NAME, SEAL_NAME)
#: The largest hash list ``unpack`` reads from an archive (a line per file: millions of files).
SUMS_LIMIT = 256 * 1024 * 1024
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class Seal:
    """What ``seal`` wrote: the number of files listed, the seal digest, and what changed since a previous seal."""

    folder: Path
    files: int
    digest: str
    resealed: bool
    changed_since_previous: tuple[str, ...] = ()


@dataclass(frozen=True)
class SealCheck:
    """The result of checking a folder against its hash list; ``problems`` holds one line per difference."""

    files: int
    digest: str | None
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class Unpacked:
    dest: Path
    files: int
    seal: SealCheck = field(default_factory=lambda: SealCheck(0, None))


def _check_name(rel: str, where: Path) -> None:
    if any(c in rel for c in "\n\r\\") or any(ord(c) < 32 for c in rel):
        raise BundleError(f"{where / rel}: a file name with a newline, backslash or control character "
                          "cannot be listed in SHA256SUMS", hint="rename the file")


def list_files(folder: str | os.PathLike[str]) -> list[str]:
    """Every regular file under ``folder`` as a sorted relative POSIX path, except the two seal files at its top.

    A symbolic link, device, socket or pipe anywhere in the tree is refused: a bundle holds plain files only.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise BundleError(f"{folder}: not a folder")
    out: list[str] = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in sorted(dirs + files):
            path = Path(root) / name
            mode = path.lstat().st_mode
            rel = path.relative_to(folder).as_posix()
            if stat.S_ISLNK(mode):
                raise BundleError(f"{path}: a symbolic link cannot be part of an evidence bundle",
                                  hint="replace it by a copy of the file it points to, or remove it")
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                raise BundleError(f"{path}: not a regular file (device, socket or pipe)", hint="remove it")
            _check_name(rel, folder)
            if rel not in SEAL_FILES:
                out.append(rel)
    return sorted(out)


def render_sums(hashes: dict[str, str]) -> str:
    return "".join(f"{digest}  {rel}\n" for rel, digest in sorted(hashes.items()))


def parse_sums(text: str, source: str = SUMS_NAME) -> dict[str, str]:
    """Parse a ``SHA256SUMS`` text strictly; a malformed, duplicated or unsorted line is a BundleError."""
    hashes: dict[str, str] = {}
    previous = None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    else:
        raise BundleError(f"{source}: does not end with a newline")
    for number, line in enumerate(lines, start=1):
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64 or not set(digest) <= _HEX or not rel:
            raise BundleError(f"{source} line {number}: not '<sha256>  <path>'")
        if rel in hashes:
            raise BundleError(f"{source} line {number}: {rel} is listed twice")
        if previous is not None and rel < previous:
            raise BundleError(f"{source} line {number}: {rel} is out of order")
        if rel.startswith("/") or ".." in rel.split("/") or rel in SEAL_FILES:
            raise BundleError(f"{source} line {number}: {rel!r} is not a path inside the bundle")
        previous = rel
        hashes[rel] = digest
    return hashes


def seal_line(sums_digest: str) -> str:
    return f"{sums_digest}  {SUMS_NAME}\n"


def seal(folder: str | os.PathLike[str]) -> Seal:
    """Hash every file of the folder and write ``SHA256SUMS`` then ``SHA256SUMS.sha256`` (last).

    Sealing again (after a later stage added its files) is allowed; the files that changed, appeared or
    disappeared since the previous seal are returned so the caller can say so — never a silent re-seal.
    """
    folder = Path(folder)
    scratch = folder / ".tmp"
    if scratch.is_dir() and any(scratch.iterdir()):
        raise BundleError(f"{scratch}: a pass worker's scratch files are left by an interrupted run",
                          hint="resume the campaign with 'iteralab run' (it clears them), or delete the .tmp folder")
    files = list_files(folder)
    hashes = {rel: sha256_file(folder / rel) for rel in files}
    previous: dict[str, str] | None = None
    sums_path = folder / SUMS_NAME
    if sums_path.is_file():
        try:
            previous = parse_sums(sums_path.read_text(encoding="utf-8"))
        except (BundleError, UnicodeDecodeError):
            previous = {}
    text = render_sums(hashes)
    changed: list[str] = []
    if previous is not None:
        for rel in sorted(set(previous) | set(hashes)):
            if rel not in hashes:
                changed.append(f"{rel} (removed)")
            elif rel not in previous:
                changed.append(f"{rel} (added)")
            elif previous[rel] != hashes[rel]:
                changed.append(f"{rel} (changed)")
    write_text_atomic(sums_path, text)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    write_text_atomic(folder / SEAL_NAME, seal_line(digest))
    return Seal(folder, len(files), digest, previous is not None, tuple(changed))


#: What a command that has no ``--out`` of its own can do with a sealed folder.
WORK_ON_A_COPY = ("work on an unpacked copy (iteralab bundle unpack ARCHIVE NEW) or on a copy of the folder "
                  f"without {SUMS_NAME} and {SEAL_NAME}; a sealed folder is never rewritten silently")


def out_elsewhere(command: str) -> str:
    """The hint of a command that writes into ``--out``: 'write elsewhere: iteralab report FOLDER --out DIR …'."""
    return (f"write elsewhere: iteralab {command} FOLDER --out DIR (e.g. --out decision-out); a sealed folder is "
            "never rewritten silently")


def refuse_if_sealed(folder: str | os.PathLike[str], what: str, hint: str = WORK_ON_A_COPY) -> None:
    """A sealed folder is evidence as handed over: a command that would change it refuses (never silently).
    ``hint`` names only options the refused command has (:func:`out_elsewhere` for one with ``--out``)."""
    folder = Path(folder)
    if (folder / SUMS_NAME).is_file():
        raise BundleError(f"{folder}: the folder is sealed ({SUMS_NAME}); {what} would change it and break the seal",
                          hint=hint)


def check_seal(folder: str | os.PathLike[str], *, expect_digest: str | None = None) -> SealCheck:
    """Compare the folder with its hash list; one problem line per difference (nothing is skipped)."""
    folder = Path(folder)
    problems: list[str] = []
    sums_path, seal_path = folder / SUMS_NAME, folder / SEAL_NAME
    if not sums_path.is_file():
        return SealCheck(0, None, (f"{SUMS_NAME}: missing (the folder was never sealed, or the list was deleted)",))
    raw = sums_path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if not seal_path.is_file():
        problems.append(f"{SEAL_NAME}: missing (it holds the hash of {SUMS_NAME})")
    elif seal_path.read_bytes() != seal_line(digest).encode("utf-8"):
        problems.append(f"{SUMS_NAME}: edited — its sha256 {digest[:16]}… does not match {SEAL_NAME} "
                        f"(or {SEAL_NAME} itself was edited)")
    if expect_digest is not None and expect_digest.lower() != digest:
        problems.append(f"{SUMS_NAME}: seal digest {digest} differs from the expected {expect_digest}")
    try:
        listed = parse_sums(raw.decode("utf-8"))
    except (BundleError, UnicodeDecodeError) as exc:
        problems.append(f"{SUMS_NAME}: unreadable ({exc})")
        return SealCheck(0, digest, tuple(problems))
    try:
        present = list_files(folder)
    except BundleError as exc:
        problems.append(str(exc))
        present = _plain_files(folder)
    for rel in sorted(set(listed) | set(present)):
        if rel not in present:
            problems.append(f"{rel}: missing (listed in {SUMS_NAME})")
        elif rel not in listed:
            problems.append(f"{rel}: added after sealing (not listed in {SUMS_NAME})")
        elif sha256_file(folder / rel) != listed[rel]:
            problems.append(f"{rel}: edited (sha256 differs from {SUMS_NAME})")
    return SealCheck(len(listed), digest, tuple(problems))


def _plain_files(folder: Path) -> list[str]:
    out = []
    for root, _dirs, files in os.walk(folder, followlinks=False):
        for name in files:
            path = Path(root) / name
            rel = path.relative_to(folder).as_posix()
            if path.is_file() and not path.is_symlink() and rel not in SEAL_FILES:
                out.append(rel)
    return sorted(out)


# ------------------------------------------------------------------------------------------------ archive


def _tarinfo(name: str, size: int, is_dir: bool) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 0 if is_dir else size
    info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    info.mode = 0o755 if is_dir else 0o644
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def pack(folder: str | os.PathLike[str], out: str | os.PathLike[str] | None = None, *,
         include_weights: bool = False) -> tuple[Path, Seal]:
    """Seal the folder, then write one deterministic ``.tar.gz`` holding it under its own name.

    The archive is written to a temporary name and renamed; an existing archive is never overwritten.
    ``include_weights`` first copies the model weights the campaign recorded by hash into ``inputs/model``
    (each copy checked against its recorded sha256), so the seal covers them and a rerun needs no model folder.
    """
    opened = CampaignFolder.open(folder)
    folder = opened.path
    target = Path(out) if out is not None else folder.parent / f"{folder.resolve().name}.tar.gz"
    if target.exists():
        raise BundleError(f"{target}: already exists; evidence is never overwritten", hint="choose another --out")
    try:
        target.resolve().relative_to(folder.resolve())
    except ValueError:
        pass
    else:
        raise BundleError(f"{target}: the archive cannot be written inside the folder it packs",
                          hint="choose an --out outside the campaign folder")
    if include_weights:
        add_weights(folder, opened.campaign.model.to_json())
    sealed = seal(folder)
    root = folder.resolve().name
    members = sorted(list_files(folder) + list(SEAL_FILES))
    all_dirs: set[str] = set()
    for rel in members:
        d = posixpath.dirname(rel)
        while d:
            all_dirs.add(d)
            d = posixpath.dirname(d)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{target.name}.", dir=target.parent)
    os.fchmod(fd, FILE_MODE)  # an archive gets the user's usual permissions, not mkstemp's 0600
    try:
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(_tarinfo(root, 0, True))
            for d in sorted(all_dirs):
                tar.addfile(_tarinfo(f"{root}/{d}", 0, True))
            for rel in members:
                path = folder / rel
                with open(path, "rb") as fh:
                    tar.addfile(_tarinfo(f"{root}/{rel}", path.stat().st_size, False), fh)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return target, sealed


def _member_problem(member: tarfile.TarInfo) -> str | None:
    name = member.name
    if not name or name.startswith("/") or (len(name) > 1 and name[1] == ":") or "\\" in name:
        return "absolute or non-POSIX path"
    if "\x00" in name or any(ord(c) < 32 for c in name):
        return "control character in the name"
    if ".." in name.split("/"):
        return "'..' in the path"
    if member.issym() or member.islnk():
        return f"a {'symbolic' if member.issym() else 'hard'} link (to {member.linkname!r})"
    if not (member.isreg() or member.isdir()):
        return "a device, pipe or other special file"
    return None


def _free_bytes(path: Path) -> int:
    """Free space on the file system that would hold ``path`` (its nearest existing folder)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def _listed_members(tar: tarfile.TarFile, members: list[tarfile.TarInfo], root: str, archive: Path) -> int:
    """Read the bundle's hash list from the archive (nothing is written) and check every member against it: a file
    the list does not name is refused, as is an archive without a list. Returns the bytes the files would take."""
    by_name = {posixpath.normpath(m.name): m for m in members}
    sums = by_name.get(f"{root}/{SUMS_NAME}")
    hint = "a bundle made by 'iteralab bundle pack' lists every file it holds in SHA256SUMS; this one was altered"
    if sums is None or not sums.isreg():
        raise BundleError(f"{archive}: holds no {root}/{SUMS_NAME}, so what it holds cannot be checked before it is "
                          "written", hint=hint)
    if sums.size > SUMS_LIMIT:
        raise BundleError(f"{archive}: {root}/{SUMS_NAME} is {sums.size:,} bytes, more than a hash list of any "
                          f"bundle ({SUMS_LIMIT:,})", hint=hint)
    source = tar.extractfile(sums)
    assert source is not None  # a regular member always has a file object
    try:
        listed = parse_sums(source.read().decode("utf-8"), f"{archive}: {root}/{SUMS_NAME}")
    except UnicodeDecodeError:
        raise BundleError(f"{archive}: {root}/{SUMS_NAME} is not UTF-8 text", hint=hint) from None
    total = 0
    for name, member in by_name.items():
        if not member.isreg():
            continue
        rel = name[len(root) + 1:]
        if rel not in listed and rel not in SEAL_FILES:
            raise BundleError(f"{archive}: member {member.name!r} refused: not listed in {SUMS_NAME} (added after "
                              "sealing); nothing was written", hint=hint)
        total += member.size
    return total


def _checked_members(tar: tarfile.TarFile, archive: Path) -> tuple[list[tarfile.TarInfo], str, int]:
    """The archive's members, each checked (plain files and folders inside one top folder, no name twice), its
    top folder, and how many files it holds."""
    try:
        members = tar.getmembers()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BundleError(f"{archive}: damaged archive ({exc})") from None
    roots: set[str] = set()
    seen: set[str] = set()
    files = 0
    for member in members:
        problem = _member_problem(member)
        if problem:
            raise BundleError(f"{archive}: member {member.name!r} refused: {problem}",
                              hint="a bundle holds plain files inside one folder; this archive was not made "
                                   "by 'iteralab bundle pack' or was altered")
        norm = posixpath.normpath(member.name)
        if norm in seen:
            raise BundleError(f"{archive}: member {member.name!r} refused: listed twice")
        seen.add(norm)
        roots.add(norm.split("/", 1)[0])
        files += member.isreg()
    if len(roots) != 1:
        raise BundleError(f"{archive}: members must sit in one top folder (found {len(roots)})",
                          hint="a bundle made by 'iteralab bundle pack' holds one campaign folder")
    root = roots.pop()
    if root in (".", "") or any(posixpath.normpath(m.name) == root and not m.isdir() for m in members):
        raise BundleError(f"{archive}: members must sit in one named top folder")
    return members, root, files


def unpack(archive: str | os.PathLike[str], dest: str | os.PathLike[str], *,
           free_bytes: Callable[[Path], int] = _free_bytes) -> Unpacked:
    """Restore a packed bundle into ``dest`` (which must not exist or be empty), then check its seal.

    Everything is checked before anything is written: every member's name and kind, the hash list read from the
    archive first (a file it does not list is refused), and the files' total size against the free space where
    ``dest`` would be (``free_bytes``). The extraction itself goes through ``tarfile``'s ``data`` filter into a
    temporary sibling folder that is renamed to ``dest`` at the end; a refused or failed unpack leaves nothing.
    """
    archive, dest = Path(archive), Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BundleError(f"{dest}: exists and is not an empty folder; a bundle is never unpacked over files",
                          hint="choose a new destination folder")
    try:
        tar = tarfile.open(archive, mode="r:*")
    except FileNotFoundError:
        raise BundleError(f"{archive}: archive not found") from None
    except (tarfile.TarError, OSError, EOFError) as exc:
        first = str(exc).splitlines()[0].rstrip(" :(") if str(exc).strip() else type(exc).__name__
        raise BundleError(f"{archive}: not a readable tar archive ({first})",
                          hint="give an archive written by: iteralab bundle pack FOLDER") from None
    with tar:
        members, root, files = _checked_members(tar, archive)
        total = _listed_members(tar, members, root, archive)
        free = free_bytes(dest.parent)
        if total > free:
            raise BundleError(f"{archive}: its files take {total:,} bytes, more than the {free:,} bytes free where "
                              f"{dest} would be; nothing was written",
                              hint="free some space or unpack elsewhere; an archive sent to you that is far larger "
                                   "than its campaign should be is not a bundle to trust")
        created = [p for p in (dest.parent, *dest.parent.parents) if not p.exists()]
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".tmp-unpack-{dest.name}.", dir=dest.parent))
        done = False
        try:
            base = staging.resolve()
            for member in members:
                landing = (base / member.name).resolve()
                if landing != base / root and base / root not in landing.parents:
                    raise BundleError(f"{archive}: member {member.name!r} refused: it would land outside {dest}")
            if hasattr(tarfile, "data_filter"):
                tar.extractall(staging, members=members, filter="data")
            else:  # pragma: no cover - Python without the extraction filters (before 3.10.12 / 3.11.4)
                _extract_plain(tar, members, staging)
            if dest.exists():
                dest.rmdir()
            os.replace(staging / root, dest)
            done = True
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            if not done:  # the folders this unpack created to hold dest go too
                for folder in created:
                    with contextlib.suppress(OSError):
                        folder.rmdir()
    for path in dest.rglob("*"):
        if path.is_symlink():  # defence in depth: nothing above can create one
            raise BundleError(f"{path}: a link appeared while unpacking; do not use this folder")
    return Unpacked(dest, files, check_seal(dest))


def _extract_plain(tar: tarfile.TarFile, members: list[tarfile.TarInfo], staging: Path) -> None:
    for member in members:
        target = staging / member.name
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        source = tar.extractfile(member)
        assert source is not None
        with source, open(target, "xb") as fh:
            shutil.copyfileobj(source, fh)
