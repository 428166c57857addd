"""Evaluation: output checks that never raise, tool scoring, and a random tiny model end to end."""

import json
import re
from typing import get_args

import numpy as np
import polars as pl
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from prediction_rows import CATALOGUE, prediction_row, predictions_frame
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, LogFilter
from prefect.logging.handlers import APILogHandler
from transformers import GenerationConfig

from toolgrpo.data import DATA_DIR
from toolgrpo.evaluation.decoding import (
    CANONICAL_TOOL_SLOT,
    EvaluationError,
    action_slot_prefix,
    encode_prompts,
    ends_at_tool_slot,
    greedy_token_ids,
    load_trained_model,
    tool_candidate,
    tool_probabilities,
)
from toolgrpo.evaluation.metrics import compute_metrics
from toolgrpo.evaluation.predict import (
    EvalSettings,
    completion_checks,
    fitted_max_new_tokens,
    predict,
    sample_source,
)
from toolgrpo.flows import cli
from toolgrpo.mining.categorise import Category
from toolgrpo.mining.miner import mine_errors
from toolgrpo.schemas.predictions import PredictionsError, probability_columns, validate_predictions
from toolgrpo.tasks.evaluate import evaluate_model
from toolgrpo.training.config import FramePieces
from toolgrpo.training.model import FRAME_PIECES, build_tiny, train_tokenizer

SOLUTION = json.dumps(
    {
        "thought": "先查余额。",
        "action": {"tool": "check_balance", "params": {"account": "ACC001"}},
        "plan": ["查余额"],
    },
    ensure_ascii=False,
)
QUICK = EvalSettings(max_new_tokens=16, batch_size=4, score_batch_size=16, torch_threads=1)


def _shipped_rows(n_per_file: int) -> pl.DataFrame:
    frames = [
        pl.read_ndjson(path).head(n_per_file).with_columns(source=pl.lit(sample_source(path)))
        for path in sorted((DATA_DIR / "eval").glob("*.jsonl"))
    ]
    return pl.concat(frames, how="diagonal")  # only conditional steps have a `condition`


@pytest.fixture(scope="module")
def random_model_dir(tmp_path_factory):
    """A randomly initialised tiny model: its output is garbage, which is the point."""
    rows = _shipped_rows(20)
    tokenizer, model = build_tiny(
        [*rows["prompt"], *rows["solution"]], hidden_size=32, num_layers=1, vocab_size=400
    )
    path = tmp_path_factory.mktemp("random-model")
    tokenizer.save_pretrained(path)
    model.save_pretrained(path)
    return path


# --- reading the model's output -------------------------------------------------------------


def test_tool_slot_prefix_is_the_models_own_output_up_to_the_tool_name():
    completion = '{"thought": "first check", "action": {"tool":"withdraw", "params": {}}}'
    assert action_slot_prefix(completion) == '{"thought": "first check", "action": {"tool":"'


def test_tool_slot_prefix_falls_back_to_the_canonical_one_carrying_the_thought():
    completion = '{"thought": "先查余额", "action": "none"}'
    assert action_slot_prefix(completion) == '{"thought": "先查余额", "action": {"tool": "'


def test_tool_slot_prefix_of_garbage_has_an_empty_thought():
    assert action_slot_prefix("\n\n\x00 ]]") == '{"thought": "", "action": {"tool": "'


def test_right_answer_passes_every_check():
    assert completion_checks(SOLUTION, SOLUTION, CATALOGUE) == {
        "predicted_tool": "check_balance",
        "parsed_ok": True,
        "params_valid": True,
        "params_exact": True,
        "consistent": True,
    }


def test_right_tool_with_other_params_is_valid_but_not_exact():
    other = SOLUTION.replace("ACC001", "ACC002")
    checks = completion_checks(other, SOLUTION, CATALOGUE)
    assert (checks["params_valid"], checks["params_exact"]) == (True, False)


@pytest.mark.parametrize(
    "completion",
    [
        "",
        "[1, 2]",
        '{"action": "withdraw"}',
        '{"thought": 5, "action": {"tool": 7, "params": []}, "plan": "x"}',
        '{"thought": "x", "action": {"tool": "launch_rocket", "params": {}}, "plan": []}',
        '{"action": {"tool": "withdraw", "params": {"amount": -1}}}',
        "{" * 5000,
        '{"thought": "\\ud800", "action": {"tool": "withdraw"}}',
    ],
)
def test_malformed_output_gets_false_checks_not_an_exception(completion):
    checks = completion_checks(completion, SOLUTION, CATALOGUE)
    assert not (checks["parsed_ok"] and checks["params_valid"] and checks["params_exact"])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_checked_and_given_a_tool_slot_without_raising(completion):
    checks = completion_checks(completion, SOLUTION, CATALOGUE)
    assert checks["predicted_tool"] is None or isinstance(checks["predicted_tool"], str)
    assert re.search(r'"tool"\s*:\s*"$', action_slot_prefix(completion))


