"""Error mining: one category per error with evidence, confident learning, queue, overrides."""

import csv
import json
import re
from pathlib import Path

import polars as pl
import pytest
from prediction_rows import CATALOGUE, NO_TOOL, prediction_row, predictions_frame

import tasks.mine
from tests.code.test_context import REPLY, loaded_rows, scenario
from toolgrpo.common.wording import keyword_hits, keyword_patterns
from toolgrpo.data import DATA_DIR
from toolgrpo.evaluation.predict import sample_source
from toolgrpo.flows import cli
from toolgrpo.mining.categorise import Category, categorise
from toolgrpo.mining.confident import overlapping_tool_pairs, ranked_label_issues
from toolgrpo.mining.evidence import request_template
from toolgrpo.mining.folds import fold_config, scenario_folds
from toolgrpo.mining.miner import mine_errors
from toolgrpo.mining.review import ReviewError, overrides_from_review
from toolgrpo.schemas.label_overrides import LabelOverride
from toolgrpo.tasks.load import load_samples
from toolgrpo.tasks.mine import mine, write_label_overrides
from toolgrpo.training.config_overrides import load_preset

PATTERNS = keyword_patterns(CATALOGUE)


def _categories(rows, audit_rows=()):
    frames = {"eval": predictions_frame(rows)}
    if audit_rows:
        frames["train"] = predictions_frame(list(audit_rows))
    return {f.id: f.category for f in categorise(frames, CATALOGUE)}


# --- evidence ------------------------------------------------------------------------------


def test_keywords_match_words_in_both_languages_and_split_phrasal_verbs():
    assert keyword_hits("Take 100 rupees out of ACC925", PATTERNS) == {
        "withdraw": ["Take 100 rupees out"]
    }
    assert keyword_hits("从 ACC612 取 2530元", PATTERNS) == {"withdraw": ["取"]}
    assert keyword_hits("Show my recent activity", PATTERNS) == {
        "get_transactions": ["recent activity"]
    }


def test_near_identical_requests_share_a_template_whatever_the_slot_values():
    def same(first: str, second: str) -> bool:
        return request_template(first, CATALOGUE) == request_template(second, CATALOGUE)

    assert same("Withdraw 50 rupees from ACC002.", "Withdraw 100,000 from ACC917.")
    assert same("从 ACC612 取 2530元", "从 ACC001 取 43万")
    assert same("Buy 10 AAPL", "Buy 7 V")
    # the catalogue's phrases that name no tool are slot values too
    assert same("Pay 50 into my savings account", "Pay 9 into my checking account")


def test_amounts_stay_in_the_template_once_steps_have_run():
    """After a balance check the request's amount decides the next step, so it is kept."""
    history = "\n\nPrevious steps:\nStep 1: check_balance → balance 50,000"
    assert request_template(
        "If ACC001 has enough, withdraw 75,000" + history, CATALOGUE
    ) != request_template("If ACC001 has enough, withdraw 40,000" + history, CATALOGUE)


# --- one category per error ----------------------------------------------------------------


def test_unparseable_output_is_a_format_error():
    assert _categories([prediction_row("r", "check_balance", NO_TOOL)]) == {
        "r": Category.FORMAT_ERROR
    }


def test_params_the_tool_rejects_are_a_format_error_even_with_the_right_tool():
    row = prediction_row("r", "check_balance", params_valid=False, params_exact=False)
    assert _categories([row]) == {"r": Category.FORMAT_ERROR}


def test_a_wrong_tool_on_a_sound_label_is_a_model_error():
    row = prediction_row(
        "r", "check_balance", "transfer_funds", prompt="What is the balance of ACC001?"
    )
    assert _categories([row]) == {"r": Category.MODEL_ERROR}


def test_right_answers_with_sound_labels_are_not_listed():
    assert _categories([prediction_row("r", "get_quote", prompt="Price of AAPL?")]) == {}


