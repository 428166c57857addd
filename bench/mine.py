"""Score the error miner against the planted label ambiguity, side by side with cleanlab alone.

The shipped data plants rows worded as withdraw requests but labelled check_balance; their ids
are in data/planted_ambiguity.json, which only tests and benchmarks read. This prints, for the
miner's `label ambiguity` flags and for cleanlab's `find_label_issues` on the same per-tool
probabilities: rows flagged, planted rows found, recall and precision, and the ratio.

    python bench/mine.py --eval-predictions E.parquet [--train-predictions T.parquet]
    python bench/mine.py --model DIR     # evaluates the shipped eval and train files first

Goal (issue 5): recall >= 90%, precision >= 80%.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import cyclopts
import polars as pl

from toolgrpo.data import DATA_DIR
from toolgrpo.evaluation.predict import EvalSettings, predict
from toolgrpo.mining.confident import ranked_label_issues
from toolgrpo.mining.report import mine_errors
from toolgrpo.schemas.catalogue import load_catalogue
from toolgrpo.validation.loader import load_samples

app = cyclopts.App(help=__doc__)


def _score(flagged: set[str], planted: set[str]) -> dict[str, object]:
    found = flagged & planted
    return {
        "flagged": len(flagged),
        "planted found": f"{len(found)}/{len(planted)}",
        "recall": len(found) / len(planted) if planted else None,
        "precision": len(found) / len(flagged) if flagged else None,
    }


def _percent(value: object) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


@app.default
def main(
    eval_predictions: Path | None = None,
    train_predictions: Path | None = None,
    model: Path | None = None,
    torch_threads: int = 2,
) -> None:
    """Mine the predictions (or a model's, computed here) and score against the planted rows."""
    catalogue = load_catalogue()
    if model is not None:
        settings = EvalSettings(torch_threads=torch_threads)
        started = time.perf_counter()
        splits = [sorted((DATA_DIR / split).glob("*.jsonl")) for split in ("eval", "train")]
        frames = [predict(model, load_samples(paths).frame, settings) for paths in splits]
        seconds = time.perf_counter() - started
        print(f"evaluated {sum(f.height for f in frames)} rows in {seconds:.0f} s")
    elif eval_predictions is not None:
        frames = [pl.read_parquet(eval_predictions)]
        if train_predictions is not None:
            frames.append(pl.read_parquet(train_predictions))
    else:
        raise SystemExit("pass --model DIR or --eval-predictions FILE")

    mined_ids = set(pl.concat([f.select("id") for f in frames])["id"])
    planted = set(json.loads((DATA_DIR / "planted_ambiguity.json").read_text())["ids"]) & mined_ids
    started = time.perf_counter()
    report = mine_errors(frames[0], frames[1] if len(frames) > 1 else None, catalogue)
    seconds = time.perf_counter() - started
    cleanlab_flags = {i for frame in frames for i in ranked_label_issues(frame, catalogue)}

    rows = {
        "miner (label ambiguity)": _score(set(report.ambiguity_ids), planted),
        "cleanlab find_label_issues": _score(cleanlab_flags, planted),
    }
    print(f"mined {len(mined_ids)} rows in {seconds:.1f} s; {len(planted)} planted rows among them")
    print("| method | flagged | planted found | recall | precision |")
    print("|---|---|---|---|---|")
    for name, score in rows.items():
        print(
            f"| {name} | {score['flagged']} | {score['planted found']} | "
            f"{_percent(score['recall'])} | {_percent(score['precision'])} |"
        )
    miner, cleanlab = rows.values()
    if miner["precision"] and cleanlab["precision"]:
        ratio = miner["precision"] / cleanlab["precision"]
        print(f"precision ratio miner / cleanlab: {ratio:.1f}x")
    pairs = ", ".join(
        f"{p.tool_a} ↔ {p.tool_b} ({p.n_overlapping})" for p in report.overlapping_pairs[:3]
    )
    print(f"overlapping tool pairs: {pairs or 'none'}")
    print(
        f"eval accuracy {_percent(report.accuracy.accuracy)}, without flagged rows "
        f"{_percent(report.accuracy.accuracy_without_flagged)}"
    )


if __name__ == "__main__":
    app()
