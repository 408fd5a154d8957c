"""Evidence commands: seal, pack and unpack a bundle, verify a folder from its files alone, rerun a campaign."""

from __future__ import annotations

from pathlib import Path

import typer

from iteralab.commands.common import campaign_display, require_campaign, resumable


bundle_app = typer.Typer(help="Evidence bundle: seal a campaign folder into one archive, restore it safely (D3).",
                         no_args_is_help=True)


@bundle_app.command("seal")
def bundle_seal_cmd(campaign: Path = typer.Argument(..., help="Campaign folder to seal.")) -> None:
    """Write SHA256SUMS (every file's sha256) and SHA256SUMS.sha256 into the folder, without archiving it."""
    from iteralab.evidence.bundle import seal

    require_campaign(campaign)
    sealed = seal(campaign)
    if sealed.changed_since_previous:
        typer.echo(f"resealed: {len(sealed.changed_since_previous)} file(s) differ from the previous seal: "
                   + ", ".join(sealed.changed_since_previous))
    typer.echo(f"sealed {sealed.files} files; seal digest (sha256 of SHA256SUMS): {sealed.digest}")


@bundle_app.command("pack")
def bundle_pack_cmd(
    campaign: Path = typer.Argument(..., help="Campaign folder to seal and pack."),
    out: Path = typer.Option(None, "--out", "-o", help="Archive to write (default: FOLDER.tar.gz beside it)."),
    include_weights: bool = typer.Option(False, "--include-weights",
                                         help="Also carry the model weights (recorded by hash otherwise)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Seal a campaign folder (SHA256SUMS of every file, written last) and pack it into one .tar.gz."""
    import json

    from iteralab.evidence.bundle import pack

    archive, sealed = pack(campaign, out, include_weights=include_weights)
    if as_json:
        typer.echo(json.dumps({"archive": str(archive), "files": sealed.files, "seal_digest": sealed.digest,
                               "changed_since_previous_seal": list(sealed.changed_since_previous)},
                              indent=2, sort_keys=True))
        return
    if sealed.changed_since_previous:
        typer.echo(f"resealed: {len(sealed.changed_since_previous)} file(s) differ from the previous seal: "
                   + ", ".join(sealed.changed_since_previous))
    typer.echo(f"sealed {sealed.files} files; seal digest (sha256 of SHA256SUMS): {sealed.digest}")
    typer.echo(f"archive: {archive}")


@bundle_app.command("unpack")
def bundle_unpack_cmd(
    archive: Path = typer.Argument(..., help="Archive made by 'iteralab bundle pack'."),
    dest: Path = typer.Argument(..., help="Folder to restore into (must not exist, or be empty)."),
) -> None:
    """Restore a bundle archive safely (no absolute paths, '..', links, devices, or file SHA256SUMS does not list;
    nothing beyond the free disk) and check its seal."""
    from iteralab.evidence.bundle import unpack
    from iteralab.errors import VerificationError

    result = unpack(archive, dest)
    typer.echo(f"restored {result.files} files into {result.dest}")
    for problem in result.seal.problems:
        typer.echo(f"- {problem}")
    if not result.seal.ok:
        raise VerificationError(f"{result.dest}: the restored files do not match their hash list",
                                hint="the archive was altered after packing; do not use these files as evidence")
    typer.echo(f"seal ok: {result.seal.files} files match SHA256SUMS (digest {result.seal.digest}); "
               f"next: iteralab verify {result.dest}")


def verify_cmd(
    campaign: Path = typer.Argument(..., help="Campaign folder or unpacked bundle."),
    expect_seal: str = typer.Option(None, "--expect-seal", metavar="SHA256",
                                    help="Seal digest written down when the bundle was packed."),
    unsealed: bool = typer.Option(False, "--unsealed", help="Accept a folder never sealed (no SHA256SUMS)."),
    as_json: bool = typer.Option(False, "--json", help="Print the full report as JSON."),
) -> None:
    """Recompute every verdict and the stored decision from the stored files alone; exit 1 naming each difference
    (no model is run)."""
    import json

    from iteralab.campaign.folder import CampaignFolder
    from iteralab.decision.audit import audit_with_decision

    CampaignFolder.open(campaign, sealed_only_ok=True)
    report = audit_with_decision(campaign, require_seal=not unsealed, expect_seal=expect_seal)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        for line in report.differences:
            typer.echo(f"- {line}")
        if report.ok:
            typer.echo(report.summary_line())
        for note in report.notes:
            typer.echo(f"note: {note}")
    report.raise_if_different()


def rerun_cmd(
    campaign: Path = typer.Argument(..., help="Earlier campaign folder (or unpacked bundle) to repeat."),
    out: Path = typer.Option(..., "--out", "-o", help="New campaign folder (an interrupted rerun is resumed)."),
    tuning: Path = typer.Option(None, "--tuning", help="Tuning data file, when the protocol declares one."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
) -> None:
    """Repeat the same locked protocol on the same corpus, then compare with the earlier campaign."""
    import json

    from iteralab.evidence.rerun import rerun

    def notes_only(kind: str, info: dict) -> None:  # --json keeps stdout for the comparison
        if kind == "note":
            typer.echo(info["text"], err=True)

    display = notes_only if as_json else campaign_display()
    resume = f"iteralab rerun {campaign} --out {out}" + (f" --tuning {tuning}" if tuning else "")
    with resumable(resume, display):
        result = rerun(campaign, out, progress=display, tuning=tuning)
    comparison = result["comparison"]
    if as_json:
        typer.echo(json.dumps(comparison, indent=2, sort_keys=True))
        return
    from iteralab.evidence.comparison import summary_lines

    for line in summary_lines(comparison):
        typer.echo(line)
    typer.echo(f"comparison: {result['comparison_files'][0]}")


def register(app: typer.Typer) -> None:
    """Add this group's commands to the CLI, in the order ``--help`` lists them."""
    app.add_typer(bundle_app, name="bundle")
    app.command("verify")(verify_cmd)
    app.command("rerun")(rerun_cmd)
