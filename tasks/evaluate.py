"""Evaluate a saved model on sample rows: batched greedy decoding, per-tool probabilities, metrics.

`predict` turns a model directory and sample rows into the predictions frame
(`schemas.predictions.Predictions`); `compute_metrics` turns that frame into `EvalMetrics`
(accuracy by kind, step, tool, language, file, the condition branches, scenarios, format
checks, confusion matrix); `metrics_markdown` / `metrics_tables` render them for reports.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
from prefect import task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, ConfigDict, Field
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from toolgrpo.schemas.catalogue import Catalogue, load_catalogue
from toolgrpo.schemas.completion import Completion, first_json_object
from toolgrpo.schemas.predictions import probability_columns, validate_predictions
from toolgrpo.training.chat import chat_prompt
from toolgrpo.training.rewards import thought_action_consistent

# The machine has 2 cores shared by everyone; evaluation never takes more.
MAX_TORCH_THREADS = 2
# Where the action slot starts in the model's own output: `"tool": "`.
_TOOL_SLOT = re.compile(r'"tool"\s*:\s*"')
UNPARSED = "(none)"
_NO_CONDITION = pl.lit(None, dtype=pl.String).alias("condition")
SAMPLE_COLUMNS = ["id", "scenario_id", "kind", "lang", "step", "n_steps", "source", "prompt"]


class EvaluationError(ValueError):
    """Evaluation cannot start (no model, missing columns); the message says what to fix."""


class EvalSettings(BaseModel):
    """How completions are decoded and tools scored."""

    model_config = ConfigDict(frozen=True)
    max_new_tokens: int = Field(350, gt=0)  # case study: max_completion_length 350
    batch_size: int = Field(32, gt=0, description="prompts decoded together")
    score_batch_size: int = Field(16, gt=0, description="rows whose tools are scored together")
    # Two threads on two busy cores ran a tiny model ~20x slower than one: contention, not work.
    torch_threads: int = Field(MAX_TORCH_THREADS, ge=1, le=MAX_TORCH_THREADS)


DEFAULT_SETTINGS = EvalSettings()


def sample_source(path: Path) -> str:
    """The slice name of a data file: its folder and stem, e.g. `eval/unseen_phrasing`."""
    return f"{path.parent.name}/{path.stem}"


def evaluation_rows(frame: pl.DataFrame, max_rows: int | None) -> pl.DataFrame:
    """At most `max_rows` rows of each file (quick runs); evaluation names slices by file."""
    if max_rows is None:
        return frame
    return frame.filter(pl.int_range(pl.len()).over("file") < max_rows)


def load_model(model_dir: Path) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    """The tokenizer and model saved in `model_dir`, ready for batched decoding."""
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise EvaluationError(
            f"{model_dir}: not a saved model (no config.json); pass a `<stage_dir>/model` folder"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir)
    except (OSError, ValueError) as error:
        raise EvaluationError(f"{model_dir}: cannot load the saved model: {error}") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    return tokenizer, model


def _length_sorted_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length, so little compute goes to padding."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


@torch.inference_mode()
def generate_completions(
    tokenizer: PreTrainedTokenizerBase,
    model: PreTrainedModel,
    prompts: list[str],
    *,
    max_new_tokens: int,
    batch_size: int,
) -> list[str]:
    """Greedy completions for `prompts` (chat-templated here), decoded in left-padded batches."""
    texts = [chat_prompt(tokenizer, prompt) for prompt in prompts]
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    eos = model.generation_config.eos_token_id or tokenizer.eos_token_id
    config = GenerationConfig(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
    )
    completions = [""] * len(prompts)
    for batch in _length_sorted_batches([len(ids) for ids in encoded], batch_size):
        inputs = tokenizer.pad(
            {"input_ids": [encoded[i] for i in batch]},
            padding=True,
            padding_side="left",  # new tokens follow every prompt directly
            return_tensors="pt",
        )
        output = model.generate(**inputs, generation_config=config)
        new_tokens = output[:, inputs["input_ids"].shape[1] :]
        for index, text in zip(
            batch, tokenizer.batch_decode(new_tokens, skip_special_tokens=True), strict=True
        ):
            completions[index] = text
    return completions


def action_slot_prefix(completion: str) -> str:
    """The completion up to and including `"tool": "`, where a tool name is written next.

    Without that prefix in the model's output, the canonical one carrying its thought (or an
    empty one): `{"thought": "...", "action": {"tool": "`.
    """
    slot = _TOOL_SLOT.search(completion)
    if slot is not None:
        return completion[: slot.end()]
    parsed = first_json_object(completion)
    thought = parsed.get("thought") if parsed else None
    thought = thought if isinstance(thought, str) else ""
    return '{"thought": ' + json.dumps(thought, ensure_ascii=False) + ', "action": {"tool": "'


@torch.inference_mode()
def tool_probabilities(
    tokenizer: PreTrainedTokenizerBase,
    model: PreTrainedModel,
    contexts: list[str],
    tool_names: list[str],
    *,
    batch_size: int,
) -> np.ndarray:
    """P(tool | context) for every context and tool: each name followed by `"` is scored (sum
    of token log-probs) after the context, then normalised over `tool_names` (softmax).

    Each context runs through the model once (left-padded batches); the candidates continue
    from its KV cache, repeated once per tool, so scoring costs about one forward pass per row
    rather than one per tool, and only a few positions' logits are computed.
    """
    context_ids = tokenizer(contexts, add_special_tokens=False)["input_ids"]
    candidates = [
        tokenizer(name + '"', add_special_tokens=False)["input_ids"] for name in tool_names
    ]
    n_tools, longest = len(candidates), max(len(c) for c in candidates)
    pad = tokenizer.pad_token_id
    # Right-padded: padding after a candidate's last token cannot change that token's score.
    candidate_ids = torch.tensor([c + [pad] * (longest - len(c)) for c in candidates])
    candidate_mask = torch.tensor([[1] * len(c) + [0] * (longest - len(c)) for c in candidates])
    log_probs = np.zeros((len(contexts), n_tools))
    for batch in _length_sorted_batches([len(ids) for ids in context_ids], batch_size):
        width = max(len(context_ids[i]) for i in batch)
        padding = [width - len(context_ids[i]) for i in batch]
        input_ids = torch.tensor(
            [[pad] * n + context_ids[i] for i, n in zip(batch, padding, strict=True)]
        )
        attention_mask = torch.tensor([[0] * n + [1] * (width - n) for n in padding])
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        context = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            logits_to_keep=1,
        )
        # Sequence r * n_tools + k continues row r with tool k from row r's cache.
        rows = len(batch)
        cache = context.cache
        cache.batch_repeat_interleave(n_tools)
        tokens, mask = candidate_ids.repeat(rows, 1), candidate_mask.repeat(rows, 1)
        continuation = model(
            input_ids=tokens,
            attention_mask=torch.cat([attention_mask.repeat_interleave(n_tools, 0), mask], 1),
            position_ids=position_ids[:, -1:].repeat_interleave(n_tools, 0)
            + torch.arange(1, longest + 1),
            cache=cache,
        )
        first = torch.log_softmax(context.logits[:, -1].float(), -1).repeat_interleave(n_tools, 0)
        # continuation.logits[:, j] predicts candidate token j + 1.
        rest = torch.log_softmax(continuation.logits[:, :-1].float(), -1)
        token_log_probs = torch.cat(
            [first.gather(-1, tokens[:, :1]), rest.gather(-1, tokens[:, 1:, None]).squeeze(-1)], 1
        )
        log_probs[batch] = (token_log_probs * mask).sum(-1).view(rows, n_tools).numpy()
    shifted = log_probs - log_probs.max(axis=1, keepdims=True)
    return np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)


def _label(solution: object) -> tuple[str | None, Any]:
    """The labelled tool and params of a row's solution (a JSON string)."""
    parsed = first_json_object(solution)
    action = parsed.get("action") if parsed else None
    if not isinstance(action, dict):
        return None, None
    return action.get("tool"), action.get("params")


