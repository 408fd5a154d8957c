"""Other project expenses (K5): the protocol's [[expenses]] lines, locked with it, and ``price --expenses``."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest

from campaign_factory import callable_campaign
from iteralab.cli import main
from iteralab.economics import pricing
from iteralab.errors import ProtocolError
from protocol_factory import LARGE_BATCH_EXPENSE
from iteralab.plan.protocol import parse_protocol
from iteralab.plan.lockfile import check_locked, lock, lock_path
from protocol_factory import protocol_toml

STORAGE = """
[[expenses]]
name = "storage"
amount = 12.50
currency = "USD"
justification = "object storage for the outputs, one month"
applies_to = "all"
"""
TOOLKIT = """
[[expenses]]
name = "int8 toolkit"
amount = 40
currency = "USD"
justification = "licence of the quantisation toolkit"
applies_to = ["b4"]
differs_because = "only b4 is quantised with the toolkit"
"""


def _refusal(extra: str) -> str:
    with pytest.raises(ProtocolError) as err:
        parse_protocol(protocol_toml() + extra, "p.toml")
    return str(err.value)


# ------------------------------------------------------------------------------------------- protocol


def test_expense_lines_are_read_with_their_scope():
    p = parse_protocol(protocol_toml() + STORAGE + TOOLKIT)
    storage, toolkit = p.expenses
    assert (storage.name, storage.amount, storage.currency, storage.variants) == ("storage", 12.5, "USD", None)
    assert toolkit.variants == ("b4",) and toolkit.differs_because == "only b4 is quantised with the toolkit"
    assert p.budget.include_expenses is False  # listed apart unless the protocol says otherwise
    assert parse_protocol(protocol_toml()).expenses == ()  # a protocol without expenses keeps working


def test_mixed_currencies_between_lines_are_refused_in_one_line():
    assert _refusal(STORAGE + TOOLKIT.replace('"USD"', '"EUR"')) == (
        "p.toml: key 'expenses[1] (int8 toolkit).currency': EUR differs from USD in expenses[0] (storage): "
        "one project budget holds one currency")


def test_unknown_variant_is_refused_with_did_you_mean():
    assert _refusal(TOOLKIT.replace('["b4"]', '["b44"]')) == (
        "p.toml: key 'expenses[0] (int8 toolkit).applies_to': unknown variant 'b44' (did you mean 'b4'?); "
        "declared: b1, b4")


def test_a_line_for_some_variants_must_say_why_it_differs():
    assert _refusal(TOOLKIT.replace('differs_because = "only b4 is quantised with the toolkit"\n', "")) == (
        "p.toml: key 'expenses[0] (int8 toolkit)': a line that applies to some variants only must say why in "
        "differs_because")
    assert "differs_because is for a line that applies to some variants only" in _refusal(
        STORAGE + 'differs_because = "no reason"\n')
    assert 'names every declared variant: write applies_to = "all"' in _refusal(
        TOOLKIT.replace('["b4"]', '["b1", "b4"]'))


@pytest.mark.parametrize("line,message", [
    ('justification = "  "', "key 'expenses[0] (storage).justification': an expense needs a justification"),
    ("amount = -1.0", "key 'expenses[0] (storage).amount': Input should be greater than or equal to 0"),
    ('amount = "12.50"', "key 'expenses[0] (storage).amount': expected a number, got the string '12.50'"),
    ("amount = 12.505", "key 'expenses[0] (storage).amount': 12.505 has more than two decimals"),
    ('currency = "usd"', "key 'expenses[0] (storage).currency': 'usd' is not a currency code like USD"),
    ('applies_to = "some"', "key 'expenses[0] (storage).applies_to': expected \"all\" or a list of variant names"),
    ("applies_to = []", "key 'expenses[0] (storage).applies_to': an empty list applies to no variant"),
])
def test_bad_expense_values_name_the_key(line, message):
    key = line.split(" = ")[0]
    text = "\n".join(line if row.startswith(f"{key} = ") else row for row in STORAGE.splitlines())
    assert message in _refusal(text + "\n")


def test_missing_justification_and_misspelt_key():
    text = STORAGE.replace('justification = "object storage for the outputs, one month"\n', "") + "amout = 3\n"
    assert _refusal(text) == ("p.toml: unknown key 'expenses[0] (storage).amout' (did you mean 'amount'?); "
                              "missing key 'expenses[0] (storage).justification'")


def test_expenses_are_locked_with_the_protocol(tmp_path):
    path = tmp_path / "protocol.toml"
    path.write_text(protocol_toml() + STORAGE, encoding="utf-8")
    lock(path)
    assert check_locked(path)[0].expenses[0].amount == 12.5
    path.write_text(protocol_toml() + STORAGE.replace("12.50", "2.50"), encoding="utf-8")
    with pytest.raises(ProtocolError, match="changed after it was locked"):
        check_locked(path)


def test_lock_refuses_expenses_in_another_currency_than_the_catalog(tmp_path, capsys):
    protocol = callable_campaign(tmp_path, passes=1, locked=False)
    protocol.write_text(protocol.read_text() + STORAGE.replace('"USD"', '"EUR"'), encoding="utf-8")
    assert main(["lock", str(protocol)]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"Error: {protocol}: key 'expenses[0] (storage).currency': EUR differs from USD, the currency of the catalog "
        "that prices the package fee: one project budget holds one currency")
    assert not lock_path(protocol).exists()


# --------------------------------------------------------------------------------------------- pricing


def _expenses(*texts: str) -> tuple[pricing.Expense, ...]:
    return pricing.expenses_of(parse_protocol(protocol_toml() + "".join(texts)).expenses)


def test_an_expense_for_some_variants_appears_only_on_those_and_is_named_on_the_others():
    budget = pricing.price("rtx-4090", 7, 1).budget
    sheet = pricing.cost_sheet([("b1", budget, 1), ("b4", budget, 1)], _expenses(STORAGE, TOOLKIT))
    b1, b4 = sheet.variants
    assert [e.name for e in b1.expenses] == ["storage"] and [e.name for e in b1.not_applicable] == ["int8 toolkit"]
    assert [e.name for e in b4.expenses] == ["storage", "int8 toolkit"] and b4.not_applicable == ()
    assert (b1.project_total, b4.project_total) == (Decimal("122.50"), Decimal("162.50"))
    assert b1.lines() == [
        "committed package fee: 110.00 USD (rtx-4090 7-day package, 1 lot)",
        "storage: 12.50 USD: object storage for the outputs, one month",
        "int8 toolkit: not applicable (applies to b4 only, because only b4 is quantised with the toolkit)",
        "project total: 122.50 USD (package fee 110.00 USD + other expenses 12.50 USD)",
    ]


def test_expenses_never_enter_the_cost_per_result_unless_declared():
    budget = pricing.price("rtx-4090", 7, 1).budget
    apart = pricing.cost_sheet([("b4", budget, 2)], _expenses(STORAGE, TOOLKIT)).variants[0]
    assert apart.cost.per_result == Decimal("55.00") and apart.ranked_total == Decimal("110.00")
    counted = pricing.cost_sheet([("b4", budget, 2)], _expenses(STORAGE, TOOLKIT), counted=True).variants[0]
    assert counted.cost.per_result == Decimal("81.25") and counted.ranked_total == Decimal("162.50")


# ----------------------------------------------------------------------------------------- price CLI


def _file(tmp_path, text: str):
    path = tmp_path / "expenses.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_price_with_expenses_prints_fee_each_line_and_the_project_total(tmp_path, capsys):
    path = _file(tmp_path, STORAGE + TOOLKIT)
    assert main(["price", "--gpu", "rtx-4090", "--days", "7", "--lots", "2", "--accepted-results", "2",
                 "--expenses", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:5] == pricing.render_price(pricing.price("rtx-4090", 7, 2))  # the kit's lines first
    assert out[5:] == [
        "other expenses (K5): listed apart from the package fee",
        "  storage: 12.50 USD: object storage for the outputs, one month",
        "  int8 toolkit: not applicable (applies to b4 only, because only b4 is quantised with the toolkit)",
        "  (lines for some variants only are counted with --variant NAME)",
        "project total: 232.50 USD (package fee 220.00 USD + other expenses 12.50 USD)",
        "accepted results: 2",
        "cost per verified result: 110.00 USD (220.00 USD / 2 accepted results), of the package fee alone "
        "(project total 232.50 USD)",
    ]


def test_price_counts_the_expenses_only_when_the_file_declares_it(tmp_path, capsys):
    path = _file(tmp_path, STORAGE + TOOLKIT + "\n[budget]\ninclude_expenses = true\n")
    assert main(["price", "--gpu", "rtx-4090", "--days", "7", "--accepted-results", "2", "--expenses", str(path),
                 "--variant", "b4", "--json"]) == 0
    project = json.loads(capsys.readouterr().out)["project"]
    assert project["project_total"] == "162.50" and project["expenses_counted"] is True
    assert project["cost_per_result"]["per_result"] == "81.25"
    assert [e["name"] for e in project["expenses"]] == ["storage", "int8 toolkit"]


def test_price_refuses_an_expense_in_another_currency_than_the_catalog(tmp_path, capsys):
    path = _file(tmp_path, STORAGE.replace('"USD"', '"EUR"'))
    assert main(["price", "--gpu", "rtx-4090", "--days", "7", "--expenses", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"Error: {path}: key 'expenses[0] (storage).currency': EUR differs from USD, the currency of the catalog "
        "that prices the package fee: one project budget holds one currency",
        "Hint: write every expense in USD (convert it and give the rate in its justification)",
    ]


def test_price_expenses_file_is_validated_like_a_protocol(tmp_path, capsys):
    path = _file(tmp_path, STORAGE + TOOLKIT.replace('"USD"', '"EUR"'))
    assert main(["price", "--gpu", "rtx-4090", "--days", "7", "--expenses", str(path)]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"Error: {path}: key 'expenses[1] (int8 toolkit).currency': EUR differs from USD in expenses[0] (storage): "
        "one project budget holds one currency")
    assert main(["price", "--gpu", "rtx-4090", "--days", "7", "--expenses", str(_file(tmp_path, "[budget]\n"))]) == 2
    assert capsys.readouterr().err.splitlines()[0] == f"Error: {path}: missing key 'expenses'"
    assert main(["price", "--gpu", "rtx-4090", "--days", "7", "--variant", "b4"]) == 2
    assert capsys.readouterr().err.startswith("Error: --variant picks the expense lines of one variant")


# -------------------------------------------------------------------------------------------- decision

LARGE_BATCH = LARGE_BATCH_EXPENSE
COUNTED = "\n[budget]\ninclude_expenses = true\n"


def _decide(tmp_path, extra: str):
    from iteralab.decision.rule import decide
    from stats_campaigns import build_campaign

    return decide([build_campaign(tmp_path / "rtx", hardware="rtx4090", extra=extra)])


def _config(decision, variant):
    return next(c for c in decision.configs if c.variant == variant)


def test_expenses_for_every_variant_are_shown_but_never_enter_the_cost_or_the_ranking(tmp_path):
    from iteralab.decision.note import decision_json, render_decision

    plain = _decide(tmp_path / "plain", "")
    decision = _decide(tmp_path / "storage", STORAGE)
    assert decision.chosen.variant == plain.chosen.variant == "b8"
    b8 = decision.chosen
    assert b8.pricing.cost.per_result == Decimal("110.00")  # the package fee alone, as without expenses
    assert b8.project.project_total == Decimal("122.50") and b8.committed == Decimal("110.00")
    assert decision.expense_ranking == ()  # a line for every variant cannot move the winner
    note = render_decision(decision)
    lines = note.splitlines()
    assert lines.count("  - storage: 12.50 USD: object storage for the outputs, one month") == 4  # each priced one
    assert lines[lines.index("- **b8**") + 1:lines.index("- **b8**") + 5] == [
        "  - committed package fee: 110.00 USD (rtx-4090 7-day package, 1 lot)",
        "  - storage: 12.50 USD: object storage for the outputs, one month",
        "  - project total: 122.50 USD (package fee 110.00 USD + other expenses 12.50 USD)",
        "  - cost per verified corpus of the package fee alone: 110.00 USD (110.00 USD / 1 accepted result)"]
    assert "the rule ranks the committed package fee and the cost per verified corpus divides the package fee alone" \
        in note
    data = json.loads(decision_json(decision))
    assert data["other_expenses"]["counted"] is False
    row = next(c for c in data["configurations"] if c["variant"] == "b8")
    assert row["project_budget"]["project_total"] == "122.50"
    assert row["pricing"]["cost_per_result"]["per_result"] == "110.00"
    assert "Project budget" not in render_decision(plain) and json.loads(decision_json(plain))["other_expenses"] is None


def test_a_variant_specific_expense_that_would_move_the_winner_is_shown_not_silent(tmp_path):
    from iteralab.decision.note import render_decision

    decision = _decide(tmp_path, STORAGE + LARGE_BATCH)
    assert decision.chosen.variant == "b8"  # the rule ranks the package fee: b8 stays chosen ...
    assert _config(decision, "b1").project.not_applicable[0].name == "large-batch memory check"
    assert decision.expense_ranking == (  # ... and the note says what the project total would choose
        "ranked by the project total instead, b4 would come first (122.50 USD vs 162.50 USD): the lines for some "
        "variants only (large-batch memory check) weigh on that ranking; the protocol ranks the committed package "
        "fee, so b8 stays chosen (declare [budget] include_expenses = true to rank the project total)",)
    note = render_decision(decision)
    assert note.count(decision.expense_ranking[0]) == 2  # in the reasons and in the project budget section
    assert ("  - large-batch memory check: not applicable (applies to b8, b16 only, because batches of 8 and more "
            "are the ones near the card's memory limit)") in note


def test_declared_switch_counts_the_expenses_in_the_cost_and_the_ranking_and_the_note_says_so(tmp_path):
    from iteralab.decision.note import render_decision

    decision = _decide(tmp_path, STORAGE + LARGE_BATCH + COUNTED)
    b4, b8 = _config(decision, "b4"), _config(decision, "b8")
    assert b4.pricing.cost.per_result == Decimal("122.50") and b8.pricing.cost.per_result == Decimal("162.50")
    assert (b4.committed, b8.committed) == (Decimal("122.50"), Decimal("162.50"))
    assert decision.chosen.variant == "b4"  # the counted project total decides, and it is said
    note = render_decision(decision)
    assert ("the protocol counts the other expenses ([budget] include_expenses = true): the rule ranks the project "
            "total (package fee + the expenses that apply) and the cost per verified corpus divides that project "
            "total") in note
    assert "122.50 USD (122.50 USD / 1 accepted result) of the project total |" in note
    assert "  - cost per verified corpus of the project total: 122.50 USD (122.50 USD / 1 accepted result)" in note
    assert decision.one_line.startswith("chosen: b4: rtx-4090 7-day package, 1 lot, 110.00 USD committed, project "
                                        "total 122.50 USD with the other expenses (counted), 122.50 USD per "
                                        "verified corpus of the project total (1 accepted)")
    assert any(r.startswith("b8: also meets every condition but commits 162.50 USD project total")
               for r in decision.reasons)


def test_decide_refuses_expenses_in_another_currency_than_the_catalog_used(tmp_path, capsys):
    from stats_campaigns import build_campaign

    folder = build_campaign(tmp_path / "rtx", hardware="rtx4090", extra=STORAGE)
    catalog = tmp_path / "eur.csv"
    catalog.write_text(open(pricing.DEFAULT_CATALOG, encoding="utf-8").read().replace(",USD", ",EUR"), encoding="utf-8")
    assert main(["decide", str(folder), "--catalog", str(catalog)]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"Error: {folder / 'inputs' / 'protocol.toml'}: key 'expenses[0] (storage).currency': USD differs from EUR, "
        "the currency of the catalog that prices the package fee: one project budget holds one currency")


def test_report_shows_the_expenses_per_configuration(tmp_path):
    import html as html_lib

    from iteralab.decision.report import finalize
    from stats_campaigns import build_campaign

    folder = build_campaign(tmp_path / "rtx", hardware="rtx4090", extra=STORAGE + LARGE_BATCH)
    finalize([folder], tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "<h2>Project budget: package fee and other expenses (K5)</h2>" in page
    text = html_lib.unescape(page)
    assert "for b8, b16 only, because batches of 8 and more are the ones near the card's memory limit: one operator " \
           "hour rerunning the memory notebook on the rented card" in text
    section = page.split("<h2>Project budget")[1].split("<h2>")[0]
    b1 = re.search(r"<td>b1</td>(.*?)</tr>", section, re.S).group(1)
    cells = [html_lib.unescape(c) for c in re.findall(r"<td>(.*?)</td>", b1, re.S)]
    assert cells == ["110.00 USD", "12.50 USD", "not applicable (b8, b16 only, because batches of 8 and more are "
                     "the ones near the card's memory limit)", "122.50 USD", "110.00 USD (110.00 USD / 1 accepted "
                     "result)"]
    b8 = re.search(r"<td>b8</td>(.*?)</tr>", section, re.S).group(1)
    assert [html_lib.unescape(c) for c in re.findall(r"<td>(.*?)</td>", b8, re.S)][1:4] == [
        "12.50 USD", "40.00 USD", "162.50 USD"]
    assert "ranked by the project total instead, b4 would come first" in text


def test_price_reads_the_expenses_of_a_whole_protocol_file(tmp_path, capsys):
    path = tmp_path / "protocol.toml"
    path.write_text(protocol_toml() + STORAGE + TOOLKIT, encoding="utf-8")
    assert main(["price", "--gpu", "rtx-4090", "--days", "7", "--expenses", str(path), "--variant", "b4"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "project total: 162.50 USD (package fee 110.00 USD + other expenses 52.50 USD)")
    path.write_text(protocol_toml() + TOOLKIT.replace('["b4"]', '["b44"]'), encoding="utf-8")
    assert main(["price", "--gpu", "rtx-4090", "--days", "7", "--expenses", str(path)]) == 2
    assert "unknown variant 'b44' (did you mean 'b4'?)" in capsys.readouterr().err
    path.write_text(protocol_toml(), encoding="utf-8")
    assert main(["price", "--gpu", "rtx-4090", "--days", "7", "--expenses", str(path)]) == 2
    assert capsys.readouterr().err.splitlines()[0] == f"Error: {path}: the protocol declares no [[expenses]] line"


def test_a_refused_expense_line_is_said_once_with_a_hint_for_a_plain_file(tmp_path, capsys):
    """The line's own problem only (not again as "the list is too short"); an expenses file is no locked
    protocol, so its hint says nothing about amending one."""
    path = tmp_path / "e.toml"
    path.write_text('[[expenses]]\nname = "s"\namount = "12"\ncurrency = "USD"\njustification = "x"\n'
                    'applies_to = "all"\n', encoding="utf-8")
    assert main(["price", "--gpu", "rtx-4090", "--days", "7", "--expenses", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"Error: {path}: key 'expenses[0] (s).amount': expected a number, got the string '12'",
                   "Hint: fix the value"]
