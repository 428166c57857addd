"""The `toolgrpo` command line: each command parses, runs a flow, and maps errors to exit codes."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from cyclopts import App, Parameter

from toolgrpo.data import DATA_DIR, LABEL_OVERRIDES

# The temporary Prefect server can take longer than the 20 s default on a busy 2-core box.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

app = App(name="toolgrpo", help="Train and monitor tool-selecting agents with GRPO + NGRPO.")
data_app = App(name="data", help="The shipped dataset.")
app.command(data_app)


@data_app.command
def generate(seed: int = 0, out: Path = DATA_DIR) -> int:
    """Regenerate the shipped dataset under OUT from SEED (byte-identical for the same seed)."""
    from toolgrpo.generator.build import build_dataset, write_dataset

    dataset = build_dataset(seed)
    try:
        written = write_dataset(dataset, out)
    except OSError as error:
        print(f"cannot write the dataset under {out}: {error}", file=sys.stderr)
        return 2
    for path in written:
        rows = dataset.files.get(path.relative_to(out).as_posix())
        print(f"{path}: {len(rows)} rows" if rows is not None else f"{path}")
    return 0


@app.command
def ablate(
    preset: str = "cpu",
    seeds: int = 3,
    steps: int | None = None,
    eval_every: int | None = None,
    arms: str = "none,zero_std,zero_std_tool,all",
    starts: str = "single_only,default",
    workers: int = 2,
    dask: str | None = None,
    out: Path = Path("runs"),
    set_: Annotated[list[str] | None, Parameter(name="--set", negative="")] = None,
) -> int:
    """SFT vs GRPO vs NGRPO (zero-std) vs NGRPO (all), from each start, over SEEDS seeds.

    ARMS and STARTS are comma-separated. STEPS defaults to the preset's GRPO steps, EVAL_EVERY
    to a third of them; --set FIELD=VALUE overrides a training config field of every stage.
    DASK runs the arms on a Dask cluster instead of WORKERS threads here: `local` (WORKERS
    processes) or a scheduler address such as tcp://host:8786 (needs `toolgrpo[dask]`).
    Writes ablation.md / .json / .png in a new folder under OUT.
    """
    from toolgrpo.flows.ablation import parse_params, run_ablation

    try:
        params = parse_params(
            preset=preset,
            seeds=seeds,
            steps=steps,
            eval_every=eval_every,
            arms=[arm.strip() for arm in arms.split(",")],
            starts=[start.strip() for start in starts.split(",")],
            workers=workers,
            dask=dask,
            out=out,
            overrides=config_overrides(set_ or []),
        )
    except ValueError as error:  # AblationError included
        print(f"ablate: {error}", file=sys.stderr)
        return 2
    report = run_ablation(params)
    print(f"\n{report.verdict}\n\nreport: {report.markdown_path}")
    for line in report.failed:
        print(f"did not finish: {line}", file=sys.stderr)
    return 1 if report.failed else 0


@app.command
def validate(*files: Path, out: Path = Path("runs"), overrides: Path | None = None) -> int:
    """Check sample FILES (JSONL or parquet) against the row contract; report under OUT.

    Prints one line per problem (file:line, what is wrong, the check) and the report's path.
    OVERRIDES: a label_overrides.jsonl to apply first. Exit 0: every row valid; 1: some row or
    file failed; 2: usage error (no files, a missing file).
    """
    import logging

    from toolgrpo.flows.data_quality import data_quality

    missing = [path for path in [*files, overrides] if path is not None and not path.is_file()]
    if not files or missing:
        reason = "no such file: " + ", ".join(map(str, missing)) if missing else "no files given"
        print(f"toolgrpo validate: {reason}", file=sys.stderr)
        return 2
    # Prefect's console logs (to stderr) would drown the problem lines; keep its warnings.
    logging.getLogger("prefect").setLevel(logging.WARNING)
    report = data_quality(files=list(files), out=out, overrides=overrides)
    for problem in report.failures:
        print(problem)
    for warning in report.warnings:
        print(f"warning: {warning}")
    verdict = "ok" if report.ok else "FAILED"
    print(
        f"{verdict}: {report.valid_rows}/{report.rows} rows valid, {len(report.failures)} "
        f"problem(s), {len(report.conflicts)} label conflict(s) (warnings); "
        f"report: {Path(report.run_dir or out) / 'report.md'}"
    )
    return 0 if report.ok else 1


@app.command
def evaluate(
    *,
    model: Path,
    data: Annotated[list[Path], Parameter(consume_multiple=True, negative="")],
    out: Path = Path("runs"),
    overrides: Path | None = None,
    max_new_tokens: int = 350,
    batch_size: int = 32,
    torch_threads: int = 2,
) -> int:
    """Evaluate the saved model MODEL on DATA files (JSONL or parquet) with greedy decoding.

    Writes predictions.parquet, metrics.json and metrics.md to a new folder under OUT and prints
    the metrics. OVERRIDES: a label_overrides.jsonl to apply first. Exit 0: evaluated;
    2: a data file or the model cannot be read.
    """
    from pydantic import ValidationError

    from toolgrpo.evaluation.decoding import EvaluationError
    from toolgrpo.evaluation.predict import EvalSettings
    from toolgrpo.flows.evaluate import UnreadableData
    from toolgrpo.flows.evaluate import evaluate as evaluate_flow
    from toolgrpo.reporting.evaluation import metrics_markdown
    from toolgrpo.schemas.predictions import PredictionsError

    try:
        settings = EvalSettings(
            max_new_tokens=max_new_tokens, batch_size=batch_size, torch_threads=torch_threads
        )
        report = evaluate_flow(model, data, out, overrides, settings)
    except UnreadableData as error:
        for problem in error.problems:
            print(problem, file=sys.stderr)
        return 2
    except (ValidationError, EvaluationError, PredictionsError) as error:
        print(f"toolgrpo evaluate: {error}", file=sys.stderr)
        return 2
    print(metrics_markdown(report.metrics))
    print(f"\npredictions: {report.predictions_path}\nmetrics: {report.metrics_path}")
    return 0


mine_app = App(name="mine", help="Categorise errors, rank label issues, build the review queue.")
app.command(mine_app)


@mine_app.default
def mine(*, predictions: Path, audit: Path | None = None, out: Path = Path("runs")) -> int:
    """Mine PREDICTIONS (a predictions.parquet written by `toolgrpo evaluate`).

    AUDIT: the predictions.parquet of the training files, mined as a data audit and used to
    find near-identical requests. Writes review_queue.csv / .jsonl, findings.json and
    findings.md to a new folder under OUT. Exit 0: mined; 2: a predictions file is unusable.
    """
    import polars as pl

    from toolgrpo.flows.mine import mine_predictions
    from toolgrpo.reporting.mining import findings_markdown
    from toolgrpo.schemas.predictions import PredictionsError

    try:
        report, out_dir = mine_predictions(predictions, audit, out)
    except (OSError, pl.exceptions.PolarsError, PredictionsError) as error:
        print(f"toolgrpo mine: {error}", file=sys.stderr)
        return 2
    print(findings_markdown(report))
    print(f"\nreview queue: {out_dir / 'review_queue.csv'}")
    return 0


@mine_app.command(name="apply-review")
def apply_review(reviewed: Path, *, overrides: Path = LABEL_OVERRIDES) -> int:
    """Turn REVIEWED (a review_queue.csv whose decision/reviewer/reason columns are filled in)
    into label overrides merged into OVERRIDES; the loader applies them on the next run.

    Exit 0: written; 2: the file is missing or a decision is unusable (file:line says which).
    """
    from toolgrpo.flows.review import apply_review as apply_review_flow
    from toolgrpo.mining.review import ReviewError

    try:
        apply_review_flow(reviewed, overrides)
    except (OSError, ReviewError) as error:
        print(f"toolgrpo mine apply-review: {error}", file=sys.stderr)
        return 2
    return 0


def config_overrides(items: list[str]) -> dict[str, Any]:
    """`--set FIELD=VALUE` items as training config overrides (values parsed as YAML)."""
    import yaml

    overrides = {}
    for item in items:
        field, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set takes FIELD=VALUE, got {item!r}")
        try:
            overrides[field.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ValueError(f"--set {field.strip()}: {value!r} is not a value") from None
    return overrides


def _retrain_params(
    preset: str, train: list[Path] | None, eval_: list[Path] | None, out: Path, set_: list[str]
):
    from toolgrpo.flows.retrain import RetrainParams
    from toolgrpo.training.config import load_preset

    given = {"train_files": train, "eval_files": eval_}
    params = RetrainParams(
        preset=preset,
        out=out,
        config=config_overrides(set_),
        **{k: v for k, v in given.items() if v},
    )
    load_preset(params.preset, params.config)  # a bad field or value stops before any run
    return params


@app.command
def run(
    *,
    preset: Literal["smoke", "cpu", "gpu"] = "cpu",
    train: Annotated[list[Path] | None, Parameter(consume_multiple=True, negative="")] = None,
    eval_: Annotated[
        list[Path] | None, Parameter(name="--eval", consume_multiple=True, negative="")
    ] = None,
    out: Path = Path("runs"),
    set_: Annotated[list[str] | None, Parameter(name="--set", negative="")] = None,
) -> int:
    """The main job: data gate, SFT, evaluate, GRPO + NGRPO, evaluate, mine, report.

    TRAIN and EVAL default to the shipped data; --set FIELD=VALUE overrides a training config
    field (repeatable, e.g. --set grpo.max_steps=20). Prints where the report is and the
    before/after accuracy. Exit 0: done; 1: the data gate or a stage failed; 2: usage error.
    """
    from pydantic import ValidationError

    from toolgrpo.flows.retrain import retrain
    from toolgrpo.reporting.markdown import markdown_table
    from toolgrpo.reporting.run_report import before_after_rows
    from toolgrpo.tasks.train import StageFailed
    from toolgrpo.training.config import ConfigError
    from toolgrpo.validation.gate import DataGateFailed

    missing = [p for p in [*(train or []), *(eval_ or [])] if not p.is_file()]
    if missing:
        print(f"toolgrpo run: no such file: {', '.join(map(str, missing))}", file=sys.stderr)
        return 2
    try:
        params = _retrain_params(preset, train, eval_, out, set_ or [])
    except (ValueError, ValidationError, ConfigError) as error:
        print(f"toolgrpo run: {error}", file=sys.stderr)
        return 2
    try:
        summary = retrain(params)
    except DataGateFailed as error:
        for problem in error.report.failures:
            print(problem, file=sys.stderr)
        print(f"toolgrpo run: {error}", file=sys.stderr)
        return 1
    except StageFailed as error:
        print(f"toolgrpo run: {error}", file=sys.stderr)
        return 1
    print("\n" + markdown_table(before_after_rows(summary.accuracy)))
    zero_std = summary.zero_std
    print(
        f"\n{zero_std.line()}; on the tool score {zero_std.zero_on_tool}/{zero_std.total} "
        f"(calibration changed {zero_std.changed})"
    )
    print(f"report: {summary.run_dir / 'report.html'}\nsummary: {summary.run_dir / 'summary.json'}")
    return 0


@app.command
def serve(*, preset: Literal["smoke", "cpu", "gpu"] = "cpu", out: Path = Path("runs")) -> int:
    """Serve the nightly retrain and the hourly data-quality deployments with their schedules.

    Point PREFECT_API_URL at a running `prefect server start` to watch them in the UI.
    """
    from toolgrpo.flows.deployments import serve_deployments
    from toolgrpo.flows.retrain import RetrainParams

    serve_deployments(RetrainParams(preset=preset, out=out))
    return 0


def main() -> None:
    """Console-script entry point: the command's return value is the exit status."""
    sys.exit(app() or 0)
