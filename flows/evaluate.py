"""The evaluate flow: greedy, batched evaluation of any saved model on sample files."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from toolgrpo.evaluation.predict import EvalSettings
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


@flow(name="evaluate", log_prints=True)
def evaluate(
    model: Path,
    data: list[Path],
    out: Path = Path("runs"),
    overrides: Path | None = None,
    settings: EvalSettings | None = None,
) -> EvalReport:
    """Evaluate the saved MODEL on DATA (JSONL or parquet); files in a new folder of OUT.

    Raises `UnreadableData` when a data file or row cannot be read (nothing is evaluated).
    """
    loaded = load_samples(data, overrides)
    if loaded.problems:
        raise UnreadableData(loaded.problems)
    return evaluate_model(
        model, loaded.frame, new_run_dir(out, "evaluate"), settings or EvalSettings()
    )
