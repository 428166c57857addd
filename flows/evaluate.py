"""The evaluate flow: greedy, batched evaluation of any saved model on sample files."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from toolgrpo.evaluation.predict import EvalSettings
from toolgrpo.flows.prefect_api import record_process
from toolgrpo.schemas.catalogue import catalogue_at
from toolgrpo.schemas.problems import Problem
from toolgrpo.tasks.evaluate import EvalReport, evaluate_model
from toolgrpo.tasks.load import load_samples
from toolgrpo.tasks.runs import new_run_dir


class UnreadableData(ValueError):
    """Sample files that cannot be evaluated; carries every problem the loader found."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(f"{len(problems)} problem(s) reading the data files")
        self.problems = problems

    def __reduce__(self):  # Prefect pickles exceptions into states
        return type(self), (self.problems,)


@flow(name="evaluate", log_prints=True, on_running=[record_process])
def evaluate(
    model: Path,
    data: list[Path],
    out: Path = Path("runs"),
    overrides: Path | None = None,
    settings: EvalSettings | None = None,
    catalogue: Path | None = None,
) -> EvalReport:
    """Evaluate the saved MODEL on DATA (JSONL or parquet) with the tool catalogue CATALOGUE it
    was trained with (default: the shipped data/tools.json); files in a new folder of OUT.

    Raises `UnreadableData` when a data file or row cannot be read (nothing is evaluated).
    """
    tools = catalogue_at(catalogue)
    loaded = load_samples(data, overrides, tools)
    if loaded.problems:
        raise UnreadableData(loaded.problems)
    out_dir = new_run_dir(out, "evaluate")
    return evaluate_model(model, loaded.frame, out_dir, settings or EvalSettings(), catalogue=tools)
