"""Validate 1,000,000 sample rows with the polars schema and with the same rules on pandas, then
time `toolgrpo validate` on the same number of rows as JSONL files, end to end: the shipped rows
repeated and rows of real, distinct text side by side.

    python bench/validate.py [--rows 1000000] [--unique-solutions] [--no-end-to-end] [--readers]

Two kinds of rows:

- repeated: the shipped rows repeated with fresh ids, so every text is one of ~1,300 and the
  checks that judge each distinct text once (JSON parsing, the context checks) judge ~1,300;
- distinct: the shipped scenarios drawn again by the generator (`generator.build`) round after
  round, with every slot redrawn for each scenario (accounts, amounts, symbols, quantities,
  balances, quotes), so requests, thoughts and params differ as in real data while every label
  stays valid and consistent (what the context checks find on them is what a clean dataset
  has). Drawn in a process per usable CPU.

The schema comparison runs on the repeated rows: both sides parse each distinct solution once
(polars with `str.json_path_match`, pandas with `json.loads`, its only JSON parser);
`--unique-solutions` makes every solution distinct (the worst case).
Prints seconds, rows/s and the polars speed-up, with the machine's load average.

End to end, the side-by-side table: `toolgrpo validate` in a fresh process on each kind of rows
as JSONL, with a Prefect server already running (what a `prefect server start` user has:
`PREFECT_API_URL` set) and with the temporary server a run without `PREFECT_API_URL` starts,
with each run's seconds and peak resident memory (the validate process's VmHWM; a temporary
server runs in a process of its own). Then where the seconds go on the distinct rows, stage by
stage, in this process. `--readers` adds the loader's comparison: a copy with 1% of its lines broken
(cut JSON, a string step, a missing tool), with the native readers and with every line read by
pydantic as before them.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any, NamedTuple

import cyclopts
import pandas as pd
import pandera.errors
import pandera.pandas as pap
import polars as pl
from prefect.server.api.server import SubprocessASGIServer
from prefect.settings import PREFECT_SERVER_ANALYTICS_ENABLED, temporary_settings

from toolgrpo.data import DATA_DIR
from toolgrpo.generator.build import TRAIN_MULTI_ROWS, TRAIN_SINGLE_ROWS, ScenarioBuilder
from toolgrpo.reporting.data_quality import render_markdown
from toolgrpo.schemas.catalogue import default_catalogue as catalogue
from toolgrpo.schemas.records import RECORD_SCHEMA
from toolgrpo.schemas.samples import (
    CONDITIONS,
    KINDS,
    LANGS,
    MAX_PROMPT_CHARS,
    PREVIOUS_STEP_LINE,
    PREVIOUS_STEPS_HEADER,
    ParsedSample,
    parse_solution,
    solution_parts,
)
from toolgrpo.tasks.runs import files_hash
from toolgrpo.validation import gate, loader
from toolgrpo.validation.context import label_inconsistencies
from toolgrpo.validation.screens import PARTS_READ

SHIPPED = ["train/single_step.jsonl", "train/multistep.jsonl", "eval/single_step.jsonl"]
SHIPPED += ["eval/multistep.jsonl", "eval/unseen_phrasing.jsonl"]
BROKEN_EVERY = 100  # 1% of the lines
# `toolgrpo validate ARGS`, as the console script runs it; {line_by_line} makes the loader read
# every line with pydantic (`load_samples(line_by_line=True)`, the reader before polars).
CLI = (
    "import atexit, functools, os, sys\n"
    "def peak():  # this process's own high-water RSS (ru_maxrss keeps the forking parent's)\n"
    "    status = open('/proc/self/status').read().split('VmHWM:')[1].split()[0]\n"
    "    open(os.environ['BENCH_PEAK_FILE'], 'w').write(status)\n"
    "atexit.register(peak)  # runs last: after Prefect's handlers\n"
    "from toolgrpo.validation import loader\n"
    "if {line_by_line}:\n"
    "    loader.load_samples = functools.partial(loader.load_samples, line_by_line=True)\n"
    "from toolgrpo.flows.cli import main\n"
    "main(['validate', *sys.argv[1:]])\n"
)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _is_string_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def one_solution_parts(text: str) -> dict[str, Any]:
    """The columns `parse_solution` adds, for one solution, read with `json.loads`."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    root = value if isinstance(value, dict) else {}
    action = root.get("action") if isinstance(root.get("action"), dict) else {}
    tool, params, plan = action.get("tool"), action.get("params"), root.get("plan")
    tool = tool if isinstance(tool, str) else None
    params_error = None
    if tool in catalogue().names and isinstance(params, dict):
        params_error = catalogue().params_error(tool, params)
    return {
        "solution_is_object": isinstance(value, dict),
        "thought": root["thought"] if isinstance(root.get("thought"), str) else None,
        "action_tool": tool,
        "action_params": _compact(params) if isinstance(params, dict) else None,
        "plan": _compact(plan) if _is_string_list(plan) else None,
        "params_error": params_error,
    }