# --- the predictions contract ----------------------------------------------------------------


def test_predictions_contract_names_the_failing_rows_and_checks():
    frame = predictions_frame(
        [prediction_row("a", "withdraw"), prediction_row("a", "withdraw", step=3, n_steps=2)]
    )
    with pytest.raises(PredictionsError) as error:
        validate_predictions(frame, CATALOGUE)
    assert "column id [check: field_uniqueness]" in str(error.value)
    assert "row 1: [check: step_within_scenario]" in str(error.value)


def test_predictions_contract_needs_one_probability_column_per_catalogue_tool():
    frame = predictions_frame([prediction_row("a", "withdraw")]).drop("p_respond")
    with pytest.raises(PredictionsError, match=r"missing \['p_respond'\]"):
        validate_predictions(frame, CATALOGUE)


def test_probabilities_must_sum_to_one():
    frame = predictions_frame([prediction_row("a", "withdraw")]).with_columns(p_respond=0.9)
    with pytest.raises(PredictionsError, match="probabilities_sum_to_one"):
        validate_predictions(frame, CATALOGUE)


# --- a random tiny model end to end ------------------------------------------------------------


def test_tool_probabilities_do_not_depend_on_batch_padding(random_model_dir):
    tokenizer, model = load_trained_model(random_model_dir)
    contexts = ["short", '{"thought": "a much longer context of many words", "action": {"tool": "']
    names = ["withdraw", "check_balance", "respond"]

    batched = tool_probabilities(tokenizer, model, contexts, names, batch_size=6)
    one_by_one = np.vstack(
        [tool_probabilities(tokenizer, model, [c], names, batch_size=1) for c in contexts]
    )
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)
    np.testing.assert_allclose(batched.sum(axis=1), 1.0)


@pytest.mark.parametrize("frame_tokens", get_args(FramePieces))
def test_a_tool_is_scored_by_the_tokens_an_answer_writes_it_with(frame_tokens):
    """The candidate is the name and the next token of a real answer, with every tokenizer:
    scoring `name"` alone would score a token the model never wrote after a name."""
    rows = _shipped_rows(20)
    whole = FRAME_PIECES[frame_tokens]
    tokenizer = train_tokenizer([*rows["prompt"], *rows["solution"]], whole_texts=whole)
    for solution in rows["solution"]:
        slot = solution.index(CANONICAL_TOOL_SLOT) + len(CANONICAL_TOOL_SLOT)
        name = solution[slot:].partition('"')[0]
        answer = tokenizer(solution, add_special_tokens=False)["input_ids"]
        candidate = tool_candidate(tokenizer, name)
        assert len(candidate) > len(tokenizer(name, add_special_tokens=False)["input_ids"])
        assert any(answer[i : i + len(candidate)] == candidate for i in range(len(answer)))


def test_tool_probabilities_equal_a_plain_forward_pass_over_each_candidate(random_model_dir):
    """The cached continuation scores what scoring each candidate from scratch does."""
    tokenizer, model = load_trained_model(random_model_dir)
    context = '{"thought": "先查余额", "action": {"tool": "'
    names = ["withdraw", "check_balance", "get_transactions"]

    def log_prob(name: str) -> float:
        prefix = tokenizer(context, add_special_tokens=False)["input_ids"]
        target = tool_candidate(tokenizer, name)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prefix + target])).logits[0]
        log_probs = torch.log_softmax(logits[len(prefix) - 1 : -1], -1)
        return float(log_probs[torch.arange(len(target)), target].sum())

    reference = np.exp([log_prob(name) for name in names])
    np.testing.assert_allclose(
        tool_probabilities(tokenizer, model, [context], names, batch_size=1)[0],
        reference / reference.sum(),
        atol=1e-5,
    )


def _generate_one_at_a_time(model, encoded, eos, max_new_tokens):
    """What `generate` writes for each prompt alone, up to (not with) its end token."""
    config = GenerationConfig(
        do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=0
    )
    outputs = []
    for ids in encoded:
        new = model.generate(input_ids=torch.tensor([ids]), generation_config=config)[0, len(ids) :]
        tokens = new.tolist()
        outputs.append(tokens[: tokens.index(eos)] if eos in tokens else tokens)
    return outputs


