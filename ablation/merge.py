"""Ablations run apart, read as one: seeds trained on other days, machines or sessions merge into
one summary across seeds — refused, naming what differs, when they are not one experiment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from toolgrpo.ablation.arms import AblationError, ArmRun, Scores, Start
from toolgrpo.ablation.summary import AblationSummary, aggregate_arms
from toolgrpo.schemas.errors import validation_problems

SUMMARY_FILE = "ablation.json"
# What every merged ablation must share, apart from its training settings.
SHARED_FIELDS = ("preset", "steps", "eval_every", "eval_rows", "multi_rows")


def read_summary(path: Path) -> AblationSummary:
    """The summary at `path`: an ablation.json, or the run folder that holds one."""
    file = path / SUMMARY_FILE if path.is_dir() else path
    if path.is_dir() and not file.exists():
        raise AblationError(
            f"{path}: no {SUMMARY_FILE} (an unfinished ablation? `toolgrpo ablate --resume "
            f"{path}` with the command that started it finishes it)"
        )
    try:
        return AblationSummary.model_validate_json(file.read_bytes())
    except OSError as error:
        raise AblationError(f"{file}: cannot be read ({error.strerror})") from None
    except ValidationError as error:
        problems = validation_problems(error, whole="file")
        raise AblationError(f"{file}: not an ablation summary ({problems})") from None


def _settings(summary: AblationSummary) -> dict[str, Any]:
    """The training settings that make runs comparable: the overrides but the seed."""
    return {key: value for key, value in (summary.overrides or {}).items() if key != "seed"}


def _setting(settings: dict[str, Any], key: str) -> str:
    return f"{key}={settings[key]!r}" if key in settings else f"{key} unset"


def _check_shared(summaries: dict[str, AblationSummary]) -> None:
    (first_name, first), *others = summaries.items()
    for name, summary in others:
        for field in SHARED_FIELDS:
            if getattr(summary, field) != getattr(first, field):
                raise AblationError(
                    f"{name}: {field} is {getattr(summary, field)} where {first_name} has "
                    f"{getattr(first, field)}: not one experiment"
                )
    recorded = [(name, _settings(s)) for name, s in summaries.items() if s.overrides is not None]
    for name, settings in recorded[1:]:
        base_name, base = recorded[0]
        differing = sorted(
            k for k in settings.keys() | base.keys() if settings.get(k) != base.get(k)
        )
        if differing:
            raise AblationError(
                f"{name}: trained with {', '.join(_setting(settings, k) for k in differing)} "
                f"where {base_name} has {', '.join(_setting(base, k) for k in differing)}: "
                "not one experiment"
            )


def _merged_runs(summaries: dict[str, AblationSummary]) -> list[ArmRun]:
    """Every arm run once; each start of a seed the same SFT checkpoint (by its scores)."""
    arms: dict[tuple[Start, str, int], str] = {}
    starts: dict[tuple[Start, int], tuple[str, Scores]] = {}
    runs = []
    for name, summary in summaries.items():
        for run in summary.runs:
            where = f"the {run.arm} arm from the {run.start} start, seed {run.seed}"
            if (other := arms.setdefault((run.start, run.arm, run.seed), name)) != name:
                raise AblationError(f"{name}: {where}, is also in {other}")
            other, scores = starts.setdefault((run.start, run.seed), (name, run.curve[0]))
            if scores != run.curve[0]:
                raise AblationError(
                    f"{name}: {where}, starts from SFT scores (multi-step {run.curve[0].multi}, "
                    f"single-step {run.curve[0].single}) other than {other}'s ({scores.multi}, "
                    f"{scores.single}): not the same start"
                )
            runs.append(run)
    return runs


def merge_summaries(summaries: dict[str, AblationSummary]) -> AblationSummary:
    """One summary of the arm runs in `summaries` (source name → summary), aggregated across
    seeds as if one ablation had run them all. Raises `AblationError` naming the source and what
    differs when they are not one experiment: preset, steps, checkpoint interval or evaluation
    rows; training settings apart from the seed (where recorded); an arm and seed in two
    sources; or one start and seed whose SFT checkpoint scored differently."""
    if not summaries:
        raise AblationError("no ablation summary to merge")
    _check_shared(summaries)
    runs = _merged_runs(summaries)
    first = next(iter(summaries.values()))
    recorded = [_settings(s) for s in summaries.values() if s.overrides is not None]
    return AblationSummary(
        preset=first.preset,
        steps=first.steps,
        eval_every=first.eval_every,
        seeds=sorted({run.seed for run in runs}),
        eval_rows=first.eval_rows,
        multi_rows=first.multi_rows,
        arms=aggregate_arms(runs),
        runs=runs,
        failed=[f"{name}: {line}" for name, s in summaries.items() for line in s.failed],
        wall_s=sum(s.wall_s for s in summaries.values()),
        overrides=recorded[0] if recorded else None,
        merged_from=list(summaries),
        unchecked=[name for name, s in summaries.items() if s.overrides is None],
    )
