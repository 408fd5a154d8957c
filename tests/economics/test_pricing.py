"""Pricing: budget per lot, cost per verified result, unique results, expenses kept apart (K1, K4–K6)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iteralab.economics import pricing
from iteralab.cli import main
from iteralab.kit.calcul_forfaits import COLUMNS, CatalogEntry


def entry(price: Decimal, cards: int = 1, days: int = 7) -> CatalogEntry:
    return CatalogEntry("gpu-x", "Some GPU", cards, days, price, "USD", line=2)


# ---------------------------------------------------------------------------------------- budget (K1)


def test_worked_examples_from_the_shipped_catalog():
    rtx = pricing.price("rtx-4090", 7, 2)
    assert (rtx.budget.total, rtx.budget.cards, rtx.budget.currency) == (Decimal("220.00"), 2, "USD")
    b200 = pricing.price("b200", 7, 1)
    assert (b200.budget.total, b200.budget.cards, b200.budget.cards_per_lot) == (Decimal("2071.00"), 2, 2)
    assert pricing.format_amount(pricing.price("b200", 7, 10).budget.total) == "20710.00"


def test_card_count_is_never_multiplied_into_the_price():
    one_card = pricing.package_budget(entry(Decimal("100.00"), cards=1), 3)
    eight_cards = pricing.package_budget(entry(Decimal("100.00"), cards=8), 3)
    assert one_card.total == eight_cards.total == Decimal("300.00")
    assert eight_cards.cards == 24


def test_no_cost_per_result_unless_asked():
    assert pricing.price("rtx-4090", 7, 2).cost is None


@pytest.mark.parametrize("lots", [0, -1, True, 1.5, "2"])
def test_lots_must_be_a_positive_integer(lots):
    with pytest.raises(pricing.PricingError, match="lots must be a whole number of at least 1"):
        pricing.package_budget(entry(Decimal("1")), lots)


@given(
    price=st.decimals(min_value=0, max_value=10**7, places=2, allow_nan=False, allow_infinity=False),
    lots=st.integers(min_value=1, max_value=10_000),
    cards=st.integers(min_value=1, max_value=16),
)
def test_budget_is_price_times_lots_exactly(price, lots, cards):
    budget = pricing.package_budget(entry(price, cards=cards), lots)
    assert budget.total == price * lots
    assert budget.total == pricing.package_budget(entry(price, cards=1), lots).total
    assert budget.cards == cards * lots
    text = pricing.format_amount(budget.total)
    assert "," not in text and len(text.split(".")[1]) == 2
    assert Decimal(text) == budget.total


# ------------------------------------------------------------------------------- cost per result (K4)


def test_cost_per_result_divides_the_package_total():
    cost = pricing.cost_per_result(Decimal("220.00"), 2, "USD")
    assert cost.per_result == Decimal("110.00")
    assert cost.describe() == "110.00 USD (220.00 USD / 2 accepted results)"
    assert pricing.cost_per_result(Decimal("220.00"), 3, "USD").per_result == Decimal("73.33")


def test_zero_accepted_results_is_undefined_never_zero_or_infinite():
    cost = pricing.cost_per_result(Decimal("220.00"), 0, "USD")
    assert cost.per_result is None and not cost.defined
    assert cost.describe() == "undefined: 0 accepted results; the committed spend of 220.00 USD remains"
    assert cost.to_dict()["per_result"] is None
    assert cost.total == Decimal("220.00")


@pytest.mark.parametrize("count", [-1, 2.5, True, "3"])
def test_accepted_results_must_be_a_whole_number(count):
    with pytest.raises(pricing.PricingError, match="accepted results must be a whole number of 0 or more"):
        pricing.cost_per_result(Decimal("220.00"), count, "USD")


@given(
    total=st.decimals(min_value=0, max_value=10**8, places=2, allow_nan=False, allow_infinity=False),
    accepted=st.integers(min_value=1, max_value=100_000),
)
def test_cost_per_result_times_n_reproduces_the_total_within_cent_rounding(total, accepted):
    per = pricing.cost_per_result(total, accepted, "USD").per_result
    assert per is not None and per == per.quantize(Decimal("0.01"))
    assert abs(per * accepted - total) <= Decimal("0.005") * accepted


def test_full_package_price_however_short_the_use():
    # A one-hour use of a 7-day package costs the package: nothing in the API prorates by hours.
    quote = pricing.price("rtx-4090", 7, 1, accepted_results=1)
    assert quote.cost is not None and quote.cost.per_result == Decimal("110.00")


# ---------------------------------------------------------------------------- unique results (K6)


def test_five_passes_of_one_corpus_are_one_result():
    passes = [("sha256:aaa", True)] * 5
    assert pricing.count_accepted_results(passes) == 1


def test_only_accepted_fingerprints_count_once_each():
    passes = [("a", True), ("a", False), ("b", False), ("c", True), ("c", True), ("d", False)]
    assert pricing.accepted_fingerprints(passes) == frozenset({"a", "c"})
    assert pricing.count_accepted_results(passes) == 2
    assert pricing.count_accepted_results([]) == 0


@pytest.mark.parametrize(
    "bad,message",
    [
        ([("", True)], "pass 1: corpus fingerprint '' is empty or not text"),
        ([("a", True), ("b", "yes")], "pass 2: accepted flag 'yes' is not True or False"),
        ([("a",)], "pass 1: expected (fingerprint, accepted), got ('a',)"),
    ],
)
def test_bad_pass_records_are_refused(bad, message):
    with pytest.raises(pricing.PricingError) as err:
        pricing.count_accepted_results(bad)
    assert str(err.value) == message


@given(st.lists(st.tuples(st.sampled_from(["f1", "f2", "f3", "f4"]), st.booleans())))
def test_count_equals_distinct_accepted_fingerprints(passes):
    count = pricing.count_accepted_results(passes)
    assert count == len({f for f, ok in passes if ok})
    assert count == pricing.count_accepted_results(passes + passes)


# ---------------------------------------------------------------------------------- expenses (K5)


def test_expense_needs_a_justification():
    with pytest.raises(pricing.PricingError) as err:
        pricing.Expense("storage", Decimal("12.00"), "USD", "  ")
    assert str(err.value) == "expense 'storage' has no justification"
    assert err.value.hint == "say why the project needs it; an unjustified expense is not recorded"


@pytest.mark.parametrize("amount", ["-1", "abc", "NaN"])
def test_expense_amount_is_a_number_of_zero_or_more(amount):
    with pytest.raises(pricing.PricingError, match="expense 'egress'"):
        pricing.Expense("egress", amount, "USD", "copy outputs home")


def test_expenses_stay_apart_from_each_variants_package_cost():
    b1 = pricing.price("rtx-4090", 7, 1).budget
    b8 = pricing.price("rtx-4090", 7, 2).budget
    storage = pricing.Expense("storage", Decimal("30.00"), "USD", "keep the evidence bundle for a year")
    sheet = pricing.cost_sheet([("batch-1", b1, 1), ("batch-8", b8, 0)], [storage])
    assert [v.budget.total for v in sheet.variants] == [Decimal("110.00"), Decimal("220.00")]
    assert sheet.variants[0].cost.per_result == Decimal("110.00")
    assert sheet.variants[1].cost.per_result is None
    assert sheet.expenses_total == Decimal("30.00")
    data = sheet.to_dict()
    assert data["expenses"] == [
        {"name": "storage", "amount": "30.00", "currency": "USD", "justification": "keep the evidence bundle for a year",
         "applies_to": "all", "differs_because": None}
    ]
    assert data["variants"][0]["budget"]["total"] == "110.00"


def test_cost_sheet_refuses_mixed_currencies_and_repeated_variants():
    b = pricing.price("rtx-4090", 7, 1).budget
    with pytest.raises(pricing.PricingError, match="mixes currencies EUR, USD"):
        pricing.cost_sheet([("v", b, 1)], [pricing.Expense("x", Decimal("1"), "EUR", "why")])
    with pytest.raises(pricing.PricingError, match="variant 'v' appears twice"):
        pricing.cost_sheet([("v", b, 1), ("v", b, 2)])


# ----------------------------------------------------------------------------------------- CLI


def test_cli_price_prints_the_same_lines_as_the_kit(capsys):
    assert main(["price", "--gpu", "rtx-4090", "--days", "7", "--lots", "2", "--accepted-results", "0"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == pricing.render_price(pricing.price("rtx-4090", 7, 2, 0))
    assert "package price: 220.00 USD for 2 GPUs (2 lots x 110.00 USD)" in out
    assert "undefined: 0 accepted results; the committed spend of 220.00 USD remains" in out


def test_cli_price_json(capsys):
    assert main(["price", "--gpu", "b200", "--days", "7", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["budget"]["total"] == "2071.00" and data["budget"]["cards"] == 2
    assert data["cost_per_result"] is None


@pytest.mark.parametrize(
    "argv,lines",
    [
        (
            ["--gpu", "h100", "--days", "7"],
            [
                "Error: unknown GPU 'h100' in catalog tarifs-forfaits.csv; known GPUs: b200, rtx-4090",
                "Hint: pass one of the known GPU ids, or --catalog with your own price list",
            ],
        ),
        (
            ["--gpu", "b200", "--days", "30"],
            [
                "Error: no 30-day package for 'b200' in catalog tarifs-forfaits.csv; available days: 7",
                "Hint: prices that are not in the catalog are never invented",
            ],
        ),
        (["--gpu", "b200", "--days", "7", "--lots", "0"], ["Error: --lots must be a whole number of at least 1, got '0'", "Hint: see --help"]),
        (
            ["--gpu", "b200", "--days", "7", "--accepted-results", "1.5"],
            ["Error: --accepted-results must be a whole number of at least 0, got '1.5'", "Hint: see --help"],
        ),
    ],
)
def test_cli_price_errors(argv, lines, capsys):
    assert main(["price", *argv]) == 2
    assert capsys.readouterr().err.splitlines() == lines


def test_cli_price_with_a_malformed_catalog(tmp_path, capsys):
    path = tmp_path / "tarifs.csv"
    path.write_text(
        ",".join(COLUMNS) + "\n1,2026-09-24,b200,NVIDIA B200,2,7,-5,USD\n",
        encoding="utf-8",
    )
    assert main(["price", "--gpu", "b200", "--days", "7", "--catalog", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"Error: {path} line 2, field price_per_lot: '-5' is negative",
        "Hint: a price per lot is 0 or more",
    ]


def test_cli_price_has_help(capsys):
    assert main(["price", "--help"]) == 0
    assert "cost per verified result" in capsys.readouterr().out