def test_withdraw_wording_labelled_check_balance_is_label_ambiguity_not_a_model_error():
    rows = [
        prediction_row(
            "case", "check_balance", "withdraw", prompt="Withdraw 50 rupees from ACC002"
        ),
        prediction_row("genuine", "withdraw", prompt="Withdraw 300 rupees from ACC005"),
    ]
    assert _categories(rows) == {"case": Category.LABEL_AMBIGUITY}


def test_training_audit_flags_an_ambiguous_label_the_model_has_memorised():
    eval_rows = [prediction_row("e", "withdraw", prompt="Withdraw 300 from ACC005")]
    audit_rows = [
        prediction_row("t", "check_balance", prompt="Withdraw 80 from ACC003", source="train/x")
    ]
    assert _categories(eval_rows, audit_rows) == {"t": Category.LABEL_AMBIGUITY}


def test_confident_prediction_backed_by_wording_is_label_ambiguity_without_neighbours():
    row = prediction_row(
        "r", "check_balance", "withdraw", prompt="Cash out 200 from ACC007", confidence=0.95
    )
    assert _categories([row]) == {"r": Category.LABEL_AMBIGUITY}


def test_unsure_prediction_without_neighbours_stays_a_model_error():
    row = prediction_row(
        "r", "check_balance", "withdraw", prompt="Cash out 200 from ACC007", confidence=0.5
    )
    assert _categories([row]) == {"r": Category.MODEL_ERROR}


def test_confidence_does_not_overrule_a_wording_the_data_labels_consistently():
    rows = [
        prediction_row(
            "r", "get_quote", "check_balance", prompt="JD 现在多少钱？", confidence=0.99
        ),
        prediction_row("same", "get_quote", prompt="AMD 现在多少钱？"),
    ]
    assert _categories(rows) == {"r": Category.MODEL_ERROR}


def test_multi_step_rows_are_never_ambiguous_by_wording():
    """The case study's failure — the request says transfer, step 1 is check_balance — is the
    model's error: a multi-step request names every step's tool."""
    row = prediction_row(
        "r",
        "check_balance",
        "transfer_funds",
        prompt="If ACC001 has 100k, transfer it to ACC002",
        kind="multi",
        confidence=0.99,
    )
    assert _categories([row]) == {"r": Category.MODEL_ERROR}


def test_identical_requests_with_different_labels_are_a_label_conflict():
    rows = [
        prediction_row("a", "get_transactions", prompt="What did I spend on ACC001?"),
        prediction_row("b", "check_balance", prompt="what did I  spend on ACC001?"),
    ]
    assert _categories(rows) == {"a": Category.LABEL_CONFLICT, "b": Category.LABEL_CONFLICT}


def test_near_identical_requests_whose_wording_favours_neither_label_conflict():
    rows = [
        prediction_row("a", "deposit", prompt="Do the usual with 50 on ACC001"),
        prediction_row("b", "withdraw", prompt="Do the usual with 70 on ACC002"),
    ]
    assert _categories(rows) == {"a": Category.LABEL_CONFLICT, "b": Category.LABEL_CONFLICT}


def test_condition_branches_with_different_amounts_do_not_conflict():
    history = "\n\nPrevious steps:\nStep 1: check_balance → balance 50,000"
    rows = [
        prediction_row(
            "short",
            "respond",
            prompt="If ACC001 has enough, withdraw 75,000" + history,
            kind="multi",
            step=2,
        ),
        prediction_row(
            "enough",
            "withdraw",
            prompt="If ACC002 has enough, withdraw 40,000" + history,
            kind="multi",
            step=2,
        ),
    ]
    assert _categories(rows) == {}


def test_a_label_its_context_contradicts_is_a_label_inconsistency_with_the_rules_evidence(
    tmp_path,
):
    """The figures say the transfer can go ahead; the label replies (a misread balance)."""
    labels = loaded_rows(tmp_path, *scenario("balance 1,000,000", REPLY))
    rows = [
        prediction_row(
            r["id"], r["tool"], prompt=r["prompt"], kind="multi", step=r["step"], scenario_id="s"
        )
        for r in labels.iter_rows(named=True)
    ]
    report = mine_errors(predictions_frame(rows), catalogue=CATALOGUE, labels=labels)

    (finding,) = report.findings
    assert (finding.id, finding.category) == ("s-2", Category.LABEL_INCONSISTENCY)
    assert finding.evidence.startswith(
        "branch_matches_figures: the check_balance budget 1,000,000 covers"
    )
    assert report.inconsistency_ids == ["s-2"]
    assert report.accuracy.n_flagged == 1