def parse_solution_pandas(frame: pd.DataFrame) -> pd.DataFrame:
    """pandas has no vectorised JSON parser: one `json.loads` per distinct solution."""
    distinct = frame["solution"].drop_duplicates()
    parts = pd.DataFrame([one_solution_parts(text) for text in distinct], index=distinct.to_numpy())
    return frame.join(parts, on="solution")


class PandasSample(pap.DataFrameModel):
    """`schemas.samples.ParsedSample`'s rules as vectorised pandas operations."""

    id: str
    scenario_id: str
    kind: str
    lang: str
    step: int
    n_steps: int
    prompt: str
    solution: str
    tool: str
    condition: str = pap.Field(nullable=True)
    solution_is_object: bool
    thought: str = pap.Field(nullable=True)
    action_tool: str = pap.Field(nullable=True)
    action_params: str = pap.Field(nullable=True)
    plan: str = pap.Field(nullable=True)
    params_error: str = pap.Field(nullable=True)

    @pap.dataframe_check
    def id_unique(cls, df: pd.DataFrame) -> pd.Series:
        return ~df["id"].duplicated(keep=False)

    @pap.dataframe_check
    def kind_known(cls, df: pd.DataFrame) -> pd.Series:
        return df["kind"].isin(KINDS)

    @pap.dataframe_check
    def steps_match_kind(cls, df: pd.DataFrame) -> pd.Series:
        step, n_steps, kind = df["step"], df["n_steps"], df["kind"]
        single = (kind == "single") & (step == 1) & (n_steps == 1)
        multi = (kind == "multi") & (n_steps >= 2) & (step >= 1) & (step <= n_steps)
        return single | multi | ~kind.isin(KINDS)

    @pap.dataframe_check
    def lang_known(cls, df: pd.DataFrame) -> pd.Series:
        return df["lang"].isin(LANGS)

    @pap.dataframe_check
    def tool_in_catalogue(cls, df: pd.DataFrame) -> pd.Series:
        return df["tool"].isin(catalogue().names)

    @pap.dataframe_check
    def prompt_not_empty(cls, df: pd.DataFrame) -> pd.Series:
        return df["prompt"].str.strip().str.len() > 0

    @pap.dataframe_check
    def prompt_within_length(cls, df: pd.DataFrame) -> pd.Series:
        return df["prompt"].str.len() <= MAX_PROMPT_CHARS

    @pap.dataframe_check
    def previous_steps_match_step(cls, df: pd.DataFrame) -> pd.Series:
        has_history = df["prompt"].str.contains(PREVIOUS_STEPS_HEADER, regex=False)
        listed = df["prompt"].str.count(PREVIOUS_STEP_LINE)
        return (listed == df["step"] - 1) & (has_history == (df["step"] > 1))

    @pap.dataframe_check
    def condition_known(cls, df: pd.DataFrame) -> pd.Series:
        return df["condition"].isna() | df["condition"].isin(CONDITIONS)

    @pap.dataframe_check
    def condition_after_first_step(cls, df: pd.DataFrame) -> pd.Series:
        return df["condition"].isna() | ((df["kind"] == "multi") & (df["step"] > 1))

    @pap.dataframe_check
    def condition_matches_tool(cls, df: pd.DataFrame) -> pd.Series:
        matches = (df["condition"] == "fails") == (df["tool"] == "respond")
        return ~df["condition"].isin(CONDITIONS) | matches

    @pap.dataframe_check
    def solution_is_json_object(cls, df: pd.DataFrame) -> pd.Series:
        return df["solution_is_object"]

    @pap.dataframe_check
    def solution_has_thought(cls, df: pd.DataFrame) -> pd.Series:
        visible = df["thought"].str.strip().str.len().gt(0).fillna(False)
        return visible | ~df["solution_is_object"]

    @pap.dataframe_check
    def solution_has_action_tool(cls, df: pd.DataFrame) -> pd.Series:
        return df["action_tool"].str.len().gt(0).fillna(False) | ~df["solution_is_object"]

    @pap.dataframe_check
    def solution_has_params_object(cls, df: pd.DataFrame) -> pd.Series:
        return df["action_params"].notna() | ~df["solution_is_object"]

    @pap.dataframe_check
    def solution_plan_is_string_list(cls, df: pd.DataFrame) -> pd.Series:
        return df["plan"].notna() | ~df["solution_is_object"]

    @pap.dataframe_check
    def tool_matches_solution(cls, df: pd.DataFrame) -> pd.Series:
        return (df["tool"] == df["action_tool"]) | df["action_tool"].isna()

    @pap.dataframe_check
    def params_match_schema(cls, df: pd.DataFrame) -> pd.Series:
        return df["params_error"].isna()


