"""Score the error miner against planted label errors: the shipped wording ambiguity, and kinds
of annotator mistakes whose evidence is in the context, planted in a temporary copy.

The shipped data plants rows worded as withdraw requests but labelled check_balance; their ids
are in data/planted_ambiguity.json, which only tests and benchmarks read. The default command
scores the miner's `label ambiguity` flags on given predictions, side by side with cleanlab's
`find_label_issues` on the same per-tool probabilities:

    python bench/mine.py --eval-predictions E.parquet [--train-predictions T.parquet]
    python bench/mine.py --model DIR     # evaluates the shipped eval and train files first

`planted` copies the shipped training files to a temporary folder, plants the mistakes of
`KINDS` there (seeded, each kind in scenarios of its own; the shipped files are only read),
runs the real main job on the copy (`toolgrpo run --train …`: gate, training, evaluation, the
cross-fitted audit, mining) and prints recall per kind, precision over every training row
flagged as a label issue, and each false alarm with its evidence:

    python bench/mine.py planted [--preset cpu] [--set FIELD=VALUE]… [--audit-folds K]
    python bench/mine.py planted --run RUN_DIR   # re-mine a planted run's predictions, no training
    python bench/mine.py planted --domain smart-home   # the second domain's rows and catalogue

`context` scores the context checks alone (no model, seconds): the same kinds planted in the
shipped training rows and in a second domain's (a smart-home catalogue and rows,
`bench/domains/smart_home.py`), with wrong params among them; recall per kind, precision over
the flagged rows, the share of the domain's clean rows flagged, each false alarm and each miss:

    python bench/mine.py context [--domain finance|smart-home|both] [--seed N] [--untuned]
    python bench/mine.py context --domain own --rows my/train/*.jsonl --catalogue my_tools.json

Goals (issue 17): recall >= 80% on every kind, precision >= 80%, the wording kind 9/9, no false
alarm on the shipped rows. Issue 44: wrong params >= 80% on both domains, precision >= 90%, at
most 1% of the second domain's clean rows flagged, the shipped kinds >= 92% at 100% precision.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import cyclopts
import polars as pl
from cyclopts import Parameter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `bench.…` as a script, too

from bench import planting
from bench.domains import smart_home
from bench.planting import (
    WRONG_PARAMS,
    Kind,
    copy_row_above,
    label_the_goal_first,
    relabel_pair,
    relabelled,
    reply_instead,
    score_context_checks,
    solution_of,
    swap_adjacent_steps,
    wrong_params,
)
from toolgrpo.data import DATA_DIR
from toolgrpo.evaluation.predict import EvalSettings, predict
from toolgrpo.flows.cli import config_overrides
from toolgrpo.mining.categorise import LABEL_ISSUES
from toolgrpo.mining.confident import ranked_label_issues
from toolgrpo.mining.miner import MiningReport, mine_errors
from toolgrpo.schemas.catalogue import default_catalogue, load_catalogue
from toolgrpo.schemas.samples import normalise_prompt
from toolgrpo.validation.loader import load_samples

app = cyclopts.App(help=__doc__)
Row = dict[str, Any]
WORDING = "wording (shipped)"
ANSWER_KEY = "planted.json"
ROWS_PER_KIND = 12


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


def _shipped_wording_ids() -> set[str]:
    return set(json.loads((DATA_DIR / "planted_ambiguity.json").read_text())["ids"])


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
    planted = _shipped_wording_ids() & mined_ids
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


# --- realistic annotator mistakes, planted in a copy of the training files --------------------


# What an annotator who misread the figures writes: a reply, in the row's language.
_REFUSAL = {
    "en": (
        "The condition is not met, so now I reply to the user.",
        "The condition you set is not met, so I did not go ahead.",
        "tell the user why not",
    ),
    "zh": (
        "条件不满足，所以现在需要回复用户。",
        "您设定的条件不满足，所以没有执行。",
        "告诉用户原因",
    ),
}
_SAME_PARAMS = {"deposit": "withdraw", "withdraw": "deposit"}


# A coherent answer for the tool a misunderstood request suggests: balance ↔ statement.
_REWRITTEN = {
    "check_balance": (
        "get_transactions",
        {
            "en": ("Then I list the last 30 days of transactions of {account}.", "list 30 days"),
            "zh": ("然后列出 {account} 最近 30 天的交易记录。", "列出 30 天交易记录"),
        },
    ),
    "get_transactions": (
        "check_balance",
        {
            "en": ("Then I check the balance of {account}.", "check the balance of {account}"),
            "zh": ("然后查询 {account} 的余额。", "查询 {account} 余额"),
        },
    ),
}


def rewrite_for_another_tool(scenario: list[Row], rng: random.Random) -> list[Row] | None:
    """The last step answered, coherently, for the tool a misread request suggests (the new
    balance read as a statement, or back): thought, action and plan agree with each other."""
    last = scenario[-1]
    if last["tool"] not in _REWRITTEN:
        return None
    tool, wording = _REWRITTEN[last["tool"]]
    account = solution_of(last)["action"]["params"]["account"]
    thought, step = (text.format(account=account) for text in wording[last["lang"]])
    params = {"account": account} | ({"days": 30} if tool == "get_transactions" else {})
    solution = {"thought": thought, "action": {"tool": tool, "params": params}, "plan": [step]}
    return [relabelled(last, tool, solution, None)]


KINDS: dict[str, Kind] = {
    "misread figures": reply_instead(_REFUSAL),
    "copied row above": copy_row_above,
    "tool changed, reasoning kept": relabel_pair(_SAME_PARAMS, default_catalogue()),
    "goal labelled first": label_the_goal_first,
    "adjacent steps swapped": swap_adjacent_steps,
    "answer rewritten for another tool": rewrite_for_another_tool,
    WRONG_PARAMS: wrong_params(default_catalogue()),
}


def plant_mistakes(rows: list[Row], seed: int = 0) -> tuple[list[Row], dict[str, str]]:
    """`rows` (the shipped training rows) with `ROWS_PER_KIND` rows of every kind replaced, and
    the answer key (id → kind). Each kind takes whole multi-step scenarios of its own, half of
    them English; scenarios holding a shipped planted row are left alone."""
    return planting.plant_mistakes(rows, KINDS, ROWS_PER_KIND, seed, _shipped_wording_ids())


def write_planted_copy(folder: Path, seed: int) -> tuple[list[Path], dict[str, str]]:
    """The shipped training files with mistakes planted, written to `folder` with the answer key
    (`planted.json`); returns the files and the key."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = sorted((DATA_DIR / "train").glob("*.jsonl"))
    per_file = {
        path: [json.loads(line) for line in path.read_text().splitlines()] for path in paths
    }
    planted, key = plant_mistakes([row for rows in per_file.values() for row in rows], seed)
    by_id = {row["id"]: row for row in planted}
    copies = []
    for path, rows in per_file.items():
        copy = folder / path.name
        lines = [{k: v for k, v in by_id[r["id"]].items() if v is not None} for r in rows]
        copy.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines))
        copies.append(copy)
    (folder / ANSWER_KEY).write_text(json.dumps(key, indent=2, ensure_ascii=False) + "\n")
    return copies, key


