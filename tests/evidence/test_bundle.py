import hashlib
import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from campaign_factory import callable_campaign
from iteralab.evidence.verify import audit_campaign
from iteralab.evidence.bundle import SEAL_NAME, SUMS_NAME, check_seal, list_files, pack, seal, unpack
from iteralab.cli import main
from iteralab.errors import BundleError
from iteralab.evidence.run import run_campaign


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bundle")
    protocol = callable_campaign(root, passes=1)
    run_campaign(protocol, root / "campaign")
    return root / "campaign"


@pytest.fixture
def campaign(built, tmp_path) -> Path:
    target = tmp_path / "campaign"
    shutil.copytree(built, target)
    return target


def test_seal_lists_every_file_sorted_and_writes_its_own_hash_last(campaign):
    sealed = seal(campaign)
    lines = (campaign / SUMS_NAME).read_text().splitlines()
    paths = [line.split("  ", 1)[1] for line in lines]
    assert paths == sorted(paths) == list_files(campaign)
    assert {"campaign.json", "journal.jsonl", "raw_table.csv", "inputs/protocol.toml"} <= set(paths)
    assert SUMS_NAME not in paths and SEAL_NAME not in paths
    for line in lines:
        digest, rel = line.split("  ", 1)
        assert digest == hashlib.sha256((campaign / rel).read_bytes()).hexdigest()
    digest = hashlib.sha256((campaign / SUMS_NAME).read_bytes()).hexdigest()
    assert (campaign / SEAL_NAME).read_text() == f"{digest}  {SUMS_NAME}\n"
    assert sealed.digest == digest and sealed.files == len(paths) and not sealed.resealed
    assert check_seal(campaign).ok
    if shutil.which("sha256sum"):  # the GNU coreutils format: the standard tool checks it too
        subprocess.run(["sha256sum", "--quiet", "-c", SUMS_NAME], cwd=campaign, check=True)
        subprocess.run(["sha256sum", "--quiet", "-c", SEAL_NAME], cwd=campaign, check=True)


def test_seal_check_names_edited_deleted_added_files_and_an_edited_list(campaign):
    seal(campaign)
    (campaign / "campaign.json").write_text((campaign / "campaign.json").read_text() + " ")
    (campaign / "manifest.json").unlink()
    (campaign / "inputs" / "extra.txt").write_text("x")
    problems = check_seal(campaign).problems
    assert "campaign.json: edited (sha256 differs from SHA256SUMS)" in problems
    assert "manifest.json: missing (listed in SHA256SUMS)" in problems
    assert "inputs/extra.txt: added after sealing (not listed in SHA256SUMS)" in problems
    sums = campaign / SUMS_NAME
    sums.write_text(sums.read_text().replace("manifest.json", "manifest.jsoN"))
    assert any(p.startswith("SHA256SUMS: edited") for p in check_seal(campaign).problems)


def test_reseal_says_what_changed_since_the_previous_seal(campaign):
    seal(campaign)
    (campaign / "decision.md").write_text("# decision\n")
    again = seal(campaign)
    assert again.resealed and again.changed_since_previous == ("decision.md (added)",)
    assert check_seal(campaign).ok


def test_seal_refuses_a_symbolic_link(campaign):
    (campaign / "link").symlink_to(campaign / "campaign.json")
    with pytest.raises(BundleError, match="symbolic link"):
        seal(campaign)