def synthetic_rows(rows: int, unique_solutions: bool) -> pl.DataFrame:
    """`rows` shipped rows repeated with fresh ids (and, if asked, a distinct thought each)."""
    shipped = pl.concat(
        [pl.read_ndjson(DATA_DIR / name) for name in SHIPPED], how="diagonal_relaxed"
    )
    repeats = -(-rows // shipped.height)
    frame = pl.concat([shipped] * repeats, rechunk=True).head(rows)
    frame = frame.with_columns(id=pl.col("id") + "#" + pl.int_range(pl.len()).cast(pl.String))
    if unique_solutions:
        frame = frame.with_columns(
            solution=pl.col("solution").str.replace(
                '"thought": "', pl.format('"thought": "({}) ', pl.col("id")), literal=True
            )
        )
    return frame.rechunk()


def _drawn_rounds(first: int, last: int) -> pl.DataFrame:
    """Rounds `first`..`last - 1` of the training scenarios drawn again (see `distinct_rows`)."""
    builder = ScenarioBuilder(f"distinct-{first}", catalogue(), unique_requests=False)
    rows: list[dict[str, Any]] = []
    for number in range(first, last):
        split = f"d{number}"
        rows += builder.single_rows(split, builder.single_jobs("train"))
        rows += builder.multi_rows(split, builder.multi_jobs("train"))
    return pl.DataFrame(rows, schema=RECORD_SCHEMA)


def distinct_rows(rows: int) -> pl.DataFrame:
    """`rows` rows of the training scenarios drawn round after round with fresh slots (the
    generator's draws: accounts, amounts, symbols, balances and quotes redrawn, labels valid),
    ids unique; drawn in a process per usable CPU."""
    rounds = -(-rows // (TRAIN_SINGLE_ROWS + TRAIN_MULTI_ROWS))
    workers = min(len(os.sched_getaffinity(0)), rounds)
    bounds = [rounds * k // workers for k in range(workers + 1)]
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        parts = list(pool.map(_drawn_rounds, bounds[:-1], bounds[1:]))
    return pl.concat(parts).head(rows).rechunk()


def timed(validate: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = validate()
    return time.perf_counter() - start, result


def failures_or_none(validate: Callable[[], object]) -> object:
    try:
        validate()
    except (pandera.errors.SchemaErrors, pandera.errors.SchemaError) as errors:
        return errors
    return None


def write_jsonl(frame: pl.DataFrame, path: Path, broken_every: int = 0) -> int:
    """`frame` as JSONL at `path`, every `broken_every`-th line broken (three ways in turn);
    returns how many lines were broken."""
    frame.write_ndjson(path)
    if not broken_every:
        return 0
    lines = pl.read_lines(path, name="text").with_row_index("number")
    turn = pl.col("number") // broken_every % 3
    text = pl.col("text")
    broken = (
        pl.when(pl.col("number") % broken_every != broken_every - 1)
        .then(text)
        .when(turn == 0)
        .then(text.str.head(60))
        .when(turn == 1)
        .then(
            text.str.replace('"step":', '"step":"', literal=True).str.replace(
                ',"n_steps"', '","n_steps"', literal=True
            )
        )
        .otherwise(text.str.replace(r',"tool":"[^"]*"', ""))
    )
    lines = lines.with_columns(broken)
    path.write_text(lines["text"].str.join("\n").item() + "\n", encoding="utf-8")
    return lines.height // broken_every


class CliRun(NamedTuple):
    """One `toolgrpo validate` process: seconds, exit status, peak resident memory."""

    seconds: float
    status: int
    peak_gb: float


def cli_run(path: Path, out: Path, line_by_line: bool, api_url: str | None = None) -> CliRun:
    """`toolgrpo validate PATH --out OUT` in a fresh process (with a temporary Prefect server, or
    the running one at `api_url`): its seconds, exit status and peak RSS (its own VmHWM, the
    process alone: a temporary server is a process of its own, which it starts and stops)."""
    env = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", **os.environ}
    env.pop("PREFECT_API_URL", None)
    if api_url is not None:
        env["PREFECT_API_URL"] = api_url
    command = [sys.executable, "-c", CLI.format(line_by_line=line_by_line), str(path)]
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as folder:
        env["BENCH_PEAK_FILE"] = peak_file = str(Path(folder, "peak"))
        start = time.perf_counter()
        done = subprocess.run(
            [*command, "--out", str(out)], env=env, capture_output=True, text=True, check=False
        )
        seconds = time.perf_counter() - start
        peak_kb = int(Path(peak_file).read_text()) if Path(peak_file).exists() else 0
    if done.returncode not in (0, 1):  # 1: the gate failed, as it should on broken rows
        raise SystemExit(f"toolgrpo validate {path} exited {done.returncode}:\n{done.stderr}")
    return CliRun(seconds, done.returncode, peak_kb / 2**20)


@contextlib.contextmanager
def running_server() -> Iterator[str]:
    """A Prefect server in a process of its own (what `prefect server start` serves, minus the
    UI) for the block: its API URL."""
    server = SubprocessASGIServer()
    # its telemetry heartbeat races the runs' writes on sqlite ("database is locked")
    with temporary_settings({PREFECT_SERVER_ANALYTICS_ENABLED: False}):
        server.start()
    try:
        yield server.api_url
    finally:
        server.stop()


def stage_seconds(path: Path) -> dict[str, float]:
    """Where the gate's seconds go on `path`, in this process (no Prefect)."""
    stages = {"data tag (files_hash)": timed(lambda: files_hash([path]))[0]}
    stages["load (native readers)"], loaded = timed(lambda: loader.load_samples([path]))
    data = path.read_bytes()
    stages["  finding the plain lines (streamed)"], lines = timed(lambda: loader._plain_lines(data))
    for name, decoded in [  # the loader's decoding of plain rows, both ways
        ("whole file, read_ndjson (the loader)", loader._decoded),
        ("line by line, json_decode", loader._decoded_line_by_line),
    ]:
        stages[f"  decoding the plain rows: {name}"], _ = timed(
            lambda decoded=decoded: decoded(data, lines)
        )
    # the context checks read the solutions' parts the contract parsed, as the gate hands them
    parsed = solution_parts(loaded.frame).select(*loaded.frame.columns, *PARTS_READ)
    for name, stage in [
        ("row contract (parse_solution + pandera)", lambda: gate.schema_failures(loaded.frame)),
        ("label conflicts", lambda: gate.find_label_conflicts(loaded.frame)),
        ("context checks (label_inconsistencies)", lambda: label_inconsistencies(parsed)),
        ("count rows", lambda: gate.count_rows(loaded)),
    ]:
        stages[name], _ = timed(stage)
    stages["whole gate (validate_samples)"], report = timed(lambda: gate.validate_samples(loaded))
    stages["report.md"], _ = timed(lambda: render_markdown(report))
    return stages


def failures_csv(out: Path) -> bytes:
    """The failures.csv of the one run folder under `out`."""
    (run_dir,) = out.iterdir()
    return (run_dir / "failures.csv").read_bytes()


def time_readers(frame: pl.DataFrame, folder: Path) -> None:
    """`toolgrpo validate` on `frame` as JSONL, whole and 1% broken, native vs line by line
    (temporary server)."""
    rows = frame.height
    valid, broken = folder / "valid.jsonl", folder / "broken.jsonl"
    write_jsonl(frame, valid)
    broken_lines = write_jsonl(frame, broken, BROKEN_EVERY)
    print(f"\nthe loader's readers, end to end; load average {os.getloadavg()}")
    print(f"{'file':34} {'native':>8} {'line by line':>13} {'ratio':>6}")
    for name, path, status in [
        (f"{rows:,} valid rows", valid, 0),
        (f"{rows:,} rows, {broken_lines:,} broken", broken, 1),
    ]:
        seconds = {}
        for line_by_line in (False, True):
            out = folder / f"runs-{path.stem}-{line_by_line}"
            run = cli_run(path, out, line_by_line)
            if run.status != status:
                raise SystemExit(f"toolgrpo validate {path.name} exited {run.status}")
            seconds[line_by_line] = run.seconds
        same = failures_csv(folder / f"runs-{path.stem}-False") == failures_csv(
            folder / f"runs-{path.stem}-True"
        )
        if not same:
            raise SystemExit(f"{path.name}: the two readers reported different problems")
        print(
            f"{name:34} {seconds[False]:7.1f}s {seconds[True]:12.1f}s "
            f"{seconds[True] / seconds[False]:5.1f}x"
        )


def time_end_to_end(frames: dict[str, pl.DataFrame], folder: Path) -> None:
    """`toolgrpo validate` on each of `frames` as JSONL, with a running server and with the
    temporary one, side by side: seconds and peak RSS; the runs alternate between the kinds of
    rows so that a change in the machine's load falls on both."""
    paths = {}
    for name, frame in frames.items():
        paths[name] = folder / f"{name}.jsonl"
        write_jsonl(frame, paths[name])
    small = DATA_DIR / SHIPPED[0]
    runs: dict[tuple[str, str], CliRun] = {}
    with running_server() as api_url:
        runs["running", "small"] = cli_run(small, folder / "runs-small-served", False, api_url)
        for name, path in paths.items():
            runs["running", name] = cli_run(path, folder / f"runs-{name}-served", False, api_url)
    runs["temporary", "small"] = cli_run(small, folder / "runs-small", False)
    for name, path in paths.items():
        runs["temporary", name] = cli_run(path, folder / f"runs-{name}", False)
    for name in paths:
        if runs["running", name].status or runs["temporary", name].status:
            raise SystemExit(f"toolgrpo validate failed the {name} rows, which are all valid")
    print(
        f"\ntoolgrpo validate, end to end, in a fresh process each; load average "
        f"{os.getloadavg()} on {len(os.sched_getaffinity(0))} usable CPUs"
    )
    print(
        "| rows | distinct prompts / solutions | running server | peak RSS | "
        "temporary server | peak RSS |"
    )
    print("|---|---|---|---|---|---|")
    rows_of = {"small": f"{small.name} ({sum(1 for _ in small.open())} rows)"}
    for name, frame in frames.items():
        rows_of[name] = f"{frame.height:,} {name}"
    counts = {
        name: f"{frame['prompt'].n_unique():,} / {frame['solution'].n_unique():,}"
        for name, frame in frames.items()
    }
    for name, label in rows_of.items():
        served, temporary = runs["running", name], runs["temporary", name]
        print(
            f"| {label} | {counts.get(name, '')} | {served.seconds:.1f} s | "
            f"{served.peak_gb:.2f} GB | {temporary.seconds:.1f} s | {temporary.peak_gb:.2f} GB |"
        )


def main(
    rows: int = 1_000_000,
    unique_solutions: bool = False,
    end_to_end: bool = True,
    readers: bool = False,
    schemas: bool = True,
    drawn: Path | None = None,
) -> None:
    """Time the polars schema and the pandas one on the same ROWS rows, side by side (unless
    --no-schemas); then (unless --no-end-to-end) `toolgrpo validate` on ROWS repeated and ROWS
    distinct rows as JSONL files, side by side, and where the distinct rows' seconds go;
    --readers: the loader's native readers against line by line; --drawn FILE.parquet keeps
    the distinct rows there (drawn once, read back by later runs of as many rows)."""
    frame = synthetic_rows(rows, unique_solutions)
    if schemas:
        time_schemas(frame)
    if not end_to_end:
        return
    if (
        drawn is not None
        and drawn.exists()
        and pl.scan_parquet(drawn).select(pl.len()).collect().item() == rows
    ):
        distinct = pl.read_parquet(drawn)
    else:
        start = time.perf_counter()
        distinct = distinct_rows(rows)
        print(f"\n{rows:,} distinct rows drawn in {time.perf_counter() - start:.1f} s")
        if drawn is not None:
            distinct.write_parquet(drawn)
    with tempfile.TemporaryDirectory(prefix="bench-validate-") as folder:
        time_end_to_end({"repeated": frame, "distinct": distinct}, Path(folder))
        print(f"\nwhere the seconds go ({rows:,} distinct rows, in process, no Prefect):")
        for stage, seconds in stage_seconds(Path(folder, "distinct.jsonl")).items():
            print(f"  {stage:42} {seconds:6.2f} s")
        if readers:
            time_readers(frame, Path(folder))


def time_schemas(frame: pl.DataFrame) -> None:
    """The polars schema and its pandas twin on `frame`, side by side."""
    rows = frame.height
    pandas_frame = frame.to_pandas()
    distinct = frame["solution"].n_unique()
    print(f"{rows:,} rows, {distinct:,} distinct solutions; load average {os.getloadavg()}")

    polars_s, polars_errors = timed(
        lambda: failures_or_none(lambda: ParsedSample.validate(parse_solution(frame), lazy=True))
    )
    pandas_s, pandas_errors = timed(
        lambda: failures_or_none(
            lambda: PandasSample.validate(parse_solution_pandas(pandas_frame), lazy=True)
        )
    )
    for name, errors in (("polars", polars_errors), ("pandas", pandas_errors)):
        if errors is not None:
            raise SystemExit(f"{name} schema rejected the synthetic rows:\n{errors}")
    print(f"polars  {polars_s:6.2f} s  {rows / polars_s:12,.0f} rows/s")
    print(f"pandas  {pandas_s:6.2f} s  {rows / pandas_s:12,.0f} rows/s")
    print(f"polars is {pandas_s / polars_s:.1f}x faster")


if __name__ == "__main__":
    cyclopts.run(main)
