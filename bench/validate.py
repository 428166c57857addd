"""Validate 1,000,000 sample rows with the polars schema and with the same rules on pandas, then
time `toolgrpo validate` on the same rows as a JSONL file, end to end.

    python bench/validate.py [--rows 1000000] [--unique-solutions] [--no-end-to-end]

Rows are the shipped rows repeated with fresh ids. Both sides parse each distinct solution once
(polars with `str.json_path_match`, pandas with `json.loads`, its only JSON parser), so by default
JSON parsing is cheap; `--unique-solutions` makes every solution distinct (the worst case). The
context checks also judge each distinct text once: `bench/context_checks.py` times them on rows
whose every copy has texts of its own.
Prints seconds, rows/s and the polars speed-up, with the machine's load average.

End to end: the rows written as JSONL in a temporary folder, and a copy with 1% of its lines
broken (cut JSON, a string step, a missing tool); `toolgrpo validate` on each in a subprocess
(Prefect start-up, loading, checks, report files), with the loader's native readers and with
every line read by pydantic as before them; then, with a Prefect server already running (what a
`prefect server start` user has: `PREFECT_API_URL` set, no temporary server to start), a small
file and the valid rows; then where the seconds go, stage by stage, in this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cyclopts
import pandas as pd
import pandera.errors
import pandera.pandas as pap
import polars as pl
from prefect.server.api.server import SubprocessASGIServer
from prefect.settings import PREFECT_SERVER_ANALYTICS_ENABLED, temporary_settings

from toolgrpo.data import DATA_DIR
from toolgrpo.reporting.data_quality import render_markdown
from toolgrpo.schemas.catalogue import default_catalogue as catalogue
from toolgrpo.schemas.samples import (
    CONDITIONS,
    KINDS,
    LANGS,
    MAX_PROMPT_CHARS,
    PREVIOUS_STEP_LINE,
    PREVIOUS_STEPS_HEADER,
    ParsedSample,
    parse_solution,
)
from toolgrpo.tasks.runs import files_hash
from toolgrpo.validation import gate, loader
from toolgrpo.validation.context import label_inconsistencies

SHIPPED = ["train/single_step.jsonl", "train/multistep.jsonl", "eval/single_step.jsonl"]
SHIPPED += ["eval/multistep.jsonl", "eval/unseen_phrasing.jsonl"]
BROKEN_EVERY = 100  # 1% of the lines
# `toolgrpo validate ARGS`, as the console script runs it; {line_by_line} makes the loader read
# every line with pydantic (`load_samples(line_by_line=True)`, the reader before polars).
CLI = (
    "import functools, sys\n"
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


def solution_parts(text: str) -> dict[str, Any]:
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
    parts = pd.DataFrame([solution_parts(text) for text in distinct], index=distinct.to_numpy())
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


def cli_run(
    path: Path, out: Path, line_by_line: bool, api_url: str | None = None
) -> tuple[float, int]:
    """Seconds and exit status of `toolgrpo validate PATH --out OUT` in a fresh process (with a
    temporary Prefect server, or the running one at `api_url`)."""
    env = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", **os.environ}
    if api_url is not None:
        env["PREFECT_API_URL"] = api_url
    command = [sys.executable, "-c", CLI.format(line_by_line=line_by_line), str(path)]
    start = time.perf_counter()
    done = subprocess.run(
        [*command, "--out", str(out)], env=env, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):  # 1: the gate failed, as it should on broken rows
        raise SystemExit(f"toolgrpo validate {path} exited {done.returncode}:\n{done.stderr}")
    return seconds, done.returncode


def stage_seconds(path: Path) -> dict[str, float]:
    """Where the gate's seconds go on `path`, in this process (no Prefect)."""
    stages = {"data tag (files_hash)": timed(lambda: files_hash([path]))[0]}
    stages["load (native readers)"], loaded = timed(lambda: loader.load_samples([path]))
    data = path.read_bytes()
    rows = pl.read_lines(data, name="text").with_row_index("line", offset=1)
    plain = pl.Series([True] * rows.height)
    for whole in (True, False):  # the loader's decoding of plain rows, both ways
        name = "whole file, read_ndjson (the loader)" if whole else "line by line, json_decode"
        stages[f"  decoding the plain rows: {name}"], _ = timed(
            lambda whole=whole: loader._decoded(data, rows, plain, every_line_a_row=whole)
        )
    for name, stage in [
        ("row contract (parse_solution + pandera)", lambda: gate.schema_failures(loaded.frame)),
        ("label conflicts", lambda: gate.find_label_conflicts(loaded.frame)),
        ("context checks (label_inconsistencies)", lambda: label_inconsistencies(loaded.frame)),
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


def time_cli(frame: pl.DataFrame) -> None:
    """`toolgrpo validate` on `frame` as JSONL, whole and 1% broken, native vs line by line."""
    rows = frame.height
    with tempfile.TemporaryDirectory(prefix="bench-validate-") as folder:
        valid, broken = Path(folder, "valid.jsonl"), Path(folder, "broken.jsonl")
        write_jsonl(frame, valid)
        broken_lines = write_jsonl(frame, broken, BROKEN_EVERY)
        small = DATA_DIR / SHIPPED[0]
        startup_s, _ = cli_run(small, Path(folder, "runs-small"), line_by_line=False)
        print(
            f"\ntoolgrpo validate, end to end (a {sum(1 for _ in small.open())}-row file: "
            f"{startup_s:.1f} s, mostly start-up); load average {os.getloadavg()}"
        )
        print(f"{'file':34} {'native':>8} {'line by line':>13} {'ratio':>6}")
        for name, path, status in [
            (f"{rows:,} valid rows", valid, 0),
            (f"{rows:,} rows, {broken_lines:,} broken", broken, 1),
        ]:
            seconds = {}
            for line_by_line in (False, True):
                out = Path(folder, f"runs-{path.stem}-{line_by_line}")
                seconds[line_by_line], exit_status = cli_run(path, out, line_by_line)
                if exit_status != status:
                    raise SystemExit(f"toolgrpo validate {path.name} exited {exit_status}")
            same = failures_csv(Path(folder, f"runs-{path.stem}-False")) == failures_csv(
                Path(folder, f"runs-{path.stem}-True")
            )
            if not same:
                raise SystemExit(f"{path.name}: the two readers reported different problems")
            print(
                f"{name:34} {seconds[False]:7.1f}s {seconds[True]:12.1f}s "
                f"{seconds[True] / seconds[False]:5.1f}x"
            )
        server = SubprocessASGIServer()  # what `prefect server start` serves, minus the UI
        # its telemetry heartbeat races the runs' writes on sqlite ("database is locked")
        with temporary_settings({PREFECT_SERVER_ANALYTICS_ENABLED: False}):
            server.start()
        try:
            print(f"\nwith a running Prefect server ({server.api_url}), native readers:")
            for name, path in [(small.name, small), (f"{rows:,} valid rows", valid)]:
                out = Path(folder, f"runs-served-{path.stem}")
                seconds, _ = cli_run(path, out, line_by_line=False, api_url=server.api_url)
                print(f"{name:34} {seconds:7.1f}s")
        finally:
            server.stop()
        print(f"\nwhere the seconds go ({rows:,} valid rows, in process, no Prefect):")
        for stage, seconds in stage_seconds(valid).items():
            print(f"  {stage:42} {seconds:6.2f} s")


def main(rows: int = 1_000_000, unique_solutions: bool = False, end_to_end: bool = True) -> None:
    """Time the polars schema and the pandas one on the same ROWS rows, side by side; then (unless
    --no-end-to-end) `toolgrpo validate` on them as a JSONL file."""
    frame = synthetic_rows(rows, unique_solutions)
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
    if end_to_end:
        time_cli(frame)


if __name__ == "__main__":
    cyclopts.run(main)
