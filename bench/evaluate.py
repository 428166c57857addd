"""Time evaluation's decoding and the training audit, each lever side by side in one run.

    python bench/evaluate.py --model RUN/grpo/model [--rows 96] [--batch-sizes 16,32,64,128]
                             [--threads 1] [--part decoding|audit|all] [--audit-rows N]

Decoding (`--rows` rows drawn from data/eval): one-at-a-time `generate`, the previous path
(`generate` in left-padded batches of 32, `max_new_tokens` 350: a batch runs until its longest
row is done), and our loop (finished rows leave the batch, `max_new_tokens` fitted to the
longest solution) at each batch size, then the best batch size at 1 and 2 torch threads.
Each row: seconds, rows/s, the speed-up over one-at-a-time, and how many answers equal its.

Audit (every training row): the answers decoded whole (`predict` mode `decode`), decoded up to
the tool slot and scored (mode `score`, what the retrain flow runs), and scored at an empty
thought with no decoding at all; each with the predicted tool's agreement with the decoded one
and what mining then finds (with the decoded eval predictions): planted rows flagged as label
ambiguity, and finding counts by split and category. Prints the load average: a shared machine
inflates every time, so compare rows of one run.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import cyclopts
import numpy as np
import polars as pl
import torch
from transformers import GenerationConfig

from toolgrpo.data import DATA_DIR
from toolgrpo.evaluation.decoding import (
    action_slot_prefix,
    encode_prompts,
    eos_token_ids,
    greedy_token_ids,
    load_trained_model,
    tool_probabilities,
)
from toolgrpo.evaluation.predict import (
    DECODED_CHECKS,
    SAMPLE_COLUMNS,
    EvalSettings,
    fitted_max_new_tokens,
    predict,
    sample_source,
)
from toolgrpo.mining.miner import mine_errors
from toolgrpo.schemas.catalogue import load_catalogue
from toolgrpo.schemas.predictions import probability_columns
from toolgrpo.training.chat import chat_prompt
from toolgrpo.validation.loader import load_samples

app = cyclopts.App(help=__doc__)
# The decoding path before issue 14: `generate`, batches of 32, the GRPO completion length.
PREVIOUS_BATCH_SIZE, PREVIOUS_MAX_NEW_TOKENS = 32, 350


def _rows(split: str) -> pl.DataFrame:
    frame = load_samples(sorted((DATA_DIR / split).glob("*.jsonl"))).frame
    sources = [sample_source(Path(file)) for file in frame["file"]]
    return frame.with_columns(source=pl.Series(sources, dtype=pl.String))


def _timed(run: Callable[[], object]) -> tuple[object, float]:
    started = time.perf_counter()
    result = run()
    return result, time.perf_counter() - started


def _generate_one_at_a_time(model, tokenizer, encoded, max_new_tokens) -> list[list[int]]:
    config = _generation_config(model, tokenizer, max_new_tokens)
    outputs = []
    for ids in encoded:
        output = model.generate(input_ids=torch.tensor([ids]), generation_config=config)
        outputs.append(
            _without_end(output[0, len(ids) :].tolist(), eos_token_ids(tokenizer, model))
        )
    return outputs


def _generate_batched(model, tokenizer, encoded, max_new_tokens, batch_size) -> list[list[int]]:
    """The previous path: `generate` on left-padded batches of similar prompt length."""
    config = _generation_config(model, tokenizer, max_new_tokens)
    eos = eos_token_ids(tokenizer, model)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    outputs: list[list[int]] = [[] for _ in encoded]
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        inputs = tokenizer.pad(
            {"input_ids": [encoded[i] for i in batch]}, padding_side="left", return_tensors="pt"
        )
        output = model.generate(**inputs, generation_config=config)
        for row, tokens in zip(batch, output[:, inputs["input_ids"].shape[1] :], strict=True):
            outputs[row] = _without_end(tokens.tolist(), eos)
    return outputs


def _generation_config(model, tokenizer, max_new_tokens: int) -> GenerationConfig:
    return GenerationConfig(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=sorted(eos_token_ids(tokenizer, model)),
        pad_token_id=tokenizer.pad_token_id,
    )


def _without_end(tokens: list[int], eos: set[int]) -> list[int]:
    """`generate`'s new tokens up to (not with) the first end token, as our loop returns them."""
    ends = [i for i, token in enumerate(tokens) if token in eos]
    return tokens[: ends[0]] if ends else tokens