def completion_checks(completion: str, solution: str, catalogue: Catalogue) -> dict[str, Any]:
    """What the model's output says and how it fares: tool, format, params, consistency.

    Never raises: malformed output gives a null tool and false checks.
    """
    parsed = first_json_object(completion)
    action = parsed.get("action") if parsed else None
    action = action if isinstance(action, dict) else {}
    tool = action.get("tool") if isinstance(action.get("tool"), str) else None
    params = action.get("params")
    label_tool, label_params = _label(solution)
    try:
        Completion.model_validate(parsed)
        parsed_ok = True
    except ValueError:
        parsed_ok = False
    params_valid = tool is not None and catalogue.params_valid(tool, params)
    return {
        "predicted_tool": tool,
        "parsed_ok": parsed_ok,
        "params_valid": params_valid,
        "params_exact": tool is not None and tool == label_tool and params == label_params,
        "consistent": thought_action_consistent(completion),
    }


def predict(
    model_dir: Path,
    samples: pl.DataFrame,
    settings: EvalSettings = DEFAULT_SETTINGS,
    catalogue: Catalogue | None = None,
) -> pl.DataFrame:
    """The predictions frame of the model in `model_dir` on `samples` (validated).

    `samples` has the data contract's columns plus `source` (see `sample_source`) or the
    loader's `file` column, from which `source` is derived.
    """
    catalogue = catalogue or load_catalogue()
    if "source" not in samples.columns and "file" in samples.columns:
        sources = [sample_source(Path(file)) for file in samples["file"]]
        samples = samples.with_columns(source=pl.Series(sources, dtype=pl.String))
    missing = [c for c in [*SAMPLE_COLUMNS, "solution", "tool"] if c not in samples.columns]
    if missing:
        raise EvaluationError(f"sample rows lack columns {missing}")
    torch.set_num_threads(settings.torch_threads)
    tokenizer, model = load_model(model_dir)
    prompts = samples["prompt"].to_list()
    completions = generate_completions(
        tokenizer,
        model,
        prompts,
        max_new_tokens=settings.max_new_tokens,
        batch_size=settings.batch_size,
    )
    contexts = [
        chat_prompt(tokenizer, prompt) + action_slot_prefix(completion)
        for prompt, completion in zip(prompts, completions, strict=True)
    ]
    probabilities = tool_probabilities(
        tokenizer, model, contexts, catalogue.names, batch_size=settings.score_batch_size
    )
    checks = [
        completion_checks(completion, solution, catalogue)
        for completion, solution in zip(completions, samples["solution"], strict=True)
    ]
    frame = pl.concat(
        [
            samples.select(
                pl.col(["id", "scenario_id", "source"]).cast(pl.String),
                pl.col(["kind", "lang", "prompt"]),
                pl.col(["step", "n_steps"]).cast(pl.Int64),
                pl.col("tool").alias("label_tool"),
                pl.col("condition") if "condition" in samples.columns else _NO_CONDITION,
            ),
            pl.DataFrame(checks, schema_overrides={"predicted_tool": pl.String}),
            pl.DataFrame({"completion": completions}, schema={"completion": pl.String}),
            pl.DataFrame(probabilities, schema=probability_columns(catalogue), orient="row"),
        ],
        how="horizontal",
    )
    order = [*SAMPLE_COLUMNS, "label_tool", "predicted_tool", "completion"]
    return validate_predictions(frame.select(*order, pl.exclude(order)), catalogue)