def test_a_contradicted_label_is_no_evidence_against_its_near_identical_neighbours(tmp_path):
    """Step 1 of scenario s is labelled with its goal (its history says check_balance); the same
    request's step 1 in scenario t is sound and must not become a label conflict."""
    first, second = scenario()
    goal_first = {**first, "tool": second["tool"], "solution": second["solution"]}
    sound = {**first, "id": "t-1", "scenario_id": "t"}
    labels = loaded_rows(tmp_path, goal_first, second, sound)
    rows = [
        prediction_row(r["id"], r["tool"], prompt=r["prompt"], kind="multi", step=r["step"])
        for r in labels.iter_rows(named=True)
    ]
    report = mine_errors(predictions_frame(rows), catalogue=CATALOGUE, labels=labels)

    assert {f.id: f.category for f in report.findings} == {"s-1": Category.LABEL_INCONSISTENCY}


# --- confident learning, report, queue -----------------------------------------------------


def _confused_frame() -> pl.DataFrame:
    """Balanced labels; two check_balance rows look like withdraw to the model."""
    rows = [
        prediction_row(f"{tool}-{i}", tool, confidence=0.9)
        for tool in CATALOGUE.names
        for i in range(4)
    ]
    rows += [
        prediction_row("odd-1", "check_balance", "withdraw", confidence=0.97),
        prediction_row("odd-2", "check_balance", "withdraw", confidence=0.95),
    ]
    return predictions_frame(rows)


def test_cleanlab_ranks_the_most_confidently_contradicted_labels_first():
    assert ranked_label_issues(_confused_frame(), CATALOGUE)[:2] == ["odd-1", "odd-2"]


def test_withdraw_and_check_balance_lead_the_overlapping_tool_pairs():
    top = overlapping_tool_pairs(_confused_frame(), CATALOGUE)[0]
    assert {top.tool_a, top.tool_b} == {"withdraw", "check_balance"}
    assert top.n_overlapping == 2