def test_pack_then_unpack_restores_identical_files_that_verify(campaign, tmp_path):
    archive, sealed = pack(campaign, tmp_path / "a.tar.gz")
    again, _ = pack(campaign, tmp_path / "b.tar.gz")
    assert archive.read_bytes() == again.read_bytes()  # deterministic: same files, same archive
    with pytest.raises(BundleError, match="already exists"):
        pack(campaign, archive)
    restored = unpack(archive, tmp_path / "restored")
    assert restored.seal.ok and restored.seal.digest == sealed.digest
    assert list_files(restored.dest) == list_files(campaign)
    for rel in list_files(campaign) + [SUMS_NAME, SEAL_NAME]:
        assert (restored.dest / rel).read_bytes() == (campaign / rel).read_bytes()
    assert audit_campaign(restored.dest).ok
    with pytest.raises(BundleError, match="not an empty folder"):
        unpack(archive, tmp_path / "restored")


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _special(name: str, kind: bytes, link: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info, None


@pytest.mark.parametrize("member, reason", [
    (_file("c/../../escape.txt"), "'..' in the path"),
    (_file("../escape.txt"), "'..' in the path"),
    (_file("/tmp/absolute.txt"), "absolute"),
    (_special("c/link", tarfile.SYMTYPE, "/etc/passwd"), "symbolic link"),
    (_special("c/hard", tarfile.LNKTYPE, "c/campaign.json"), "hard link"),
    (_special("c/dev", tarfile.CHRTYPE), "device"),
    (_special("c/fifo", tarfile.FIFOTYPE), "device, pipe"),
])
def test_unpack_refuses_members_that_could_escape(tmp_path, member, reason):
    archive = _archive(tmp_path / "evil.tar.gz", [_file("c/campaign.json", b"{}"), member])
    with pytest.raises(BundleError, match="refused") as err:
        unpack(archive, tmp_path / "dest")
    assert reason in str(err.value)
    assert not (tmp_path / "dest").exists() and not (tmp_path / "escape.txt").exists()
    assert not list(tmp_path.glob(".tmp-unpack-*"))


def test_unpack_refuses_two_top_folders_and_duplicates(tmp_path):
    two = _archive(tmp_path / "two.tar.gz", [_file("a/x"), _file("b/y")])
    with pytest.raises(BundleError, match="one top folder"):
        unpack(two, tmp_path / "d1")
    dup = _archive(tmp_path / "dup.tar.gz", [_file("a/x", b"1"), _file("a/x", b"2")])
    with pytest.raises(BundleError, match="listed twice"):
        unpack(dup, tmp_path / "d2")


def test_cli_seal_pack_and_unpack(campaign, tmp_path, capsys):
    assert main(["bundle", "seal", str(campaign)]) == 0
    assert capsys.readouterr().out.startswith(f"sealed {len(list_files(campaign))} files; seal digest")
    (campaign / "decision.md").write_text("# decision\n")
    assert main(["bundle", "seal", str(campaign)]) == 0
    assert capsys.readouterr().out.startswith("resealed: 1 file(s) differ from the previous seal: decision.md (added)")
    archive = tmp_path / "evidence.tar.gz"
    assert main(["bundle", "pack", str(campaign), "--out", str(archive)]) == 0
    out = capsys.readouterr().out
    digest = hashlib.sha256((campaign / SUMS_NAME).read_bytes()).hexdigest()
    assert f"seal digest (sha256 of SHA256SUMS): {digest}" in out and f"archive: {archive}" in out
    assert main(["bundle", "unpack", str(archive), str(tmp_path / "restored")]) == 0
    assert "seal ok" in capsys.readouterr().out
    assert main(["bundle", "unpack", str(archive), str(tmp_path / "restored")]) == 2
    assert "Error:" in capsys.readouterr().err


def test_cli_unpack_of_an_altered_archive_exits_1(campaign, tmp_path, capsys):
    seal(campaign)
    (campaign / "raw_table.csv").write_text("edited\n")  # changed after sealing, then packed without resealing
    archive = tmp_path / "altered.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(campaign, arcname="campaign")
    assert main(["bundle", "unpack", str(archive), str(tmp_path / "restored")]) == 1
    captured = capsys.readouterr()
    assert "- raw_table.csv: edited (sha256 differs from SHA256SUMS)" in captured.out
    assert "do not match their hash list" in captured.err


def test_cli_unpack_of_a_file_that_is_no_archive_is_one_line(tmp_path, capsys):
    from iteralab.cli import main

    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not an archive at all\n" * 10)
    assert main(["bundle", "unpack", str(junk), str(tmp_path / "dest")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"Error: {junk}: not a readable tar archive (") and err[0].endswith(")"), err
    assert len(err) == 2 and err[1] == "Hint: give an archive written by: iteralab bundle pack FOLDER", err
    assert not (tmp_path / "dest").exists() or not any((tmp_path / "dest").iterdir())


def _sealed_archive(tmp_path: Path, extra: list[tuple[str, bytes]] = ()) -> Path:
    """A packed bundle of one small folder, with ``extra`` members added after sealing (not in SHA256SUMS)."""
    folder = tmp_path / "src" / "c"
    folder.mkdir(parents=True)
    (folder / "campaign.json").write_text("{}")
    (folder / "raw_table.csv").write_bytes(b"x" * 5000)
    seal(folder)
    path = tmp_path / "crafted.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(folder, arcname="c")
        for name, data in extra:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _nothing_written(tmp_path: Path, dest: Path) -> None:
    assert not dest.exists() and not dest.parent.exists()
    assert not list(tmp_path.rglob(".tmp-unpack-*"))


def test_unpack_refuses_a_member_the_hash_list_does_not_name_before_writing_anything(tmp_path, monkeypatch):
    archive = _sealed_archive(tmp_path, [("c/inputs/bomb.bin", bytes(300_000))])
    dest = tmp_path / "new" / "dest"
    extracted = []
    monkeypatch.setattr(tarfile.TarFile, "extractall", lambda *a, **k: extracted.append(a))
    with pytest.raises(BundleError, match=r"'c/inputs/bomb.bin' refused: not listed in SHA256SUMS") as err:
        unpack(archive, dest)
    assert "nothing was written" in str(err.value) and not extracted
    _nothing_written(tmp_path, dest)


def test_unpack_refuses_an_archive_without_its_hash_list(tmp_path):
    archive = _archive(tmp_path / "bare.tar.gz", [_file("c/campaign.json", b"{}")])
    with pytest.raises(BundleError, match=r"holds no c/SHA256SUMS"):
        unpack(archive, tmp_path / "new" / "dest")
    _nothing_written(tmp_path, tmp_path / "new" / "dest")


def test_unpack_refuses_files_larger_than_the_free_disk_before_writing_anything(tmp_path):
    archive = _sealed_archive(tmp_path)
    dest = tmp_path / "new" / "dest"
    seen = []

    def free(path: Path) -> int:
        seen.append(path)
        return 4000  # fewer bytes than the 5,000-byte table alone

    with pytest.raises(BundleError, match=r"more than the 4,000 bytes free where .* would be; nothing was written"):
        unpack(archive, dest, free_bytes=free)
    assert seen == [dest.parent]
    _nothing_written(tmp_path, dest)
    restored = unpack(archive, dest, free_bytes=lambda path: 10**6)  # room enough: the same archive unpacks
    assert restored.seal.ok and (dest / "raw_table.csv").stat().st_size == 5000