@pytest.fixture(scope="module")
def lively_model(random_model_dir):
    """The random tiny model with large weights (seeded): its greedy answers differ by prompt,
    where the small initial weights write one token forever."""
    tokenizer, model = load_trained_model(random_model_dir)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(0.3 * torch.randn(parameter.shape, generator=generator))
    encoded = encode_prompts(tokenizer, _shipped_rows(3)["prompt"].to_list())
    return model, encoded


def _varied_end_token(model, encoded) -> int:
    """The written token that, taken as the end token, ends the answers at the most different
    steps: finished rows then leave batches that go on decoding."""
    answers = greedy_token_ids(
        model, encoded, pad_token_id=0, eos_token_ids=set(), max_new_tokens=12, batch_size=4
    )

    def ends(token: int) -> int:
        return len({a.index(token) if token in a else len(a) for a in answers})

    return max(sorted({t for a in answers for t in a}), key=ends)


def test_batched_decoding_writes_what_generate_writes_one_prompt_at_a_time(lively_model):
    model, encoded = lively_model
    eos = _varied_end_token(model, encoded)

    batched = greedy_token_ids(
        model, encoded, pad_token_id=0, eos_token_ids={eos}, max_new_tokens=12, batch_size=4
    )

    assert batched == _generate_one_at_a_time(model, encoded, eos, 12)
    assert len({len(tokens) for tokens in batched}) > 2  # rows did end at different steps


def test_a_finished_row_costs_no_more_forward_passes(lively_model):
    model, encoded = lively_model
    eos, most = _varied_end_token(model, encoded), 12
    rows_per_forward: list[int] = []
    hook = model.register_forward_pre_hook(
        lambda _, args, kwargs: rows_per_forward.append(kwargs["input_ids"].shape[0]),
        with_kwargs=True,
    )
    try:
        outputs = greedy_token_ids(
            model,
            encoded,
            pad_token_id=0,
            eos_token_ids={eos},
            max_new_tokens=most,
            batch_size=len(encoded),
        )
    finally:
        hook.remove()

    # After the prefill, a row is computed once per token it still needs: each written token
    # but the first (the prefill's), plus its end token when it has one.
    needed = sum(len(tokens) if len(tokens) < most else most - 1 for tokens in outputs)
    assert sum(rows_per_forward[1:]) == needed
    assert rows_per_forward[-1] < rows_per_forward[0]


def test_the_tool_slot_stop_rule_fires_at_the_first_token_past_the_slot(random_model_dir):
    tokenizer, _ = load_trained_model(random_model_dir)
    ends = ends_at_tool_slot(tokenizer)
    answer = '{"thought": "先查余额", "action": {"tool": "withdraw", "params": {}}}'
    ids = tokenizer(answer, add_special_tokens=False)["input_ids"]

    first = next(n for n in range(1, len(ids) + 1) if ends(ids[:n]))

    assert '"tool": "' in tokenizer.decode(ids[:first])
    assert '"tool": "' not in tokenizer.decode(ids[: first - 1])