HOME_CATALOGUE, HOME_EVAL = "tools.json", "eval"
EVAL_DRAW = 1000  # the smart-home eval rows: drawn with the seed + this, ids prefixed `eval-`


def write_planted_home(folder: Path, seed: int) -> tuple[list[Path], dict[str, str]]:
    """The smart-home domain as a team would bring it (`bench.domains.smart_home`): its training
    rows with its kinds of mistakes planted, held-out rows of other draws (`eval/`) and its
    catalogue (`tools.json`), written to `folder` with the answer key."""
    (folder / HOME_EVAL).mkdir(parents=True, exist_ok=True)
    smart_home.write_catalogue(folder / HOME_CATALOGUE)
    home = smart_home.catalogue()
    rows, key = planting.plant_mistakes(
        smart_home.rows(seed), smart_home.kinds(home), ROWS_PER_KIND, seed
    )
    seen = {normalise_prompt(row["prompt"]) for row in rows}
    drawn = smart_home.rows(seed + EVAL_DRAW, singles=120, multis=80)
    repeated = {row["scenario_id"] for row in drawn if normalise_prompt(row["prompt"]) in seen}
    held_out = [  # split by scenario, as the gate checks: no prompt seen in training
        {**row, "id": f"eval-{row['id']}", "scenario_id": f"eval-{row['scenario_id']}"}
        for row in drawn
        if row["scenario_id"] not in repeated
    ]
    for path, lines in (
        (folder / "train.jsonl", rows),
        (folder / HOME_EVAL / "home.jsonl", held_out),
    ):
        lines = [{k: v for k, v in row.items() if v is not None} for row in lines]
        path.write_text("".join(json.dumps(row) + "\n" for row in lines))
    (folder / ANSWER_KEY).write_text(json.dumps(key, indent=2) + "\n")
    return [folder / "train.jsonl"], key


