import json

import pytest

from iteralab.cli import main
from iteralab.errors import ProtocolError
from iteralab.plan.protocol import check_series, load_protocol, parse_protocol, series_violations
from iteralab.plan.lockfile import check_locked, lock, lock_path
from protocol_factory import VARIANTS, protocol_toml, write_protocol


def test_valid_protocol_defaults():
    p = parse_protocol(protocol_toml())
    assert p.scenario == "offline"
    assert p.run.passes == 2
    assert p.checks.coverage == 1.0
    assert [v.name for v in p.variants] == ["b1", "b4"]


def test_default_passes_is_five():
    text = protocol_toml().replace("passes = 2\n", "")
    assert parse_protocol(text).run.passes == 5


def test_interactive_scenario_refused_with_reason():
    text = protocol_toml().replace('scenario = "offline"', 'scenario = "interactive"')
    with pytest.raises(ProtocolError) as err:
        parse_protocol(text, "p.toml")
    msg = str(err.value)
    assert msg.startswith("p.toml: key 'scenario': scenario 'interactive' is not supported")
    assert "request arrivals, concurrency" in msg and "offline ranking does not carry over" in msg


def test_unknown_key_named_with_file():
    text = protocol_toml(extra="colour = 'blue'")
    with pytest.raises(ProtocolError) as err:
        parse_protocol(text, "p.toml")
    assert str(err.value) == "p.toml: unknown key 'colour'"


def test_unknown_key_inside_array_table_names_variant():
    text = protocol_toml(variants=VARIANTS.replace("batch_size = 4", "batch_size = 4\nbatchsize = 4"))
    with pytest.raises(ProtocolError) as err:
        parse_protocol(text, "p.toml")
    assert str(err.value) == "p.toml: unknown key 'variants[1] (b4).batchsize' (did you mean 'batch_size'?)"


@pytest.mark.parametrize("bad, expected", [
    ("threshold = -0.1", "p.toml: key 'metric.threshold': Input should be greater than or equal to 0"),
    ("name = \"f2\"", "p.toml: key 'metric.name': unknown metric 'f2'; known: accuracy, macro_f1, weighted_f1, balanced_accuracy, knn_accuracy, recall_at_k, mrr, ndcg_at_k, exact_match, token_f1, rouge_l, chrf"),
])
def test_bad_metric_values(bad, expected):
    text = protocol_toml()
    key = bad.split(" = ")[0]
    lines = text.splitlines()
    start = lines.index("[metric]")
    for i in range(start, start + 6):
        if lines[i].startswith(key + " ="):
            lines[i] = bad
    with pytest.raises(ProtocolError) as err:
        parse_protocol("\n".join(lines), "p.toml")
    assert str(err.value) == expected


def test_reference_variant_must_exist():
    with pytest.raises(ProtocolError, match="reference_variant 'b9' is not a declared variant"):
        parse_protocol(protocol_toml(reference="b9"))


def test_series_with_two_differing_factors_refused():
    variants = VARIANTS.replace("batch_size = 4", 'batch_size = 4\nprecision = "bf16"')
    p = parse_protocol(protocol_toml(variants=variants))
    with pytest.raises(ProtocolError) as err:
        check_series(p, "p.toml")
    assert str(err.value) == ("p.toml: series 'batch' declares factor 'batch_size' but 'b1' and 'b4' "
                              "also differ in precision")


def test_bucketing_is_its_own_factor():
    # b1 and b4 differ in bucketing alone: a series on "bucketing" is clean, one on "batch_size" is not.
    variants = VARIANTS.replace("batch_size = 4", "batch_size = 1\nbucketing = true")
    on_bucketing = parse_protocol(protocol_toml(variants=variants.replace(
        'factor = "batch_size"', 'factor = "bucketing"')))
    assert [(v.batch_size, v.bucketing) for v in on_bucketing.variants] == [(1, False), (1, True)]
    assert on_bucketing.series[0].factor == "bucketing"
    assert series_violations(on_bucketing) == []
    check_series(on_bucketing, "p.toml")
    on_batch = parse_protocol(protocol_toml(variants=variants))
    assert series_violations(on_batch) == ["series 'batch': two variants share the same batch_size",
                                           "series 'batch' declares factor 'batch_size' but 'b1' and 'b4' "
                                           "also differ in bucketing"]
    with pytest.raises(ProtocolError, match="two variants share the same batch_size"):
        check_series(on_batch, "p.toml")
    # Bucketing beside a batch-size change is a second factor, named as such.
    mixed = VARIANTS.replace("batch_size = 4", "batch_size = 4\nbucketing = true")
    with pytest.raises(ProtocolError) as err:
        check_series(parse_protocol(protocol_toml(variants=mixed)), "p.toml")
    assert str(err.value) == ("p.toml: series 'batch' declares factor 'batch_size' but 'b1' and 'b4' "
                              "also differ in bucketing")


