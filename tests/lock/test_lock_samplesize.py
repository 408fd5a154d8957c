"""``lock`` warns in one line when the final corpus is smaller than the size the tolerance needs, from the record
``iteralab threshold`` wrote beside the protocol (``lock/samplesize.py``): exactly when smaller, never without a
record, and a record of another tuning split is said to be stale."""

import math
import re

from scipy.stats import norm

from campaign_factory import TEXTS, callable_campaign, write_corpus_csv
from iteralab.cli import main
from iteralab.common.files import sha256_file
from iteralab.plan.samplesize import Disagreement, SizeRecord, record_path


def _protocol(folder):
    protocol = callable_campaign(folder, passes=1, locked=False, corpus_extra='tuning_path = "tuning.csv"\n', extra=(
        '[calendar]\ntasks = [{ name = "all", start = "2026-03-23T09:00", end = "2026-03-27T09:00" }]\n'))
    write_corpus_csv(folder, [(f"t{i:02d}", f"{text} again", label) for i, (text, label) in enumerate(TEXTS)],
                     name="tuning.csv")
    return protocol


def _record(protocol, needed: int) -> None:
    """A record whose candidate needs exactly ``needed`` documents at the protocol's tolerance 0.05, confidence
    0.95 (none declared) and power 0.8."""
    sd = 0.05 * math.sqrt(needed) / (norm.ppf(0.975) + norm.ppf(0.8))
    candidate = Disagreement("b1", 0.0, sd, 12, "documents", "test")
    assert candidate.size(0.05, 0.95, 0.8) == needed
    SizeRecord("macro_f1", "tuning.csv", sha256_file(protocol.parent / "tuning.csv"), 0.9, (candidate,)).write(
        record_path(protocol))


def _amend(protocol, version: int) -> None:
    """A locked protocol is amended by raising its version."""
    protocol.write_text(re.sub(r"(?m)^version = \d+$", f"version = {version}", protocol.read_text()))


def _lock_warnings(protocol, capsys) -> list[str]:
    assert main(["lock", str(protocol)]) == 0
    return capsys.readouterr().err.splitlines()


def test_lock_warns_exactly_when_the_final_corpus_is_smaller_than_the_size_needed(tmp_path, capsys):
    protocol = _protocol(tmp_path)  # the final corpus: the factory's 12 documents
    assert _lock_warnings(protocol, capsys) == []  # no record: the size is not known, nothing is said
    for needed, warned in ((12, False), (13, True), (11, False)):
        _record(protocol, needed)
        _amend(protocol, needed)
        err = _lock_warnings(protocol, capsys)
        expected = [f"Warning: {protocol}: the final corpus has 12 documents; tolerance 0.05 at 0.95 confidence and "
                    f"power 0.8 needs {needed} documents (b1 against b4, {record_path(protocol).name})"]
        assert err == (expected if warned else []), needed


def test_a_record_of_another_tuning_split_is_stale_and_a_difference_beyond_the_tolerance_is_said(tmp_path, capsys):
    protocol = _protocol(tmp_path)
    SizeRecord("macro_f1", "tuning.csv", "0" * 64, 0.9, (Disagreement("b1", 0.0, 0.1, 12, "documents", "x"),)).write(
        record_path(protocol))
    assert _lock_warnings(protocol, capsys) == [
        f"Warning: {protocol}: {record_path(protocol).name} was measured for another metric or tuning split: the "
        "corpus size the tolerance needs is not known (run iteralab threshold protocol.toml again)"]
    SizeRecord("macro_f1", "tuning.csv", sha256_file(tmp_path / "tuning.csv"), 0.9,
               (Disagreement("b1", -0.06, 0.1, 12, "documents", "x"),)).write(record_path(protocol))
    _amend(protocol, 2)
    assert _lock_warnings(protocol, capsys) == [
        f"Warning: {protocol}: the final corpus has 12 documents; tolerance 0.05 at 0.95 confidence and power 0.8 "
        f"needs more than any size (b1's tuning difference -0.0600 is not within it) (b1 against b4, "
        f"{record_path(protocol).name})"]
