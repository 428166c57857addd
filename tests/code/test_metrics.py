"""Evaluation metrics computed from hand-made predictions frames."""

import json

import pytest
from prediction_rows import CATALOGUE, NO_TOOL, prediction_row, predictions_frame

from bench.domains import smart_home
from toolgrpo.evaluation.metrics import UNPARSED, EvalMetrics, compute_metrics
from toolgrpo.reporting.evaluation import metrics_markdown, metrics_tables


def _slice(metrics: EvalMetrics, name: str, value: str):
    return next(s for s in metrics.slices if (s.slice, s.value) == (name, value))


@pytest.fixture
def mixed_predictions():
    """4 single rows (3 right), a 2-step scenario fully right, a 3-step scenario whose last
    step (condition fails → respond) is missed, and an unseen-phrasing row with broken output."""
    return predictions_frame(
        [
            prediction_row("s1", "check_balance"),
            prediction_row("s2", "withdraw", lang="zh"),
            prediction_row("s3", "get_quote", lang="zh"),
            prediction_row("s4", "withdraw", "check_balance"),
            prediction_row("a1", "check_balance", kind="multi", step=1, scenario_id="a"),
            prediction_row("a2", "transfer_funds", kind="multi", step=2, scenario_id="a"),
            prediction_row("b1", "check_balance", kind="multi", step=1, n_steps=3, scenario_id="b"),
            prediction_row("b2", "deposit", kind="multi", step=2, n_steps=3, scenario_id="b"),
            prediction_row(
                "b3", "respond", "transfer_funds", kind="multi", step=3, scenario_id="b"
            ),
            prediction_row("u1", "get_quote", NO_TOOL, source="eval/unseen_phrasing"),
        ]
    )


def test_headline_accuracy_by_kind_step_and_condition_fails_branch(mixed_predictions):
    accuracy = compute_metrics(mixed_predictions).accuracy

    assert accuracy.overall == pytest.approx(7 / 10)
    assert accuracy.single == pytest.approx(3 / 5)
    assert accuracy.multi == pytest.approx(4 / 5)
    assert accuracy.condition_fails == 0.0  # no `condition` labels: the multi-step reply
    assert accuracy.condition_holds is None  # ... and the holds branch cannot be told apart
    assert accuracy.by_step == {1: pytest.approx(5 / 7), 2: 1.0, 3: 0.0}
    sources = set(mixed_predictions["source"]) - {"eval/unseen_phrasing"}
    assert accuracy.by_source == {**dict.fromkeys(sources, 7 / 9), "eval/unseen_phrasing": 0.0}
    assert list(accuracy.rows())[-2:] == sorted(accuracy.by_source)


def test_condition_labels_report_both_branches():
    conditional = {"kind": "multi", "step": 2}
    frame = predictions_frame(
        [
            prediction_row("h1", "transfer_funds", condition="holds", **conditional),
            prediction_row("h2", "withdraw", "respond", condition="holds", **conditional),
            prediction_row("f1", "respond", condition="fails", **conditional),
            prediction_row("s1", "check_balance"),
        ]
    )
    metrics = compute_metrics(frame)

    assert (metrics.accuracy.condition_holds, metrics.accuracy.condition_fails) == (0.5, 1.0)
    assert _slice(metrics, "branch", "condition_holds").n == 2
    assert list(metrics.accuracy.rows())[3:5] == ["condition_fails", "condition_holds"]


def test_conditional_steps_are_reported_per_file_comparison_kind_and_branch():
    history = "Pay it if I can afford it\n\nPrevious steps:\n"
    balance = history + "Step 1: check_balance → balance 3,217"
    cost = balance + "\nStep 2: get_quote → PDD is at 562.54"
    price = history + "Step 1: get_quote → PDD is at 562.54"
    held_out = {"kind": "multi", "step": 2, "source": "eval/multistep"}
    holds, fails = held_out | {"condition": "holds"}, held_out | {"condition": "fails"}
    unseen = held_out | {"condition": "fails", "source": "eval/unseen_phrasing"}
    frame = predictions_frame(
        [
            prediction_row("a1", "transfer_funds", prompt=balance, **holds),
            prediction_row("a2", "withdraw", "respond", prompt=balance, **holds),
            prediction_row("a3", "respond", prompt=balance, **fails),
            prediction_row("o1", "respond", "place_order", prompt=cost, **fails),
            prediction_row("p1", "place_order", prompt=price, **holds),
            prediction_row("u1", "respond", prompt=balance, **unseen),
        ]
    )
    accuracy = compute_metrics(frame).accuracy

    assert accuracy.by_condition == {
        "eval/multistep · after check_balance · fails": 1.0,
        "eval/multistep · after check_balance · holds": 0.5,
        "eval/multistep · after check_balance and get_quote · fails": 0.0,
        "eval/multistep · after get_quote · holds": 1.0,
        "eval/unseen_phrasing · after check_balance · fails": 1.0,
    }
    assert accuracy.n["eval/multistep · after check_balance · holds"] == 2
    assert set(accuracy.by_condition) <= set(accuracy.rows())