def test_lock_then_run_check(tmp_path):
    path = write_protocol(tmp_path)
    with pytest.raises(ProtocolError, match="protocol is not locked"):
        check_locked(path)
    entry = lock(path)
    protocol, checked = check_locked(path)
    assert checked.sha256 == entry.sha256 and protocol.version == 1
    assert json.loads(lock_path(path).read_text())["locks"][0]["locked_at"] == entry.locked_at


def test_changed_after_lock_refused_and_amendment_is_new_version(tmp_path):
    path = write_protocol(tmp_path, threshold=0.7)
    lock(path)
    # Lowering the threshold after results exist is exactly what the lock prevents.
    path.write_text(protocol_toml(threshold=0.5))
    with pytest.raises(ProtocolError, match="changed after it was locked"):
        check_locked(path)
    with pytest.raises(ProtocolError, match="with different content") as err:
        lock(path)
    assert "raise 'version'" in err.value.hint
    path.write_text(protocol_toml(threshold=0.5, version=2))
    entry = lock(path)
    assert entry.version == 2
    assert len(json.loads(lock_path(path).read_text())["locks"]) == 2


def test_cli_lock_and_errors(tmp_path, capsys):
    from campaign_factory import callable_campaign

    path = callable_campaign(tmp_path, locked=False)
    assert main(["lock", str(path)]) == 0
    out = capsys.readouterr().out
    assert "locked" in out and "schedule: 2 variants × 2 passes = 4 measured passes, rotated" in out
    assert main(["lock", str(tmp_path / "missing.toml")]) == 2
    assert capsys.readouterr().err.splitlines()[0] == f"Error: {tmp_path / 'missing.toml'}: protocol file not found"
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [")
    assert main(["lock", str(bad)]) == 2
    assert capsys.readouterr().err.startswith(f"Error: {bad}: not valid TOML")


def test_load_protocol_not_utf8(tmp_path):
    p = tmp_path / "p.toml"
    p.write_bytes(b"name = \"\xff\"")
    with pytest.raises(ProtocolError, match="not UTF-8"):
        load_protocol(p)


def test_every_problem_is_shown_with_a_did_you_mean():
    text = protocol_toml().replace("threshold = 0.0", "treshold = 0.0")
    with pytest.raises(ProtocolError) as err:
        parse_protocol(text, "p.toml")
    assert str(err.value) == ("p.toml: unknown key 'metric.treshold' (did you mean 'threshold'?); "
                              "missing key 'metric.threshold'")
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ the calendar, checked as decide reads it

CALENDAR = """
[calendar]
timezone = "{tz}"
deadline = "{deadline}"
tasks = [
  {{ name = "setup", start = "2026-03-23T09:00", end = "{end}" }},
  {{ name = "comparisons", start = "2026-03-23T14:00", end = "2026-03-26T18:00" }},
]
"""


def _calendar(tz="Europe/Paris", end="2026-03-23T18:00", deadline="2026-03-27T12:00"):
    return protocol_toml(variants=VARIANTS + CALENDAR.format(tz=tz, end=end, deadline=deadline))


def test_a_sound_calendar_is_accepted():
    calendar = parse_protocol(_calendar()).calendar
    assert calendar.timezone == "Europe/Paris" and [t.name for t in calendar.tasks] == ["setup", "comparisons"]
    assert parse_protocol(_calendar(deadline="2026-03-26T18:00")).calendar.deadline == "2026-03-26T18:00"  # at the end


@pytest.mark.parametrize("kwargs, message, hint", [
    ({"tz": "Mars/Olympus"}, "key 'calendar.timezone': unknown time zone 'Mars/Olympus'",
     "use an IANA zone name such as Europe/Paris or America/New_York"),
    ({"end": "2026-03-23T08:00"}, "key 'calendar.tasks[0] (setup).end': end 2026-03-23T08:00:00+01:00 is not after "
     "start 2026-03-23T09:00:00+01:00", "swap them or fix the dates"),
    ({"end": "2026-03-29T02:30"}, "key 'calendar.tasks[0] (setup).end': end 2026-03-29T02:30:00 does not exist in "
     "Europe/Paris (clocks go forward then)", "pick a time outside the skipped hour"),
    ({"deadline": "2026-03-20T12:00"}, "key 'calendar.deadline': deadline 2026-03-20T12:00 is before the planned "
     "tasks end (task 'comparisons' ends 2026-03-26T18:00): every configuration would miss it",
     "move the deadline after the last task, or fix the task dates"),
    ({"deadline": "next friday"}, "key 'calendar.deadline': deadline 'next friday' is not an ISO date-time",
     "write it as YYYY-MM-DDTHH:MM"),
    ({"tz": "Asia/Tokyo", "deadline": "0001-01-01T00:00"}, "key 'calendar.deadline': deadline 0001-01-01T00:00:00 is "
     "out of range in Asia/Tokyo", "write a date between the years 2 and 9998"),
])
def test_a_calendar_decide_would_refuse_is_refused_when_read(kwargs, message, hint):
    with pytest.raises(ProtocolError) as err:
        parse_protocol(_calendar(**kwargs), "p.toml")
    assert (str(err.value), err.value.hint) == (f"p.toml: {message}", hint)