def _domain_files(folder: Path, domain: str) -> tuple[list[Path], list[Path], Path | None]:
    """A planted folder's training files, eval files and catalogue (None: the shipped one)."""
    if domain == "smart-home":
        return (
            [folder / "train.jsonl"],
            [folder / HOME_EVAL / "home.jsonl"],
            folder / HOME_CATALOGUE,
        )
    return sorted(folder.glob("*.jsonl")), sorted((DATA_DIR / "eval").glob("*.jsonl")), None


def _remined(
    run_dir: Path, train_files: list[Path], eval_files: list[Path], catalogue: Path | None
) -> tuple[MiningReport, set[str]]:
    """A planted run's saved predictions mined again with the current miner, and the training
    rows cleanlab flags on the in-sample audit (the comparison the cross-fitted audit answers)."""
    tools = load_catalogue(catalogue) if catalogue else default_catalogue()
    labels = load_samples([*train_files, *eval_files], None, tools).frame
    audit_path, cross_fitted_path = run_dir / "eval_train", run_dir / "audit"
    audit = pl.read_parquet(audit_path / "predictions.parquet")
    cross_fitted_file = cross_fitted_path / "predictions.parquet"
    cross_fitted = pl.read_parquet(cross_fitted_file) if cross_fitted_file.is_file() else None
    predictions = pl.read_parquet(run_dir / "eval_grpo" / "predictions.parquet")
    report = mine_errors(predictions, audit, tools, cross_fitted, labels)
    return report, set(ranked_label_issues(audit, tools))


def print_planted_scores(
    report: MiningReport, key: dict[str, str], in_sample_cleanlab: set[str], domain: str
) -> None:
    """Recall per kind, precision over the flagged training rows, the false alarms."""
    flagged = {f.id: f for f in report.findings if f.category in LABEL_ISSUES}
    wording = _shipped_wording_ids() if domain == "finance" else set()
    kinds = {kind: {i for i, k in key.items() if k == kind} for kind in dict.fromkeys(key.values())}
    if wording:
        kinds = {WORDING: wording} | kinds
    out_of_sample = (
        set(report.label_issues.get("train", [])) if report.label_issues_out_of_sample else set()
    )
    columns = ["kind", "planted", "flagged (recall)", "by a context rule"]
    columns += ["cleanlab out of sample", "cleanlab in sample"]
    print("| " + " | ".join(columns) + " |")
    print("|---|---|---|---|---|---|")
    for kind, ids in kinds.items():
        found = ids & set(flagged)
        by_rule = {i for i in found if flagged[i].category.value == "label inconsistency"}
        print(
            f"| {kind} | {len(ids)} | {len(found)} ({_percent(len(found) / len(ids))}) | "
            f"{len(by_rule)} | {len(ids & out_of_sample)} | {len(ids & in_sample_cleanlab)} |"
        )
    train_flagged = {i for i, f in flagged.items() if f.split == "train"}
    planted = set(key) | wording
    true = train_flagged & planted
    print(
        f"\nprecision over flagged training rows: {len(true)}/{len(train_flagged)} "
        f"({_percent(len(true) / len(train_flagged) if train_flagged else None)}); "
        f"cleanlab out of sample flags {len(out_of_sample)} training rows "
        f"({len(out_of_sample & planted)} planted), in sample {len(in_sample_cleanlab)} "
        f"({len(in_sample_cleanlab & planted)} planted)"
    )
    alarms = [f for i, f in flagged.items() if i not in planted]
    print(f"false alarms (flagged, not planted): {len(alarms)}")
    for finding in alarms:
        print(f"- {finding.id} ({finding.split}, {finding.category.value}): {finding.evidence}")


@app.command
def planted(
    *,
    preset: str = "cpu",
    set_: Annotated[list[str] | None, Parameter(name="--set", negative="")] = None,
    audit_folds: int | None = None,
    seed: int = 0,
    out: Path | None = None,
    run: Path | None = None,
    domain: str = "finance",
) -> None:
    """Plant the mistakes of `KINDS` in a copy of the training files (in OUT, default a new
    temporary folder), run the main job on it and score the miner; with RUN (an earlier
    planted run's folder), re-mine its saved predictions instead of training. DOMAIN
    `smart-home`: the second domain's rows, eval rows and catalogue instead
    (`write_planted_home`), with its kinds of mistakes."""
    from toolgrpo.flows.retrain import RetrainOverrides, retrain

    if run is not None:
        folder = run.parent.parent
        key = json.loads((folder / ANSWER_KEY).read_text())
        train_files, eval_files, catalogue = _domain_files(folder, domain)
    else:
        folder = out or Path(tempfile.mkdtemp(prefix="toolgrpo-planted-"))
        write = write_planted_home if domain == "smart-home" else write_planted_copy
        _, key = write(folder, seed)
        train_files, eval_files, catalogue = _domain_files(folder, domain)
        print(f"planted {len(key)} rows in {folder}; running the main job on them")
        started = time.perf_counter()
        own_domain = {"eval_files": eval_files, "catalogue": catalogue, "label_overrides": None}
        summary = retrain(
            preset=preset,
            train_files=train_files,
            out=folder / "runs",
            config=RetrainOverrides.from_dotted(config_overrides(set_ or [])),
            **(own_domain if catalogue else {}),
            **({"audit_folds": audit_folds} if audit_folds is not None else {}),
        )
        run = summary.run_dir
        stages = ", ".join(f"{stage} {seconds:.0f} s" for stage, seconds in summary.wall_s.items())
        print(f"main job: {time.perf_counter() - started:.0f} s ({stages}); run: {run}")
    report, in_sample = _remined(run, train_files, eval_files, catalogue)
    print_planted_scores(report, key, in_sample, domain)


