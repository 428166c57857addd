"""The ground-truth reward: exact points per branch, robustness, thought/action consistency."""

import json
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgrpo.training.rewards import (
    COMPONENT_REWARDS,
    RewardWeights,
    ground_truth_reward,
    params_reward,
    reasoning_reward,
    thought_action_consistent,
    tool_reward,
)

BALANCE_SOLUTION = json.dumps(
    {
        "thought": "先查余额。",
        "action": {"tool": "check_balance", "params": {"account": "ACC001"}},
        "plan": ["check balance", "transfer if sufficient"],
    },
    ensure_ascii=False,
)
BALANCE_PARAMS = {"account": "ACC001"}
TRANSFER_PARAMS = {"from_account": "ACC001", "to_account": "wealth", "amount": 100000}


def completion(thought="", tool="check_balance", params=None, plan=None, **extra) -> str:
    body = {"thought": thought, "action": {"tool": tool, "params": params or {}}, "plan": plan}
    return json.dumps(body | extra, ensure_ascii=False)


def reward(text) -> float:
    return ground_truth_reward([text], [BALANCE_SOLUTION])[0]


@pytest.mark.parametrize(
    ("thought", "plan", "expected"),
    [
        ("I need to check the balance first.", ["check", "transfer"], 1.0),
        ("需要先查余额。", ["查余额", "转账"], 1.0),
        ("The user asks about the account.", ["check"], 0.95),  # no logic word
        ("用户询问账户。", ["查询"], 0.95),
        ("Check the balance, because the transfer depends on it.", None, 0.9),  # no plan
        ("因为转账取决于余额。", [], 0.9),  # empty plan earns nothing
        ("", ["check"], 0.8),  # empty thought: no thought, no logic-word points
        ("   ", ["check"], 0.8),
        ("since", ["", "transfer"], 0.9),  # a blank plan item voids the plan
    ],
)
def test_labelled_tool_with_valid_params_scores_reasoning_and_plan(thought, plan, expected):
    text = completion(thought, "check_balance", BALANCE_PARAMS, plan)
    assert reward(text) == pytest.approx(expected)


def test_logic_words_match_whole_english_words_case_insensitively():
    assert reward(completion("FIRST look", "check_balance", BALANCE_PARAMS, ["a"])) == 1.0
    # "authentication" contains "then", "firstly" is not "first": neither is a logic word.
    text = completion("authentication firstly", "check_balance", BALANCE_PARAMS, ["a"])
    assert reward(text) == pytest.approx(0.95)


def test_valid_but_wrong_tool_keeps_the_format_incentive():
    # The case study's failure: a sound thought, the wrong tool, incomplete params.
    text = completion(
        "用户想先确认余额是否充足，然后转账。需要先查余额。",
        "transfer_funds",
        {"amount": 100000},
        ["check balance", "transfer if sufficient"],
    )
    assert reward(text) == pytest.approx(0.1 + 0.0 + 0.3)
    text = completion("Transfer now.", "transfer_funds", TRANSFER_PARAMS, ["transfer"])
    assert reward(text) == pytest.approx(0.1 + 0.2 + 0.25)


@pytest.mark.parametrize("tool", ["delete_account", "", 42, None, ["check_balance"]])
def test_tool_outside_the_catalogue_earns_no_tool_or_params_points(tool):
    text = completion("First check.", tool, BALANCE_PARAMS, ["check"])
    assert reward(text) == pytest.approx(0.3)


@pytest.mark.parametrize(
    "params",
    [
        {},  # missing required key
        {"account": "ACC001", "currency": "CNY"},  # unknown key
        {"account": 1},  # wrong type
        {"account": "savings"},  # pattern
        ["ACC001"],  # not an object
        "ACC001",
    ],
)
def test_params_that_break_the_chosen_tools_schema_earn_nothing(params):
    text = json.dumps(
        {
            "thought": "先查余额",
            "action": {"tool": "check_balance", "params": params},
            "plan": ["x"],
        },
        ensure_ascii=False,
    )
    assert reward(text) == pytest.approx(0.8)


@pytest.mark.parametrize(
    "params",
    [
        {"from_account": "ACC001", "to_account": "wealth", "amount": 0},  # amounts must be > 0
        {"from_account": "ACC001", "to_account": "wealth", "amount": -5},
        {"from_account": "ACC001", "to_account": "wealth", "amount": "100"},
    ],
)
def test_transfer_amounts_must_be_positive_numbers(params):
    text = completion("Transfer.", "transfer_funds", params, ["transfer"])
    assert reward(text) == pytest.approx(0.1 + 0.15 + 0.1)