def test_another_domains_conditional_steps_are_named_by_its_own_tools():
    """A catalogue that declares no `reports` has each conditional step named by the tool whose
    observation its condition reads: the latest step's."""
    history = "Turn on the heating if the bedroom is below 19 degrees\n\nPrevious steps:\n"
    sensor = history + "Step 1: read_sensor → bedroom 17.5 degrees"
    later = sensor + "\nStep 2: set_thermostat → bedroom set to 21"
    held_out = {"kind": "multi", "step": 2, "source": "eval/home", "condition": "holds"}
    frame = predictions_frame(
        [
            prediction_row("s1", "set_thermostat", prompt=sensor, **held_out),
            prediction_row("s2", "respond", "lock_door", prompt=later, **held_out | {"step": 3}),
            prediction_row("n1", "respond", prompt="Lock up if nobody is home", **held_out),
        ]
    )
    accuracy = compute_metrics(frame, smart_home.catalogue()).accuracy

    assert accuracy.by_condition == {
        "eval/home · holds": 1.0,
        "eval/home · after read_sensor · holds": 1.0,
        "eval/home · after set_thermostat · holds": 0.0,
    }


def test_scenario_accuracy_counts_a_scenario_only_when_every_step_is_right(mixed_predictions):
    assert compute_metrics(mixed_predictions).accuracy.scenario == pytest.approx(1 / 2)


def test_unseen_phrasing_file_is_reported_as_its_own_slice(mixed_predictions):
    metrics = compute_metrics(mixed_predictions)

    unseen = _slice(metrics, "source", "eval/unseen_phrasing")
    assert (unseen.n, unseen.accuracy, unseen.json_valid) == (1, 0.0, 0.0)
    assert _slice(metrics, "source", "eval/single_step").accuracy == pytest.approx(7 / 9)


def test_slices_by_tool_and_language_count_their_rows(mixed_predictions):
    metrics = compute_metrics(mixed_predictions)

    assert _slice(metrics, "label_tool", "withdraw").accuracy == 0.5
    assert _slice(metrics, "lang", "zh").n == 2
    assert _slice(metrics, "branch", "condition_fails").n == 1


def test_format_rates_read_the_row_checks():
    frame = predictions_frame(
        [
            prediction_row("ok", "check_balance"),
            prediction_row("bad-params", "check_balance", params_valid=False, params_exact=False),
            prediction_row("inconsistent", "check_balance", consistent=False),
            prediction_row("broken", "check_balance", NO_TOOL),
        ]
    )
    overall = _slice(compute_metrics(frame), "overall", "all")

    assert (overall.json_valid, overall.params_valid) == (0.75, 0.5)
    assert overall.params_exact == 0.5
    assert overall.consistent == pytest.approx(2 / 3)  # of the three parseable outputs


def test_empty_branch_is_reported_as_missing_not_zero():
    frame = predictions_frame([prediction_row("s1", "check_balance")])

    accuracy = compute_metrics(frame).accuracy
    assert accuracy.condition_fails is None and accuracy.multi is None


def test_confusion_matrix_counts_output_without_a_tool_as_none(mixed_predictions):
    confusion = compute_metrics(mixed_predictions).confusion

    assert confusion.labels == CATALOGUE.names
    assert confusion.count("get_quote", UNPARSED) == 1
    assert confusion.count("get_quote", "get_quote") == 1
    assert confusion.count("respond", "transfer_funds") == 1
    assert sum(map(sum, confusion.counts)) == len(mixed_predictions)


def test_unknown_predicted_tool_counts_as_none_in_confusion_matrix():
    frame = predictions_frame([prediction_row("x", "check_balance", "launch_rocket")])

    assert compute_metrics(frame).confusion.count("check_balance", UNPARSED) == 1


def test_metrics_round_trip_through_json(mixed_predictions):
    metrics = compute_metrics(mixed_predictions)

    assert EvalMetrics.model_validate(json.loads(metrics.model_dump_json())) == metrics


def test_markdown_shows_headline_slices_and_confusion_tables(mixed_predictions):
    metrics = compute_metrics(mixed_predictions)
    markdown = metrics_markdown(metrics)

    assert "| condition_fails | 1 | 0.0% |" in markdown  # n: the one conditional reply
    assert "| source | eval/unseen_phrasing | 1 |" in markdown
    assert "| label \\ predicted |" in markdown
    assert set(metrics_tables(metrics)) == {"accuracy", "slices", "confusion"}