# --- metrics -------------------------------------------------------------------------------


class SliceMetrics(BaseModel):
    """Rates on one slice of the rows (None where the slice is empty)."""

    slice: str
    value: str
    n: int
    accuracy: float | None
    json_valid: float | None
    params_valid: float | None
    params_exact: float | None
    consistent: float | None = Field(description="share of parseable outputs")


class Headline(BaseModel):
    """The numbers a before/after table shows (tool accuracy)."""

    overall: float | None
    single: float | None
    multi: float | None
    condition_fails: float | None = Field(
        description="conditional steps whose condition fails (reply instead of acting)"
    )
    condition_holds: float | None = Field(
        description="conditional steps whose condition holds (act); needs `condition` labels"
    )
    scenario: float | None = Field(description="multi-step scenarios with every step right")
    by_step: dict[int, float | None]
    by_source: dict[str, float | None] = Field(
        default_factory=dict, description="per data file, e.g. `eval/unseen_phrasing`"
    )

    def rows(self) -> dict[str, float | None]:
        """Every number by its row name, in table order: the pooled rates, `step N`, sources."""
        pooled = ["overall", "single", "multi", "condition_fails", "condition_holds", "scenario"]
        return {
            **{name: getattr(self, name) for name in pooled},
            **{f"step {step}": value for step, value in sorted(self.by_step.items())},
            **self.by_source,
        }


