"""Issue #16's levers, each alone and together: SFT of the cpu preset, then greedy evaluation.

    .venv/bin/python bench/numeracy_levers.py [--epochs 6] [--aux-share 0.2] [--threads 1]
        [--arms baseline,digits,both,padded,counted,decided,…] [--seed 0]
        [--eval-rows N] [--out DIR] [--set sft.learning_rate=1e-3,…] [--drills 4000]

Arms: `baseline` trains on the shipped rows, `digits` on the rows whose conditional reasoning
restated both figures as digits before the verdict (lever 1, shipped from b3c1f7b until it was
measured and reverted; read from git at `--digits-rev`), `exercises` on the shipped rows plus
the numeracy exercises at `--aux-share` (lever 2), `both` on the digits rows plus the exercises,
`redraws` on the shipped rows plus fresh draws of the conditional steps (data/aux/conditional.jsonl)
at `--aux-share`, `grouped` on the digits rows with each restated figure grouped by thousands
(`560,000`, as balances are written), `grouped+exercises` on those plus the exercises,
`comparisons` on the digits rows plus `--drills` comparison drills
(`generator.numeracy.comparison_drills`: cover exercises whose figures are plain digits, drawn so
that the comparison is the lesson; written into the arm's folder) at `--aux-share`, `padded` on
the digits rows and drills with both compared figures zero-padded to 10 digits (`需要 0000560000
· 余额 0004937231 → 够`: the form `bench/comparison_probe.py` found easier to compare),
`counted` with each compared figure followed by its count of whole digits (`需要 560000 [6] · 余额
4937231 [7] → 够`: written after the figure, so no digit is needed before it is copied),
`decided` counted and, where the counts are equal, the first digits that differ (`需要 3550 [4] ·
余额 5666 [4] · 3 < 5 → 够`), `walked` counted and, where the counts are equal, every pair of digits
from the first to the first that differs (`需要 190000 [6] · 余额 197451 [6] · 1=1 9=9 0<7 → 够`:
each place one step, so the deciding pair is found, not guessed).
`--set` applies the same preset overrides to every arm (e.g. SFT's peak).
The training rows are what differs: every arm runs this checkout's code and evaluates on this
checkout's eval files (their prompts are the same at both revisions). Prints one table:
per-file accuracy and the conditional steps per comparison kind and branch, as right/n, and
each arm's SFT wall time. Two arms run at a time, one torch thread each (`bench/sft_arms.py`,
which runs arms of other settings the same way).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from sft_arms import (  # bench/, this script's folder
    parse_settings,
    run_side_by_side,
    train_and_evaluate,
)

from toolgrpo.data import DATA_DIR
from toolgrpo.generator.build import REDRAWS_FILE
from toolgrpo.generator.comparisons import (
    PairForm,
    compared_in,
    counted,
    drill_figures,
    places,
    rewritten_thought,
    walked,
    whole,
)
from toolgrpo.generator.numeracy import EXERCISES_FILE, comparison_drills
from toolgrpo.training.config_overrides import load_preset

DIGITS_REV = "b2b2a71"  # the last commit that shipped the digit-restating reasoning
TRAIN_FILES = ("single_step.jsonl", "multistep.jsonl")
EXERCISES, REDRAWS = DATA_DIR / EXERCISES_FILE, DATA_DIR / REDRAWS_FILE
# an arm: its training rows (the shipped ones; `digits`: those of `--digits-rev`; `grouped`: those
# with every restated figure of 4+ digits grouped by thousands; `padded`, `counted`, `decided`,
# `walked`: with both compared figures in that form), and the auxiliary rows SFT mixes in (if any;
# `COMPARISONS`: drills drawn for the arm, in its rows' form)
COMPARISONS = Path("comparisons.jsonl")
PAD_TO = 10  # digits: scenario balances reach 9
ARMS = {
    "baseline": ("shipped", None),
    "digits": ("digits", None),
    "exercises": ("shipped", EXERCISES),
    "both": ("digits", EXERCISES),
    "redraws": ("shipped", REDRAWS),
    "grouped": ("grouped", None),
    "grouped+exercises": ("grouped", EXERCISES),
    "comparisons": ("digits", COMPARISONS),
    "padded": ("padded", COMPARISONS),
    "counted": ("counted", COMPARISONS),
    "decided": ("decided", COMPARISONS),
    "walked": ("walked", COMPARISONS),
}
# a figure's whole part of 4+ digits (not a decimal's fraction)
LONG_FIGURE = re.compile(r"(?<![\d.])\d{4,}")


def grouped(figures: str) -> str:
    """`需要 560,000 · 余额 4,937,231`: the prompt's own way of writing a balance, so copying it is
    verbatim and the comparison starts from the count of groups."""
    return LONG_FIGURE.sub(lambda match: f"{int(match.group()):,}", figures)


def _padded(needed: str, balance: str) -> tuple[str, str]:
    """Equal places at a fixed distance, so the comparison is the first place that differs."""
    return tuple(f"{int(whole(f)):0{PAD_TO}d}{f[len(whole(f)) :]}" for f in (needed, balance))


def _decided(needed: str, balance: str) -> tuple[str, str]:
    """Counted, and where the counts are equal the first pair of digits that differ (`3550 [4] ·
    5666 [4] · 3 < 5`, `=` for equal whole parts): the comparison written out to one digit."""
    walk = places(needed, balance)
    deciding = ""
    if walk:
        a, sign, b = walk[-1]
        deciding = " · =" if sign == "=" else f" · {a} {sign} {b}"
    counted_needed, counted_balance = counted(needed, balance)
    return counted_needed, counted_balance + deciding


# the two compared figures, as written, in another form (`needed · balance`, `quote · limit`);
# `walked` is the one the cpu preset's rows are written in (generator/comparisons.py)
PAIR_FORMS: dict[str, PairForm] = {
    "padded": _padded,
    "counted": counted,
    "decided": _decided,
    "walked": walked,
}


def restated(line: str, rewrite: Callable[[str], str]) -> str:
    """A digits-rev row whose conditional reasoning restates its figures in another form: only
    the restatement (before `→`) changes."""
    row = json.loads(line)
    if not row.get("condition"):
        return line
    solution = json.loads(row["solution"])
    solution["thought"] = rewritten_thought(solution["thought"], rewrite)
    row["solution"] = json.dumps(solution, ensure_ascii=False)
    return json.dumps(row, ensure_ascii=False)


REWRITES = {"grouped": grouped} | {name: compared_in(form) for name, form in PAIR_FORMS.items()}


def _training_files(arm_dir: Path, rows: str, rev: str) -> dict[str, Path]:
    """The arm's training files: the shipped ones, or those of `rev` (`grouped`, `padded`, …:
    with their restated figures rewritten) written into `arm_dir`."""
    if rows == "shipped":
        return {name: DATA_DIR / "train" / name for name in TRAIN_FILES}
    files = {}
    for name in TRAIN_FILES:
        lines = subprocess.run(
            ["git", "show", f"{rev}:data/train/{name}"],
            cwd=DATA_DIR.parent,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.splitlines()
        if rows in REWRITES:
            lines = [restated(line, REWRITES[rows]) for line in lines]
        files[name] = arm_dir / name
        files[name].write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return files


def run_arm(name: str, args: argparse.Namespace) -> dict[str, str]:
    """Train the arm's SFT model in `<out>/<name>`, evaluate it, and return its `right/n` cells."""
    rows, aux = ARMS[name]
    arm_dir = args.out / name
    arm_dir.mkdir(parents=True, exist_ok=True)
    files = _training_files(arm_dir, rows, args.digits_rev)
    if aux == COMPARISONS:
        aux = arm_dir / COMPARISONS
        form = PAIR_FORMS.get(rows)
        restate = drill_figures(form) if form else None
        drills = comparison_drills(args.seed, args.drills, restate=restate)
        aux.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in drills))
    overrides = {
        "data.train_single_step": files["single_step.jsonl"],
        "data.train_multistep": files["multistep.jsonl"],
        **(
            {"data.train_aux": aux, "data.aux_share": args.aux_share}
            if aux
            else {"data.aux_share": 0.0}
        ),
        "sft.num_train_epochs": args.epochs,
        "seed": args.seed,
        **parse_settings(args.set),
    }
    return train_and_evaluate(arm_dir, overrides, args.threads, args.eval_rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--epochs", type=float, default=load_preset("cpu").sft.num_train_epochs)
    parser.add_argument("--aux-share", type=float, default=0.2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0, help="of the tiny model, row draws, SFT")
    parser.add_argument("--eval-rows", type=int, default=None, help="rows per eval file (quick)")
    parser.add_argument("--digits-rev", default=DIGITS_REV)
    parser.add_argument("--set", default="", help="field=value,… overrides for every arm")
    parser.add_argument("--drills", type=int, default=4000, help="comparison drills drawn")
    parser.add_argument("--out", type=Path, default=Path("/tmp/numeracy-levers"))
    args = parser.parse_args()
    title = f"SFT only, cpu preset, {args.epochs:g} epochs, aux share {args.aux_share:g}"
    title += f", seed {args.seed}" + (f", {args.set}" if args.set else "")
    run_side_by_side(args.arms.split(","), lambda arm: run_arm(arm, args), title)


if __name__ == "__main__":
    main()