def test_params_are_checked_against_the_chosen_tool_not_the_labelled_one():
    # Valid for transfer_funds (chosen), not for check_balance (labelled): params points count.
    text = completion("", "transfer_funds", TRANSFER_PARAMS, None)
    assert reward(text) == pytest.approx(0.1 + 0.2)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "I would check the balance.",
        "[1, 2, 3]",
        "42",
        '"a string"',
        '{"thought": "unterminated',
        "null",
        '{"thought": 5, "action": "check_balance", "plan": "check"}',
        '{"action": {"tool": {"name": "check_balance"}}}',
    ],
)
def test_unparseable_or_mistyped_output_scores_zero(text):
    assert reward(text) == 0.0


def test_json_inside_code_fences_and_prose_is_scored():
    body = completion("First check.", "check_balance", BALANCE_PARAMS, ["check"])
    assert reward(f"Sure! Here it is:\n```json\n{body}\n```\nDone.") == 1.0


def test_conversational_completions_are_scored_like_strings():
    body = completion("先查余额", "check_balance", BALANCE_PARAMS, ["查余额"])
    assert reward([{"role": "assistant", "content": body}]) == 1.0


def test_components_sum_to_the_ground_truth_reward():
    texts = [
        completion("先查余额", "check_balance", BALANCE_PARAMS, ["查余额"]),
        completion("Transfer.", "transfer_funds", TRANSFER_PARAMS, None),
        completion("", "nope", {}, ["x"]),
        "garbage",
    ]
    solutions = [BALANCE_SOLUTION] * len(texts)
    parts = [f(texts, solutions) for f in (tool_reward, params_reward, reasoning_reward)]
    assert [round(sum(p), 6) for p in zip(*parts, strict=True)] == ground_truth_reward(
        texts, solutions
    )
    assert parts == [[0.5, 0.1, 0.0, 0.0], [0.2, 0.2, 0.0, 0.0], [0.3, 0.15, 0.1, 0.0]]


def test_reward_functions_have_names_trl_logs():
    assert [f.__name__ for f in COMPONENT_REWARDS] == [
        "tool_reward",
        "params_reward",
        "reasoning_reward",
    ]


def test_custom_weights_pass_through_partial():
    weights = RewardWeights(tool=1.0, valid_wrong_tool=0.0, params=0.0, thought=0.0, logic_word=0.0)
    weighted = partial(ground_truth_reward, weights=weights)
    texts = [
        completion("", "check_balance", BALANCE_PARAMS, ["a"]),
        completion("", "withdraw", {}, None),
    ]
    assert weighted(texts, [BALANCE_SOLUTION] * 2) == [1.1, 0.0]
    assert weights.max_reward == pytest.approx(1.1)
    assert RewardWeights().max_reward == 1.0


def test_weights_that_pay_a_wrong_tool_more_are_refused():
    with pytest.raises(ValueError, match="valid_wrong_tool"):
        RewardWeights(tool=0.1, valid_wrong_tool=0.5)
    with pytest.raises(ValueError, match="negative"):
        RewardWeights(params=-0.2)


def test_unparseable_solution_still_pays_a_valid_tool_as_wrong():
    text = completion("", "check_balance", BALANCE_PARAMS, None)
    assert ground_truth_reward([text], ["not json"]) == [pytest.approx(0.3)]


def test_reward_logs_consistency_rate_through_trls_log_metric():
    logged = {}
    texts = [
        completion("需要先查余额，然后转账。", "transfer_funds", TRANSFER_PARAMS, ["a"]),
        completion("需要先查余额，然后转账。", "check_balance", BALANCE_PARAMS, ["a"]),
    ]
    ground_truth_reward(texts, [BALANCE_SOLUTION] * 2, log_metric=logged.__setitem__)
    assert logged == {"thought_action_consistent": 0.5}


def test_tool_reward_logs_the_share_of_completions_with_the_labelled_tool():
    logged = {}
    texts = [
        completion("先查余额。", "check_balance", BALANCE_PARAMS, ["a"]),
        completion("先查余额。", "transfer_funds", TRANSFER_PARAMS, ["a"]),
        "no JSON at all",
        completion("先查余额。", "check_balance", BALANCE_PARAMS, ["a"]),
    ]
    tool_reward(texts, [BALANCE_SOLUTION] * 4, log_metric=logged.__setitem__)
    assert logged == {"tool_accuracy": 0.5}