class Confusion(BaseModel):
    """Counts by labelled tool (rows) and predicted tool (columns; `(none)` = no valid tool)."""

    labels: list[str]
    predicted: list[str]
    counts: list[list[int]]

    def count(self, label: str, predicted: str) -> int:
        return self.counts[self.labels.index(label)][self.predicted.index(predicted)]


class EvalMetrics(BaseModel):
    """Everything evaluation reports; written as metrics.json."""

    n_rows: int
    accuracy: Headline
    slices: list[SliceMetrics]
    confusion: Confusion


_RATES = {
    "accuracy": pl.col("correct"),
    "json_valid": pl.col("parsed_ok"),
    "params_valid": pl.col("params_valid"),
    "params_exact": pl.col("params_exact"),
    # Among parseable outputs: an unparseable one has no thought to compare (JSON validity
    # already counts it).
    "consistent": pl.col("consistent").filter(pl.col("parsed_ok")),
}
# Slices reported besides `overall`, in report order.
_SLICE_COLUMNS = ["kind", "step", "lang", "label_tool", "source", "branch"]


def _branch() -> pl.Expr:
    """`condition_holds` / `condition_fails` from a row's `condition` label; without one, a
    multi-step reply counts as the condition failing (the only branch a label alone shows)."""
    condition = pl.col("condition")
    replies = (pl.col("kind") == "multi") & (pl.col("label_tool") == "respond")
    return (
        pl.when(condition == "holds")
        .then(pl.lit("condition_holds"))
        .when((condition == "fails") | (condition.is_null() & replies))
        .then(pl.lit("condition_fails"))
        .otherwise(None)
    )


def _with_outcome(predictions: pl.DataFrame) -> pl.DataFrame:
    if "condition" not in predictions.columns:  # written before the contract had conditions
        predictions = predictions.with_columns(_NO_CONDITION)
    return predictions.with_columns(
        correct=(pl.col("predicted_tool") == pl.col("label_tool")).fill_null(False),
        branch=_branch(),
        step=pl.col("step").cast(pl.String),
    )


def _slice_rows(frame: pl.DataFrame, name: str) -> list[SliceMetrics]:
    rows = frame.filter(pl.col(name).is_not_null()) if name != "overall" else frame
    key = pl.col(name) if name != "overall" else pl.lit("all")
    table = (
        rows.group_by(key.alias("value"))
        .agg(pl.len().alias("n"), *[rate.mean().alias(metric) for metric, rate in _RATES.items()])
        .sort("value")
    )
    return [SliceMetrics(slice=name, **row) for row in table.iter_rows(named=True)]


def _rate(frame: pl.DataFrame) -> float | None:
    return float(frame["correct"].mean()) if frame.height else None


def compute_metrics(predictions: pl.DataFrame, catalogue: Catalogue | None = None) -> EvalMetrics:
    """Tool accuracy overall and by slice, format rates, scenario accuracy, confusion matrix."""
    catalogue = catalogue or load_catalogue()
    frame = _with_outcome(predictions)
    multi = frame.filter(pl.col("kind") == "multi")
    scenarios = multi.group_by("scenario_id").agg(pl.col("correct").all())
    headline = Headline(
        overall=_rate(frame),
        single=_rate(frame.filter(pl.col("kind") == "single")),
        multi=_rate(multi),
        condition_fails=_rate(frame.filter(pl.col("branch") == "condition_fails")),
        condition_holds=_rate(frame.filter(pl.col("branch") == "condition_holds")),
        scenario=_rate(scenarios),
        by_step={
            int(step): _rate(frame.filter(pl.col("step") == step))
            for step in sorted(frame["step"].unique().to_list(), key=int)
        },
        by_source={
            source: _rate(frame.filter(pl.col("source") == source))
            for source in sorted(frame["source"].unique().to_list())
        },
    )
    slices = [
        metrics for name in ["overall", *_SLICE_COLUMNS] for metrics in _slice_rows(frame, name)
    ]
    return EvalMetrics(
        n_rows=frame.height,
        accuracy=headline,
        slices=slices,
        confusion=confusion_matrix(frame, catalogue),
    )