def test_max_new_tokens_fits_the_longest_solution_plus_a_quarter(random_model_dir):
    tokenizer, _ = load_trained_model(random_model_dir)
    solutions = [SOLUTION, SOLUTION.replace("查余额", "先查余额，再转账，然后告诉用户")]
    longest = len(tokenizer(solutions[1], add_special_tokens=False)["input_ids"]) + 1

    assert fitted_max_new_tokens(tokenizer, solutions) == -(-5 * longest // 4)


def test_scored_rows_have_the_most_probable_tool_and_no_format_checks(random_model_dir):
    samples = _shipped_rows(3)
    decoded = predict(random_model_dir, samples, QUICK)

    scored = predict(random_model_dir, samples, QUICK, mode="score")

    probabilities = scored.select(probability_columns(CATALOGUE)).to_numpy()
    assert scored["predicted_tool"].to_list() == [
        CATALOGUE.names[i] for i in probabilities.argmax(axis=1)
    ]
    # The random model never writes a tool slot: both modes score from the same contexts.
    np.testing.assert_allclose(
        probabilities, decoded.select(probability_columns(CATALOGUE)).to_numpy(), atol=1e-6
    )
    unmeasured = ["completion", "parsed_ok", "params_valid", "params_exact", "consistent"]
    assert all(scored[column].null_count() == scored.height for column in unmeasured)
    metrics = compute_metrics(scored)
    assert not metrics.answers_decoded and compute_metrics(decoded).answers_decoded
    overall = next(s for s in metrics.slices if s.slice == "overall")
    assert (overall.json_valid, overall.params_valid, overall.consistent) == (None, None, None)


def test_mining_never_calls_a_scored_row_a_format_error(random_model_dir):
    samples = _shipped_rows(3)
    decoded = predict(random_model_dir, samples, QUICK)
    scored = predict(random_model_dir, samples, QUICK, mode="score")
    assert not decoded["parsed_ok"].any()  # garbage output: format errors when decoded

    report = mine_errors(decoded.head(0), scored)

    assert Category.FORMAT_ERROR.value not in report.counts.get("train", {})
    assert all("JSON" not in finding.evidence for finding in report.findings)


def test_random_model_output_is_evaluated_without_crashing(random_model_dir):
    samples = _shipped_rows(3)

    predictions = predict(random_model_dir, samples, QUICK)

    assert predictions["id"].to_list() == samples["id"].to_list()
    assert predictions["label_tool"].to_list() == samples["tool"].to_list()
    assert predictions["condition"].to_list() == samples["condition"].to_list()
    sums = predictions.select(pl.sum_horizontal(probability_columns(CATALOGUE))).to_series()
    assert np.allclose(sums.to_numpy(), 1.0)


def test_evaluate_task_writes_predictions_and_metrics_and_shows_progress(
    prefect_harness, random_model_dir, tmp_path
):
    @flow
    def one_evaluation():
        rows = _shipped_rows(2)
        return evaluate_model(random_model_dir, rows, tmp_path, QUICK, label="evaluate sft · eval")

    state = one_evaluation(return_state=True)
    report = state.result()
    APILogHandler().flush()  # logs reach the API in batches

    with get_client(sync_client=True) as client:
        this_run = FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
        (task_run,) = client.read_task_runs(flow_run_filter=this_run)
        (progress,) = client.read_artifacts(flow_run_filter=this_run)
        logs = [
            log.message for log in client.read_logs(LogFilter(task_run_id={"any_": [task_run.id]}))
        ]
    assert task_run.name == "evaluate sft · eval"
    assert (progress.key, progress.type, progress.data) == (
        "evaluate-sft-eval-progress",
        "progress",
        100.0,
    )
    assert any(
        re.match(r"evaluate sft · eval row 6/6 · [\d.]+ s/row · ETA 0s$", line) for line in logs
    )
    assert any("| overall | 6 |" in line for line in logs)  # the accuracy table, with n
    assert pl.read_parquet(report.predictions_path).height == 6
    metrics = json.loads(report.metrics_path.read_text())
    assert metrics["n_rows"] == 6
    assert {s["value"] for s in metrics["slices"] if s["slice"] == "source"} == {
        "eval/multistep",
        "eval/single_step",
        "eval/unseen_phrasing",
    }
    assert "## Confusion matrix" in (tmp_path / "metrics.md").read_text()


def test_missing_model_directory_is_a_clear_error(tmp_path):
    with pytest.raises(EvaluationError, match="not a saved model"):
        predict(tmp_path, _shipped_rows(1), QUICK)


def test_samples_without_contract_columns_are_a_clear_error(random_model_dir):
    with pytest.raises(EvaluationError, match=r"lack columns \['source'\]"):
        predict(random_model_dir, _shipped_rows(1).drop("source"), QUICK)


# --- the commands ------------------------------------------------------------------------------


def test_evaluate_then_mine_commands_write_metrics_and_review_queue(random_model_dir, tmp_path):
    data = sorted((DATA_DIR / "eval").glob("*.jsonl"))[:1]
    common = {"out": tmp_path, "max_new_tokens": 8, "torch_threads": 1}

    assert cli.evaluate(model=random_model_dir, data=data, **common) == 0
    (run,) = tmp_path.glob("*-evaluate-*")
    assert json.loads((run / "metrics.json").read_text())["n_rows"] == len(
        data[0].read_text().splitlines()
    )
    assert cli.mine(predictions=run / "predictions.parquet", out=tmp_path) == 0
    (mined,) = tmp_path.glob("*-mine-*")
    assert (mined / "review_queue.csv").is_file() and (mined / "findings.md").is_file()


def test_evaluate_command_exits_2_naming_a_missing_data_file(random_model_dir, tmp_path, capsys):
    code = cli.evaluate(model=random_model_dir, data=[tmp_path / "nope.jsonl"], out=tmp_path)

    assert code == 2
    assert "nope.jsonl: no such file [check: file_exists]" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_mine_command_exits_2_on_a_file_that_is_not_predictions(tmp_path, capsys):
    bogus = tmp_path / "bogus.parquet"
    pl.DataFrame({"id": ["a"]}).write_parquet(bogus)

    assert cli.mine(predictions=bogus, out=tmp_path) == 2
    assert "probability columns do not match the catalogue" in capsys.readouterr().err