@pytest.mark.parametrize(
    ("thought", "tool", "consistent"),
    [
        # The case study's failure, in its own words and in English.
        ("用户想先确认余额是否充足，然后转账。需要先查余额。", "transfer_funds", False),
        ("用户想先确认余额是否充足，然后转账。需要先查余额。", "check_balance", True),
        ("I need to check the balance first, then transfer.", "transfer_funds", False),
        ("I need to check the balance first, then transfer.", "check_balance", True),
        ("First, check the balance; then transfer 100k.", "check_balance", True),
        ("首先查一下AAPL的股价，再决定买不买。", "place_order", False),
        ("首先查一下AAPL的股价，再决定买不买。", "get_quote", True),
        # A later step recalls what came first; "now" marks the step it commits to.
        ("The balance was checked first and it is enough; now transfer.", "transfer_funds", True),
        ("第一步已查余额，余额充足，现在转账。", "transfer_funds", True),
        ("余额不足，无法转账，需要告诉用户。", "respond", True),
        # Without "now", "then"/然后/所以 mark the step that follows what is done.
        ("存款已完成，然后转 98万 到 活期账户。", "transfer_funds", True),
        ("存款已完成，然后转 98万 到 活期账户。", "deposit", False),
        ("The deposit is done, then I check what is left in ACC727.", "deposit", False),
        # A negated keyword names what the thought will not do.
        ("余额 361 元 不足 600块，所以不能转账，需要告诉用户。", "respond", True),
        ("余额 361 元 不足 600块，所以不能转账，需要告诉用户。", "transfer_funds", False),
        ("Balance is short, so I cannot withdraw; tell the user.", "withdraw", False),
        # "in order to" is not a place_order keyword.
        (
            "The balance is 1,047; then I need the price of TSM in order to compare.",
            "get_quote",
            True,
        ),
        (
            "The balance is 1,047; then I need the price of TSM in order to compare.",
            "place_order",
            False,
        ),
        # "I will"/"let me"/我会 commit too: what follows is the step, not the rest of the thought.
        ("I will check the balance; the transfer comes after.", "transfer_funds", False),
        ("I will check the balance; the transfer comes after.", "check_balance", True),
        ("我会查余额，转账之后再说。", "transfer_funds", False),
        # Without a step marker, the action must be one of the tools the thought names.
        ("The user wants the price of AAPL.", "get_quote", True),
        ("The user wants the price of AAPL.", "place_order", False),
        ("用户想存款。", "withdraw", False),
        ("Let me think.", "respond", True),  # names no tool: nothing contradicts the action
    ],
)
def test_thought_and_action_consistency_in_both_languages(thought, tool, consistent):
    assert thought_action_consistent(completion(thought, tool, {}, ["x"])) is consistent


@pytest.mark.parametrize(
    "text",
    ["", "no json", "[]", completion("", "check_balance"), completion("check first", "nope")],
)
def test_unparseable_or_incomplete_output_is_not_consistent(text):
    assert thought_action_consistent(text) is False


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
    | st.sampled_from(["check_balance", "transfer_funds", "ACC001", "先查余额", "\ud800"]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["thought", "action", "tool", "params", "plan", "account", "amount"])
            | st.text(max_size=5),
            children,
            max_size=5,
        )
    ),
    max_leaves=12,
)
completions_text = st.one_of(
    st.text(),
    st.text(alphabet='{}[]":, thoughtaction', max_size=200),
    json_values.map(lambda value: json.dumps(value, ensure_ascii=False)),
    json_values.map(lambda value: json.dumps(value)),
    st.builds(lambda n: '{"thought": "' + "x" * n + '"', st.integers(0, 50_000)),
    st.builds(lambda n: "[" * n + "{}" + "]" * n, st.integers(0, 5_000)),
    st.just('{"thought": "\ud800", "action": {"tool": "check_balance"}, "plan": ["\udfff"]}'),
)
any_completion = st.one_of(
    completions_text,
    completions_text.map(lambda text: [{"role": "assistant", "content": text}]),
    st.lists(st.dictionaries(st.sampled_from(["role", "content"]), json_values), max_size=3),
    json_values,
)


@settings(max_examples=1000, deadline=None)
@given(any_completion, st.one_of(st.just(BALANCE_SOLUTION), completions_text))
def test_reward_never_raises_and_stays_within_bounds(completion_value, solution):
    [score] = ground_truth_reward([completion_value], [solution], log_metric=lambda *_: None)
    assert 0.0 <= score <= 1.0
    assert isinstance(thought_action_consistent(completion_value), bool)