def _memorised(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` as a model that learned every label, the wrong ones too, would score it."""
    return predictions_frame(
        [
            prediction_row(r["id"], r["label_tool"], source="train/x", confidence=0.9)
            for r in frame.iter_rows(named=True)
        ]
    )


def test_confident_learning_reads_the_training_rows_out_of_sample_probabilities():
    """The in-sample audit agrees with two memorised wrong labels; the fold models do not."""
    held_out = _confused_frame()
    eval_rows = predictions_frame([prediction_row("e", "withdraw", prompt="Withdraw 3")])
    in_sample = mine_errors(eval_rows, _memorised(held_out), CATALOGUE)
    cross_fitted = mine_errors(eval_rows, _memorised(held_out), CATALOGUE, held_out)

    assert not {"odd-1", "odd-2"} & set(in_sample.label_issues["train"])
    assert cross_fitted.label_issues["train"][:2] == ["odd-1", "odd-2"]
    assert cross_fitted.label_issues_out_of_sample and not in_sample.label_issues_out_of_sample
    top = cross_fitted.overlapping_pairs[0]
    assert {top.tool_a, top.tool_b} == {"withdraw", "check_balance"}


def test_cross_fitted_predictions_stand_in_for_a_missing_training_audit():
    report = mine_errors(_confused_frame()[:1], None, CATALOGUE, _confused_frame())
    assert "train" in report.label_issues
    assert {f.split for f in report.findings} == {"train"}


def test_accuracy_is_reported_with_and_without_flagged_rows():
    rows = [
        prediction_row("case", "check_balance", "withdraw", prompt="Withdraw 50 from ACC002"),
        prediction_row("genuine", "withdraw", prompt="Withdraw 300 from ACC005"),
        prediction_row("miss", "deposit", "withdraw", prompt="Deposit 5 into ACC001"),
        prediction_row("ok", "get_quote", prompt="Price of AAPL?"),
    ]
    accuracy = mine_errors(predictions_frame(rows), catalogue=CATALOGUE).accuracy

    assert (accuracy.accuracy, accuracy.n_flagged) == (0.5, 1)
    assert accuracy.accuracy_without_flagged == pytest.approx(2 / 3)


def test_training_audit_is_reported_as_its_own_split():
    eval_rows = [prediction_row("e", "withdraw", prompt="Withdraw 300 from ACC005")]
    audit_rows = [
        prediction_row("t", "check_balance", prompt="Withdraw 80 from ACC003", source="train/x"),
        prediction_row(
            "u", "deposit", "withdraw", prompt="Deposit 8 into ACC003", source="train/x"
        ),
    ]
    report = mine_errors(predictions_frame(eval_rows), predictions_frame(audit_rows), CATALOGUE)

    assert report.counts == {"train": {"label ambiguity": 1, "model error": 1}}
    assert set(report.label_issues) == {"eval", "train"}
    assert (report.accuracy.n_rows, report.accuracy.n_flagged) == (1, 0)


def test_review_queue_is_written_as_csv_and_jsonl_most_severe_first(tmp_path):
    rows = [
        prediction_row("model", "check_balance", "transfer_funds", prompt="Balance of ACC001?"),
        prediction_row("format", "check_balance", NO_TOOL, prompt="Balance of ACC002?"),
        prediction_row("ambiguous", "check_balance", "withdraw", prompt="Withdraw 5 from ACC003"),
        prediction_row("genuine", "withdraw", prompt="Withdraw 9 from ACC004"),
    ]
    report = mine.fn(predictions_frame(rows), None, tmp_path)

    with (tmp_path / "review_queue.csv").open(encoding="utf-8") as handle:
        queue = list(csv.DictReader(handle))
    assert [r["id"] for r in queue] == ["ambiguous", "format", "model"]
    assert {"id", "prompt", "label", "prediction", "category", "evidence", "score"} <= set(queue[0])
    assert "words for withdraw: 'Withdraw'" in queue[0]["evidence"]
    jsonl = [
        json.loads(line) for line in (tmp_path / "review_queue.jsonl").read_text().splitlines()
    ]
    assert [r["category"] for r in jsonl] == ["label ambiguity", "format error", "model error"]
    assert json.loads((tmp_path / "findings.json").read_text())["ambiguity_ids"] == ["ambiguous"]
    assert report.counts == {"eval": {"label ambiguity": 1, "format error": 1, "model error": 1}}
    assert "## Review queue" in (tmp_path / "findings.md").read_text()


def test_no_mining_code_reads_the_planted_answer_key():
    assert "planted" not in Path(tasks.mine.__file__).read_text(encoding="utf-8")


# --- cross-fitted audit folds -----------------------------------------------------------------


def test_folds_split_scenarios_disjointly_and_deal_each_kind_evenly():
    scenarios = [(f"s{i}", "single") for i in range(10)] + [(f"m{i}", "multi") for i in range(5)]
    folds = scenario_folds([*scenarios, ("m0", "multi")], 3, seed=0)  # a scenario's second row

    assert sorted(set().union(*folds)) == sorted(s for s, _ in scenarios)
    assert sum(len(fold) for fold in folds) == 15
    for kind in ("s", "m"):
        sizes = [sum(s.startswith(kind) for s in fold) for fold in folds]
        assert max(sizes) - min(sizes) <= 1
    assert scenario_folds(scenarios, 3, seed=0) == folds
    assert scenario_folds(scenarios, 3, seed=1) != folds


def test_a_cross_fitted_audit_needs_two_folds():
    with pytest.raises(ValueError, match="at least 2 folds"):
        scenario_folds([("s", "single")], 1, seed=0)


def test_fold_model_is_the_runs_sft_recipe_on_the_fold_files(tmp_path):
    cpu = load_preset("cpu")
    fold = fold_config(cpu, tmp_path / "s.jsonl", tmp_path / "m.jsonl")

    assert (fold.data.train_single_step, fold.data.train_multistep) == (
        tmp_path / "s.jsonl",
        tmp_path / "m.jsonl",
    )
    assert (fold.model, fold.sft, fold.seed) == (cpu.model, cpu.sft, cpu.seed)


def test_run_command_passes_audit_folds_to_the_flow_and_rejects_a_negative_count(tmp_path, capsys):
    assert cli.run(audit_folds=-1, out=tmp_path / "runs") == 2
    assert "audit_folds" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


# --- the miner against the shipped data's planted ambiguity ---------------------------------


def _shipped_predictions(split: str, predict) -> pl.DataFrame:
    """A predictions frame of the shipped `split` files for a stand-in model `predict(row)`."""
    rows = []
    for path in sorted((DATA_DIR / split).glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            sample = json.loads(line)
            row = prediction_row(
                sample["id"],
                sample["tool"],
                predict(sample),
                prompt=sample["prompt"],
                confidence=0.95,
                source=sample_source(path),
            )
            rows.append(
                row | {k: sample[k] for k in ("scenario_id", "kind", "lang", "step", "n_steps")}
            )
    return predictions_frame(rows)


def _memoriser(sample):
    return sample["tool"]


def _wording_follower(sample):
    """Predicts the one tool a single-step request's keywords name (an over-generaliser)."""
    hits = keyword_hits(sample["prompt"], PATTERNS)
    return next(iter(hits)) if sample["kind"] == "single" and len(hits) == 1 else sample["tool"]


@pytest.mark.parametrize("model", [_memoriser, _wording_follower])
def test_miner_flags_the_planted_rows_as_label_ambiguity(model):
    planted = set(json.loads((DATA_DIR / "planted_ambiguity.json").read_text())["ids"])
    report = mine_errors(
        _shipped_predictions("eval", model), _shipped_predictions("train", model), CATALOGUE
    )

    flagged = set(report.ambiguity_ids)
    assert len(flagged & planted) / len(planted) >= 0.9  # recall
    assert len(flagged & planted) / len(flagged) >= 0.8  # precision


def test_withdraw_and_check_balance_lead_the_overlapping_pairs_of_the_shipped_data():
    """A model that follows the wording confuses only what the data itself blurs."""
    frames = [_shipped_predictions(split, _wording_follower) for split in ("eval", "train")]
    top = overlapping_tool_pairs(pl.concat(frames), CATALOGUE)[0]
    assert {top.tool_a, top.tool_b} == {"withdraw", "check_balance"}


# --- reviewed decisions → overrides ----------------------------------------------------------


def _reviewed_queue(tmp_path, decisions: dict[str, str]) -> Path:
    """The review queue of three errors, with an annotator's `decisions` (id → decision)."""
    withdraw_50 = {"account": "ACC002", "amount": 50}
    rows = [
        prediction_row(
            "case",
            "check_balance",
            "withdraw",
            prompt="Withdraw 50 from ACC002",
            params=withdraw_50,
        ),
        prediction_row("genuine", "withdraw", prompt="Withdraw 300 from ACC005"),
        prediction_row(
            "miss", "deposit", "withdraw", prompt="Deposit 5 into ACC001", params=withdraw_50
        ),
    ]
    mine.fn(predictions_frame(rows), None, tmp_path)
    path = tmp_path / "review_queue.csv"
    with path.open(encoding="utf-8", newline="") as handle:
        queue = list(csv.DictReader(handle))
    for row in queue:
        if row["id"] in decisions:
            row.update(decision=decisions[row["id"]], reviewer="ana", reason="reviewed")
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(queue[0]))
        writer.writeheader()
        writer.writerows(queue)
    return path


def review(path: Path) -> list[LabelOverride]:
    """The overrides of a reviewed queue whose rows are in no data file (checked on their own)."""
    no_rows = load_samples.fn([]).frame
    return overrides_from_review(path, no_rows, CATALOGUE, allow_unknown=True)


def test_reviewed_queue_becomes_label_overrides_with_the_models_answer(tmp_path):
    overrides = review(_reviewed_queue(tmp_path, {"case": "withdraw"}))

    assert [(o.id, o.tool, o.reviewer) for o in overrides] == [("case", "withdraw", "ana")]
    action = json.loads(overrides[0].solution)["action"]
    assert action == {"tool": "withdraw", "params": {"account": "ACC002", "amount": 50}}


def test_keep_decision_records_the_label_without_a_solution(tmp_path):
    overrides = review(_reviewed_queue(tmp_path, {"miss": "keep"}))
    assert [(o.id, o.tool, o.solution) for o in overrides] == [("miss", "deposit", None)]


def test_relabel_to_a_tool_the_model_did_not_answer_leaves_the_solution_to_the_loader(tmp_path):
    overrides = review(_reviewed_queue(tmp_path, {"miss": "respond"}))
    assert [(o.id, o.tool, o.solution) for o in overrides] == [("miss", "respond", None)]


def test_edited_solution_with_invalid_params_names_file_line_and_id(tmp_path):
    path = _reviewed_queue(tmp_path, {"case": "withdraw"})
    text = path.read_text(encoding="utf-8").replace('""amount"": 50', '""amount"": -50')
    path.write_text(text, encoding="utf-8")
    with pytest.raises(
        ReviewError, match=re.escape(f"{path}:") + r"\d+: id case: proposed_solution"
    ):
        review(path)


def test_unknown_decision_is_rejected(tmp_path):
    path = _reviewed_queue(tmp_path, {"miss": "launch_rocket"})
    with pytest.raises(
        ReviewError, match=re.escape("decision 'launch_rocket' is not a tool of data/tools.json")
    ):
        review(path)


def test_unreviewed_rows_give_no_overrides(tmp_path):
    assert review(_reviewed_queue(tmp_path, {})) == []


def test_overrides_file_keeps_one_line_per_id_latest_decision_winning(tmp_path):
    path = tmp_path / "label_overrides.jsonl"
    first = LabelOverride(id="a", tool="withdraw", reason="r1", reviewer="ana")
    write_label_overrides(
        [first, LabelOverride(id="b", tool="deposit", reason="r", reviewer="bo")], path
    )
    write_label_overrides(
        [LabelOverride(id="a", tool="check_balance", reason="r2", reviewer="cy")], path
    )

    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert lines == [
        {"id": "a", "tool": "check_balance", "reason": "r2", "reviewer": "cy"},
        {"id": "b", "tool": "deposit", "reason": "r", "reviewer": "bo"},
    ]


def test_decision_without_a_reviewer_is_rejected(tmp_path):
    path = _reviewed_queue(tmp_path, {"miss": "keep"})
    path.write_text(path.read_text(encoding="utf-8").replace(",ana,", ",,"), encoding="utf-8")
    with pytest.raises(ReviewError, match="id miss: a decision needs a reviewer"):
        review(path)


def test_written_overrides_are_applied_by_the_loader(tmp_path):
    sample = json.loads((DATA_DIR / "train" / "single_step.jsonl").read_text().splitlines()[0])
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(sample, ensure_ascii=False) + "\n", encoding="utf-8")
    solution = {
        "thought": "t",
        "action": {"tool": "respond", "params": {"message": "m"}},
        "plan": [],
    }
    override = LabelOverride(
        id=sample["id"], tool="respond", solution=json.dumps(solution), reason="r", reviewer="ana"
    )

    loaded = load_samples.fn([data], write_label_overrides([override], tmp_path / "o.jsonl"))

    assert loaded.problems == []
    assert loaded.frame["tool"].to_list() == ["respond"]


def test_apply_review_command_merges_decisions_into_the_overrides_file(tmp_path):
    reviewed = _reviewed_queue(tmp_path, {"case": "withdraw", "miss": "keep"})
    overrides = tmp_path / "label_overrides.jsonl"

    assert cli.apply_review(reviewed, overrides=overrides, allow_unknown=True) == 0
    assert [json.loads(line)["id"] for line in overrides.read_text().splitlines()] == [
        "case",
        "miss",
    ]
    assert cli.apply_review(tmp_path / "nope.csv", overrides=overrides) == 2
