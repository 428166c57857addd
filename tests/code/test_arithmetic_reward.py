"""The arithmetic component (issue #16 lever 4): a conditional step earns it only for stating the
figures its condition compares and acting as they say; nothing else is scored, nothing raises."""

import json

import pytest
from hypothesis import given, settings
from test_rewards import any_completion, completion

from toolgrpo.data import DATA_DIR
from toolgrpo.schemas.catalogue import default_catalogue
from toolgrpo.training.arithmetic import (
    arithmetic_reward,
    comparison_right,
    stated_comparison,
)
from toolgrpo.training.config_overrides import load_preset, with_overrides
from toolgrpo.training.grpo import grpo_dataset, reward_functions
from toolgrpo.training.model import train_tokenizer
from toolgrpo.training.rewards import RewardWeights

POINTS = RewardWeights(arithmetic=0.2)
TRANSFER = (
    "ACC010 余额足够的话，转账 56万 给 ACC149\n\nPrevious steps:\n"
    "Step 1: check_balance → 余额 4,937,231 元"
)
ORDER = (
    "用 ACC703 买 150 股 META，前提是钱够\n\nPrevious steps:\n"
    "Step 1: check_balance → 余额 76,521 元\nStep 2: get_quote → META 现价 633.07"
)
TRANSFER_PARAMS = {"from_account": "ACC010", "to_account": "ACC149", "amount": 560000}

CATALOGUE = default_catalogue()


def score(text: str, request: str = TRANSFER, condition: str | None = "holds") -> float:
    return arithmetic_reward(
        [text], [""], request=[request], condition=[condition], weights=POINTS
    )[0]


def _rows(name: str) -> list[dict]:
    path = DATA_DIR / name
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("name", ["train/multistep.jsonl", "eval/multistep.jsonl"])
def test_every_shipped_conditional_label_states_its_comparison_right(name):
    """The labels are the reference: each conditional step's thought restates both figures (as
    written, in any format amounts_in reads) and its action is the branch they imply."""
    conditional = [row for row in _rows(name) if row.get("condition")]
    assert len(conditional) > 40
    verdicts = [
        comparison_right(r["solution"], r["prompt"], r["condition"], CATALOGUE) for r in conditional
    ]
    assert verdicts == [True] * len(conditional)


@pytest.mark.parametrize(
    ("thought", "tool", "expected"),
    [
        ("余额 4,937,231 元 足够支付 56万，所以现在转账。", "transfer_funds", 0.2),
        ("The balance 4937231 covers 560,000, so I transfer now.", "transfer_funds", 0.2),
        # the branch the figures imply, guessed: invented figures earn nothing
        ("余额 1,066 元 足够支付 10万，所以现在转账。", "transfer_funds", 0.0),
        ("余额 4,937,231 元 足够，所以现在转账。", "transfer_funds", 0.0),  # one figure
        # the right figures, the wrong branch
        ("余额 4,937,231 元 不足 56万，所以不能转账。", "respond", 0.0),
    ],
)
def test_a_transfer_condition_pays_the_stated_figures_and_the_branch_they_imply(
    thought, tool, expected
):
    params = TRANSFER_PARAMS if tool == "transfer_funds" else {"message": "不够"}
    assert score(completion(thought, tool, params)) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("thought", "tool", "expected"),
    [
        ("余额 4,937,231 元 足够支付 56万，所以现在转账。", "transfer_funds", (True, True)),
        ("余额 4,937,231 元 不足 56万，所以不能转账。", "respond", (True, False)),  # misjudged
        ("余额 1,066 元 足够支付 10万，所以现在转账。", "transfer_funds", (False, True)),  # misread
    ],
)
def test_reading_the_figures_and_acting_on_them_are_told_apart(thought, tool, expected):
    params = TRANSFER_PARAMS if tool == "transfer_funds" else {"message": "不够"}
    assert (
        stated_comparison(completion(thought, tool, params), TRANSFER, "holds", CATALOGUE)
        == expected
    )
    assert stated_comparison("not json", TRANSFER, "holds", CATALOGUE) == (False, False)
    assert stated_comparison(completion(thought, tool, params), TRANSFER, None, CATALOGUE) is None


def test_an_order_condition_compares_the_balance_with_quantity_times_price():
    # 150 × 633.07 = 94,960.50 > 76,521: the request's condition fails, so the step replies
    cost_stated = "150 股需要 94,960.50，但余额只有 76,521 元，所以现在回复资金不足。"
    assert score(completion(cost_stated, "respond", {"message": "x"}), ORDER, "fails") == 0.2
    price_only = "150 股 META 现价 633.07，余额 76,521 元，所以现在回复资金不足。"
    assert score(completion(price_only, "respond", {"message": "x"}), ORDER, "fails") == 0.0


@pytest.mark.parametrize("text", ["", "not json", '{"thought": 5}', '{"action": "respond"}'])
def test_malformed_output_earns_nothing_on_a_conditional_step(text):
    assert score(text) == 0.0


def test_a_step_without_a_condition_or_readable_figures_has_nothing_to_check():
    assert score("garbage", condition=None) == pytest.approx(0.2)
    assert score("garbage", request="转账 给 ACC149，如果够的话") == pytest.approx(0.2)


def test_the_reward_needs_the_request_and_condition_columns():
    with pytest.raises(ValueError, match="`request` and `condition` columns"):
        arithmetic_reward(["x"], ["y"], weights=POINTS)


@settings(max_examples=300, deadline=None)
@given(any_completion)
def test_arithmetic_reward_never_raises_and_stays_within_bounds(completion_value):
    for request, condition in ((TRANSFER, "holds"), (ORDER, "fails"), (TRANSFER, None)):
        [points] = arithmetic_reward(
            [completion_value], [""], request=[request], condition=[condition], weights=POINTS
        )
        assert points in (0.0, 0.2)


def test_grpo_scores_arithmetic_only_when_it_has_points(tmp_path):
    off = load_preset("smoke")
    on = with_overrides(off, {"grpo.reward_points.arithmetic": 0.2})
    catalogue = off.data.tool_catalogue()
    names = [f.func.__name__ for f in reward_functions(off, catalogue)]
    assert names == ["tool_reward", "params_reward", "reasoning_reward"]
    assert [f.func.__name__ for f in reward_functions(on, catalogue)][-1] == "arithmetic_reward"
    assert on.grpo.reward_points.max_reward == pytest.approx(1.2)
    # the columns it reads: every row's prompt as written and its condition (None off a condition)
    tokenizer = train_tokenizer(["a b c"], vocab_size=300)
    dataset = grpo_dataset(on, tokenizer, catalogue)
    assert {"request", "condition", "solution"} <= set(dataset.column_names)
    assert all(row["prompt"].endswith("assistant\n") for row in dataset.select(range(3)))
    assert set(dataset["condition"]) <= {None, "holds", "fails"}