def confusion_matrix(predictions: pl.DataFrame, catalogue: Catalogue) -> Confusion:
    """Labelled × predicted tool counts; output without a catalogue tool counts as `(none)`."""
    predicted_names = [*catalogue.names, UNPARSED]
    predicted = (
        pl.when(pl.col("predicted_tool").is_in(catalogue.names))
        .then(pl.col("predicted_tool"))
        .otherwise(pl.lit(UNPARSED))
    )
    counts = predictions.group_by("label_tool", predicted.alias("predicted")).len()
    lookup = {(r["label_tool"], r["predicted"]): r["len"] for r in counts.iter_rows(named=True)}
    return Confusion(
        labels=catalogue.names,
        predicted=predicted_names,
        counts=[[lookup.get((lab, p), 0) for p in predicted_names] for lab in catalogue.names],
    )


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def metrics_tables(metrics: EvalMetrics) -> dict[str, list[dict[str, Any]]]:
    """The metrics as tables (lists of row dicts) for Prefect table artifacts and markdown."""
    headline = metrics.accuracy
    summary = [
        {"metric": name, "accuracy": _percent(value)} for name, value in headline.rows().items()
    ]
    slices = [
        {
            "slice": s.slice,
            "value": s.value,
            "n": s.n,
            **{metric: _percent(getattr(s, metric)) for metric in _RATES},
        }
        for s in metrics.slices
    ]
    confusion = [
        {"label \\ predicted": label, **dict(zip(metrics.confusion.predicted, row, strict=True))}
        for label, row in zip(metrics.confusion.labels, metrics.confusion.counts, strict=True)
    ]
    return {"accuracy": summary, "slices": slices, "confusion": confusion}


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """A GitHub-flavoured markdown table of `rows` (keys of the first row are the header)."""
    if not rows:
        return "_(no rows)_"
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(row[h]) for h in header) + " |" for row in rows]
    return "\n".join(lines)


def metrics_markdown(metrics: EvalMetrics) -> str:
    """The metrics as markdown: headline accuracies, slices, confusion matrix."""
    tables = metrics_tables(metrics)
    return "\n\n".join(
        [
            f"## Tool accuracy ({metrics.n_rows} rows)",
            markdown_table(tables["accuracy"]),
            "## By slice",
            markdown_table(tables["slices"]),
            "## Confusion matrix (rows: label, columns: prediction)",
            markdown_table(tables["confusion"]),
        ]
    )


class EvalReport(BaseModel):
    """Where an evaluation wrote its files, and its metrics."""

    model_dir: Path
    predictions_path: Path
    metrics_path: Path
    metrics: EvalMetrics


def write_evaluation(
    predictions: pl.DataFrame, metrics: EvalMetrics, model_dir: Path, out_dir: Path
) -> EvalReport:
    """predictions.parquet, metrics.json and metrics.md in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    predictions_path = out_dir / "predictions.parquet"
    metrics_path = out_dir / "metrics.json"
    predictions.write_parquet(predictions_path)
    metrics_path.write_text(metrics.model_dump_json(indent=2), encoding="utf-8")
    (out_dir / "metrics.md").write_text(metrics_markdown(metrics) + "\n", encoding="utf-8")
    return EvalReport(
        model_dir=model_dir,
        predictions_path=predictions_path,
        metrics_path=metrics_path,
        metrics=metrics,
    )


@task(name="evaluate", cache_policy=NO_CACHE)
def evaluate_model(
    model_dir: Path,
    samples: pl.DataFrame,
    out_dir: Path,
    settings: EvalSettings = DEFAULT_SETTINGS,
) -> EvalReport:
    """Predict on `samples`, compute metrics, write them to `out_dir`."""
    predictions = predict(model_dir, samples, settings)
    return write_evaluation(predictions, compute_metrics(predictions), Path(model_dir), out_dir)