def _shipped_training_rows() -> list[Row]:
    paths = sorted((DATA_DIR / "train").glob("*.jsonl"))
    return [json.loads(line) for path in paths for line in path.read_text().splitlines()]


def print_context_scores(domain: str, scores: dict[str, Any], planted: list[Row]) -> None:
    """Recall per kind, precision, clean rows flagged, each false alarm and each miss."""
    print(f"\n## {domain}\n")
    print("| kind | planted | flagged (recall) |")
    print("|---|---|---|")
    for kind, score in scores["kinds"].items():
        found = f"{score['flagged']} ({_percent(score['recall'])})"
        print(f"| {kind} | {score['planted']} | {found} |")
    true = scores["flagged"] - len({i for i, *_ in scores["false_alarms"]})
    print(
        f"\nprecision over flagged rows: {true}/{scores['flagged']} "
        f"({_percent(scores['precision'])}); clean rows flagged: {scores['clean_flagged']}/"
        f"{scores['clean_rows']} ({_percent(scores['clean_rate'])})"
    )
    for row_id, check, evidence in scores["false_alarms"]:
        print(f"- false alarm {row_id} [{check}]: {evidence}")
    by_id = {row["id"]: row for row in planted}
    for row_id in scores["missed"]:
        request = by_id[row_id]["prompt"].split("\n")[0]
        print(f"- missed {row_id} ({by_id[row_id]['tool']}): {request}")


@app.command
def context(
    *,
    domain: str = "both",
    seed: int = 0,
    untuned: bool = False,
    rows: list[Path] | None = None,
    catalogue: Path | None = None,
) -> None:
    """Plant the mistakes of each domain's kinds (wrong params among them) and score the context
    checks alone, no model: DOMAIN is `finance` (the shipped training rows and catalogue),
    `smart-home` (`bench.domains.smart_home`: its rows drawn with SEED, its catalogue with its
    one keyword tuning pass unless --untuned), `both`, or `own`: your ROWS (JSONL files) and
    CATALOGUE, with the kinds that need no words of a domain (copied row, swapped steps, goal
    first, wrong params)."""
    if domain == "own":
        if not rows or catalogue is None:
            raise SystemExit("--domain own needs --rows FILE… and --catalogue PATH")
        own = load_catalogue(catalogue)
        clean = [json.loads(line) for path in rows for line in path.read_text().splitlines()]
        kinds = {
            "copied row above": copy_row_above,
            "goal labelled first": label_the_goal_first,
            "adjacent steps swapped": swap_adjacent_steps,
            WRONG_PARAMS: wrong_params(own),
        }
        planted_rows, key = planting.plant_mistakes(clean, kinds, ROWS_PER_KIND, seed)
        scores = score_context_checks(clean, planted_rows, key, own)
        print_context_scores(f"your rows ({catalogue})", scores, planted_rows)
        return
    if domain in ("finance", "both"):
        clean = _shipped_training_rows()
        planted_rows, key = plant_mistakes(clean, seed)
        started = time.perf_counter()
        scores = score_context_checks(clean, planted_rows, key, default_catalogue())
        print(f"finance: {len(clean)} rows, checked twice in {time.perf_counter() - started:.1f} s")
        print_context_scores("finance (shipped catalogue and training rows)", scores, planted_rows)
    if domain in ("smart-home", "both"):
        home = smart_home.catalogue(tuned=not untuned)
        clean = smart_home.rows(seed)
        kinds = smart_home.kinds(home)
        planted_rows, key = planting.plant_mistakes(clean, kinds, ROWS_PER_KIND, seed)
        scores = score_context_checks(clean, planted_rows, key, home)
        keywords = "first keywords" if untuned else "keywords tuned once"
        print_context_scores(f"smart home ({keywords}, seed {seed})", scores, planted_rows)


if __name__ == "__main__":
    app()