def _table(header: list[str], rows: list[list[object]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")


def bench_decoding(model_dir: Path, rows: int, batch_sizes: list[int], threads: int) -> None:
    tokenizer, model = load_trained_model(model_dir)
    held_out = _rows("eval")
    sample = held_out.sample(min(rows, held_out.height), seed=0)
    encoded = encode_prompts(tokenizer, sample["prompt"].to_list())
    fitted = fitted_max_new_tokens(tokenizer, held_out["solution"].to_list())
    pad, eos = tokenizer.pad_token_id, eos_token_ids(tokenizer, model)
    print(f"\n## Decoding {len(encoded)} eval rows (fitted max_new_tokens {fitted})\n")

    def ours(batch_size: int) -> Callable[[], list[list[int]]]:
        return lambda: greedy_token_ids(
            model,
            encoded,
            pad_token_id=pad,
            eos_token_ids=eos,
            max_new_tokens=fitted,
            batch_size=batch_size,
        )

    torch.set_num_threads(threads)
    runs: dict[str, tuple[object, float]] = {}
    runs["one-at-a-time generate"] = _timed(
        lambda: _generate_one_at_a_time(model, tokenizer, encoded, fitted)
    )
    runs[f"previous: generate, batch {PREVIOUS_BATCH_SIZE}, max {PREVIOUS_MAX_NEW_TOKENS}"] = (
        _timed(
            lambda: _generate_batched(
                model, tokenizer, encoded, PREVIOUS_MAX_NEW_TOKENS, PREVIOUS_BATCH_SIZE
            )
        )
    )
    for batch_size in batch_sizes:
        runs[f"ours, batch {batch_size}, {threads} thread(s)"] = _timed(ours(batch_size))
    best = min(batch_sizes, key=lambda b: runs[f"ours, batch {b}, {threads} thread(s)"][1])
    for other in sorted({1, 2} - {threads}):
        torch.set_num_threads(other)
        runs[f"ours, batch {best}, {other} thread(s)"] = _timed(ours(best))
    torch.set_num_threads(threads)

    reference, baseline = runs["one-at-a-time generate"]
    table = []
    for name, (outputs, seconds) in runs.items():
        same = sum(a == b for a, b in zip(outputs, reference, strict=True))
        tokens = sum(map(len, outputs))
        table.append(
            [
                name,
                f"{seconds:.1f}",
                f"{len(encoded) / seconds:.2f}",
                f"{baseline / seconds:.1f}x",
                f"{same}/{len(encoded)}",
                tokens,
            ]
        )
    header = ["decoding", "s", "rows/s", "vs one-at-a-time", "same answers", "tokens"]
    _table(header, table)


def _scored_without_decoding(model_dir: Path, samples: pl.DataFrame) -> pl.DataFrame:
    """The audit with no decoding at all: tools scored after an empty thought."""
    catalogue = load_catalogue()
    tokenizer, model = load_trained_model(model_dir)
    contexts = [chat_prompt(tokenizer, p) + action_slot_prefix("") for p in samples["prompt"]]
    probabilities = tool_probabilities(tokenizer, model, contexts, catalogue.names, batch_size=16)
    predicted = np.asarray(catalogue.names)[probabilities.argmax(axis=1)]
    return samples.select(
        *SAMPLE_COLUMNS,
        pl.col("tool").alias("label_tool"),
        predicted_tool=pl.Series(predicted, dtype=pl.String),
        completion=pl.lit(None, pl.String),
        **{column: pl.lit(None, pl.Boolean) for column in DECODED_CHECKS},
        **dict(zip(probability_columns(catalogue), probabilities.T, strict=True)),
    )


def bench_audit(model_dir: Path, threads: int, audit_rows: int | None) -> None:
    settings = EvalSettings(torch_threads=threads)
    train, held_out = _rows("train"), _rows("eval")
    if audit_rows is not None:  # a quick look; mining then sees fewer neighbours
        train = train.sample(min(audit_rows, train.height), seed=0)
    planted = set(json.loads((DATA_DIR / "planted_ambiguity.json").read_text())["ids"])
    planted &= {*train["id"], *held_out["id"]}
    print(f"\n## Training audit: {train.height} rows; mining with {held_out.height} eval rows\n")
    eval_predictions = predict(model_dir, held_out, settings)
    audits = {
        "decoded whole (mode decode)": _timed(lambda: predict(model_dir, train, settings)),
        "decoded to the tool slot, scored": _timed(
            lambda: predict(model_dir, train, settings, mode="score")
        ),
        "scored at an empty thought, no decoding": _timed(
            lambda: _scored_without_decoding(model_dir, train)
        ),
    }
    reference, baseline = audits["decoded whole (mode decode)"]
    table = []
    for name, (audit, seconds) in audits.items():
        agree = (audit["predicted_tool"] == reference["predicted_tool"]).fill_null(False).mean()
        report = mine_errors(eval_predictions, audit)
        found = len(set(report.ambiguity_ids) & planted)
        counts = "; ".join(
            f"{split}: " + ", ".join(f"{c} {n}" for c, n in sorted(by.items()))
            for split, by in sorted(report.counts.items())
        )
        table.append(
            [
                name,
                f"{seconds:.1f}",
                f"{baseline / seconds:.1f}x",
                f"{100 * agree:.1f}%",
                f"{found}/{len(planted)} ({len(report.ambiguity_ids)} flagged)",
                counts,
            ]
        )
    header = ["audit", "s", "speed-up", "same tool as decoded", "planted found", "findings"]
    _table(header, table)


@app.default
def main(
    model: Path,
    rows: int = 96,
    batch_sizes: str = "16,32,64,128",
    threads: int = 1,
    part: str = "all",
    audit_rows: int | None = None,
) -> None:
    """Time decoding on eval rows and the training audit for the saved model MODEL (AUDIT_ROWS:
    that many training rows instead of all)."""
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (times are loaded)")
    torch.set_num_threads(threads)
    if part in ("decoding", "all"):
        bench_decoding(model, rows, [int(b) for b in batch_sizes.split(",")], threads)
    if part in ("audit", "all"):
        bench_audit(model, threads, audit_rows)


if __name__ == "__main__":
    app()
