"""Context checks on labels: amounts as people write them, and each rule against a row that
breaks it (located by file:line, with the evidence), in the gate as warnings."""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgrpo.data import DATA_DIR
from toolgrpo.generator.slots import MONEY_STYLES, balance_text, price_text
from toolgrpo.schemas.figures import Amount, amounts_in
from toolgrpo.schemas.samples import PREVIOUS_STEPS_HEADER, parse_solution, split_prompt
from toolgrpo.tasks.load import load_samples
from toolgrpo.tasks.validate import validate_samples
from toolgrpo.validation import context, spread
from toolgrpo.validation.context import label_inconsistencies
from toolgrpo.validation.label_rules import (
    BRANCH_MATCHES_FIGURES,
    PARAMS_MATCH_REQUEST,
    PLAN_STARTS_WITH_ACTION,
    RULES,
    STEP_MATCHES_HISTORY,
    STEP_NAMED_BY_REQUEST,
    STEP_NOT_REPEATED,
    THOUGHT_ANNOUNCES_ACTION,
    LabelInconsistency,
)
from toolgrpo.validation.screens import (
    PARTS_READ,
    ROW,
    _history_lines,
    _request_reads,
    _written_as_a_word,
)
from toolgrpo.validation.stated_values import ASCII_WORD

# --- amounts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100,000", 100_000),
        ("100k", 100_000),
        ("10万", 100_000),
        ("13.5万", 135_000),
        ("6 万", 60_000),
        ("5000元", 5_000),
        ("98,404 元", 98_404),
        ("200块", 200),
        ("50 rupees", 50),
        ("$50", 50),
        ("562.54", 562.54),
    ],
)
def test_an_amount_parses_to_its_value_whatever_its_format(text, value):
    assert amounts_in(f"转 {text} 到 ACC002") == [Amount(text, value)]
    assert amounts_in(f"send {text}, then stop") == [Amount(text, value)]


def test_digits_of_an_account_or_a_step_number_inside_a_word_are_no_amount():
    assert amounts_in("Check ACC437 and ACC002") == []
    assert amounts_in("从ACC437取13.5万") == [Amount("13.5万", 135_000)]


def test_every_amount_the_generator_writes_parses_back_to_its_value():
    rng = random.Random(0)
    for lang, styles in MONEY_STYLES.items():
        for style in styles:
            for _ in range(200):
                money = style(rng)
                assert amounts_in(money.text) == [Amount(money.text, money.value)]
                balance = rng.randint(1, 5_000_000)
                assert [a.value for a in amounts_in(balance_text(balance, lang))] == [balance]
    assert amounts_in(price_text(562.5)) == [Amount("562.50", 562.5)]


# --- the rules, each against a row that breaks it --------------------------------------------


def _solution(tool: str, params: dict[str, Any], thought: str, plan: list[str]) -> str:
    action = {"tool": tool, "params": params}
    return json.dumps({"thought": thought, "action": action, "plan": plan}, ensure_ascii=False)


CHECK = ("check_balance", {"account": "ACC001"}, "I check ACC001 first.", ["check ACC001"])
TRANSFER = (
    "transfer_funds",
    {"from_account": "ACC001", "to_account": "ACC002", "amount": 100_000},
    "The balance covers it, so now I transfer 10万.",
    ["transfer 10万 to ACC002"],
)
REPLY = (
    "respond",
    {"message": "Your balance is too low."},
    "It is not enough, so now I tell the user.",
    ["tell the user why not"],
)
REQUEST = "Check ACC001; if it's enough, transfer 10万 to ACC002."


def _row(step: int, label: tuple, history: list[str], **fields: Any) -> dict[str, Any]:
    tool, params, thought, plan = label
    lines = [f"Step {i}: {line}" for i, line in enumerate(history, start=1)]
    prompt = REQUEST + ("\n\nPrevious steps:\n" + "\n".join(lines) if lines else "")
    return {
        "id": f"s-{step}",
        "scenario_id": "s",
        "kind": "multi",
        "lang": "en",
        "step": step,
        "n_steps": 2,
        "prompt": prompt,
        "solution": _solution(tool, params, thought, plan),
        "tool": tool,
        **fields,
    }


def loaded_rows(tmp_path: Path, *rows: dict[str, Any]) -> pl.DataFrame:
    """`rows` as the loader's frame (file and line included), read from a file in `tmp_path`."""
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return load_samples.fn([path]).frame


def _found(tmp_path: Path, *rows: dict[str, Any]) -> list[LabelInconsistency]:
    return label_inconsistencies(loaded_rows(tmp_path, *rows))


def scenario(balance: str = "balance 150,000", second: tuple = TRANSFER, **fields: Any):
    """A balance check, then `second` (a transfer or a reply) with the matching condition."""
    condition = {"condition": "fails" if second[0] == "respond" else "holds"}
    return [
        _row(1, CHECK, []),
        _row(2, second, [f"check_balance → {balance}"], **(condition | fields)),
    ]


def test_a_sound_scenario_has_no_finding(tmp_path):
    assert _found(tmp_path, *scenario()) == []
    assert _found(tmp_path, *scenario("balance 5,000", REPLY)) == []


def test_a_thought_that_announces_another_tool_than_the_action(tmp_path):
    """The case study's failure — "check the balance first", then a transfer — in a label."""
    first = (*TRANSFER[:2], "I need to check the balance first.", TRANSFER[3])
    (found,) = _found(tmp_path, _row(1, first, [], kind="single", n_steps=1))
    assert (found.check, found.line, found.alternative) == (
        THOUGHT_ANNOUNCES_ACTION,
        1,
        "check_balance",
    )
    assert "announces check_balance, its action is transfer_funds" in found.evidence


def test_a_plan_whose_first_step_is_another_tool_than_the_action(tmp_path):
    withdraw = ("withdraw", {"account": "ACC001", "amount": 100_000}, "Now.", ["deposit 10万"])
    (found,) = _found(tmp_path, _row(1, withdraw, [], kind="single", n_steps=1))
    assert (found.check, found.alternative) == (PLAN_STARTS_WITH_ACTION, "deposit")


def test_a_step_labelled_otherwise_than_the_history_of_a_later_step_records(tmp_path):
    first, second = scenario()
    (found,) = _found(tmp_path, {**first, **_row(1, TRANSFER, [])}, second)
    assert (found.id, found.check, found.alternative) == (
        "s-1",
        STEP_MATCHES_HISTORY,
        "check_balance",
    )
    assert f"{tmp_path / 'rows.jsonl'}:2" in found.evidence
    assert "records step 1 as check_balance → balance 150,000" in found.evidence


def test_a_step_that_redoes_the_step_its_history_shows_done(tmp_path):
    first, second = scenario()
    copied = {**second, **_row(2, CHECK, ["check_balance → balance 150,000"])}
    found = _found(tmp_path, first, copied)
    assert [(f.id, f.check) for f in found] == [("s-2", STEP_NOT_REPEATED)]
    assert "with the same params as s-1" in found[0].evidence


def test_the_same_tool_again_with_other_params_is_a_step_of_its_own(tmp_path):
    other = (*TRANSFER[:1], {**TRANSFER[1], "amount": 5}, *TRANSFER[2:])
    first = _row(1, TRANSFER, [])
    second = _row(2, other, ["transfer_funds → sent 10万"])
    for row in (first, second):
        row["prompt"] = (
            "Send 10万 and then 5 from ACC001 to ACC002." + row["prompt"][len(REQUEST) :]
        )
    assert _found(tmp_path, first, second) == []


STATEMENT = (
    "get_transactions",
    {"account": "ACC001", "days": 30},
    "Then I list the last 30 days of transactions of ACC001.",
    ["list 30 days"],
)


@pytest.mark.parametrize(
    ("last", "request_text", "flagged"),
    [
        (STATEMENT, "Transfer 10万 from ACC001 to ACC002, then show me what's left.", True),
        (STATEMENT, "从 ACC001 转 10万 到 ACC002，然后查一下余额", True),
        (CHECK, "Transfer 10万 from ACC001 to ACC002, then show me what's left.", False),
        # "my checking account" is an account, not a balance check
        (STATEMENT, "Send 10万 to my checking account, walk me through 30 days.", False),
    ],
)
def test_a_last_step_the_request_does_not_ask_for(tmp_path, last, request_text, flagged):
    """The request still asks for one tool its history has not done; the last step is
    labelled with a tool the request never names."""
    rows = [_row(1, TRANSFER, []), _row(2, last, ["transfer_funds → sent 10万 to ACC002"])]
    for row in rows:
        row["prompt"] = request_text + row["prompt"][len(REQUEST) :]
    found = _found(tmp_path, *rows)
    expected = [("s-2", STEP_NAMED_BY_REQUEST, "check_balance")] if flagged else []
    assert [(f.id, f.check, f.alternative) for f in found] == expected


def test_a_conditional_scenario_leaves_its_unsaid_checks_alone(tmp_path):
    """'If ACC001 can cover it, buy …' names no balance check, yet step 1 checks it."""
    assert _found(tmp_path, *scenario()) == []


@pytest.mark.parametrize(
    ("balance", "second", "why"),
    [
        ("balance 1,000,000", REPLY, "the check_balance budget 1,000,000 covers 10万 (100,000)"),
        (
            "balance 99,999",
            TRANSFER,
            "the check_balance budget 99,999 falls short of 10万 (100,000)",
        ),
        (
            "balance 6 万",
            TRANSFER,
            "the check_balance budget 6 万 (60,000) falls short of 10万 (100,000)",
        ),
    ],
)
def test_a_branch_the_balance_and_the_amount_asked_contradict(tmp_path, balance, second, why):
    (found,) = _found(tmp_path, *scenario(balance, second))
    assert (found.id, found.check) == ("s-2", BRANCH_MATCHES_FIGURES)
    assert found.evidence.startswith(why)


def test_a_reply_without_a_condition_label_is_checked_as_the_failing_branch(tmp_path):
    first, second = scenario("balance 1,000,000", REPLY)
    second.pop("condition")
    (found,) = _found(tmp_path, first, second)
    assert found.check == BRANCH_MATCHES_FIGURES
    assert found.evidence.endswith("yet the label replies")


def test_a_buy_branch_against_the_quantity_times_the_quoted_price(tmp_path):
    buy = ("place_order", {"symbol": "NIO", "side": "buy", "quantity": 300}, "Buy now.", ["buy"])
    request = "If ACC125 can cover it, buy 300 shares of NIO."
    history = ["check_balance → balance 200,000", "get_quote → NIO at 884.65"]
    row = _row(3, buy, history, n_steps=3, condition="holds") | {"prompt": request}
    row["prompt"] += "\n\nPrevious steps:\n" + "\n".join(
        f"Step {i}: {line}" for i, line in enumerate(history, start=1)
    )
    (found,) = _found(tmp_path, row)
    assert found.check == BRANCH_MATCHES_FIGURES
    assert "falls short of 300 × 884.65 = 265,395" in found.evidence


SELL = ("place_order", {"symbol": "KO", "side": "sell", "quantity": 3}, "I sell now.", ["sell 3"])


@pytest.mark.parametrize(
    ("request_text", "quote", "figures_hold"),
    [
        ("如果 SPY 跌破 237，帮我买 50 股", "SPY 现价 179.18", True),
        ("SPY 要是比 237 便宜，就入手 50 股", "SPY 现价 240.00", False),
        ("麻烦查下 SPY 的价，比 237 低就买入 50 股", "SPY 现价 179.18", True),
        ("先报个 KO 的价，只要在 445 之上，卖掉 3 股", "KO 现价 407.97", False),
        ("Sell 100 shares of KO if the price is above 819.", "KO at 707.97", False),
        ("Quote KO; sell 3 only if it beats 445.", "KO at 551.34", True),
    ],
)
def test_an_order_branch_against_the_quote_and_the_limit(
    tmp_path, request_text, quote, figures_hold
):
    """Each label takes the branch the figures rule out: a reply where the price meets the
    limit, an order where it does not."""
    label, condition = (REPLY, "fails") if figures_hold else (SELL, "holds")
    row = _row(2, label, [f"get_quote → {quote}"], condition=condition)
    row["prompt"] = request_text + row["prompt"][len(REQUEST) :]
    (found,) = [f for f in _found(tmp_path, row) if f.check != PARAMS_MATCH_REQUEST]
    assert found.check == BRANCH_MATCHES_FIGURES
    assert found.alternative == (None if figures_hold else "respond")


ORDER = ("place_order", {"symbol": "AMZN", "side": "buy", "quantity": 200}, "Buy now.", ["buy"])


def _single(label: tuple, request_text: str) -> dict[str, Any]:
    row = _row(1, label, [], kind="single", n_steps=1)
    return row | {"prompt": request_text}


def _with(label: tuple, **params: Any) -> tuple:
    return (label[0], {**label[1], **params}, *label[2:])


@pytest.mark.parametrize(
    ("label", "request_text", "evidence"),
    [
        (
            _with(ORDER, side="sell"),
            "Buy 200 AMZN for me.",
            'side sell, where the request states buy ("Buy")',
        ),
        (
            _with(ORDER, side="sell"),
            "给我买入 200 股 AMZN",
            'side sell, where the request states buy ("买")',
        ),
        (
            _with(ORDER, quantity=2000),
            "Buy 200 AMZN for me.",
            "quantity 2,000, where the request states 200",
        ),
        (
            _with(ORDER, symbol="AMD"),
            "Buy 200 AMZN for me.",
            "symbol AMD, where the request states AMZN",
        ),
        (
            _with(TRANSFER, amount=1_000_000),
            "从 ACC001 转 10万 到 ACC002",
            "amount 1,000,000, where the request states 10万 (100,000)",
        ),
        (
            _with(TRANSFER, from_account="ACC002", to_account="ACC001"),
            "ACC001 转 10万 给 ACC002",
            "from_account ACC002, where the request says “给 ACC002”: reversed",
        ),
        (
            _with(TRANSFER, from_account="ACC002", to_account="ACC001"),
            "Send 10万 to ACC002 from ACC001.",
            "from_account ACC002, where the request says “to ACC002”: reversed",
        ),
    ],
)
def test_params_that_contradict_what_the_request_states(tmp_path, label, request_text, evidence):
    (found,) = _found(tmp_path, _single(label, request_text))
    assert (found.check, found.evidence, found.alternative) == (
        PARAMS_MATCH_REQUEST,
        evidence,
        None,
    )


@pytest.mark.parametrize(
    ("label", "request_text"),
    [
        (ORDER, "If AMZN trades below 759, get me 200 shares."),  # the side unsaid
        (_with(ORDER, symbol="AMZN"), "帮我买 200 股亚马逊"),  # the symbol unsaid
        (STATEMENT, "Show ACC001's activity for the last month."),  # 30 days unsaid
        (STATEMENT, "Send 45 to ACC009 from ACC001, then a month of ACC001's history."),
        # each account where the request puts it: deposit into one, send on to another
        (TRANSFER, "Deposit 5 into ACC001, then send 10万 to ACC002."),
        (_with(TRANSFER, to_account="WEALTH"), "存 5 到 ACC001，再转 10万 给 理财账户"),
    ],
)
def test_params_the_request_does_not_state_are_not_judged(tmp_path, label, request_text):
    assert _found(tmp_path, _single(label, request_text)) == []


# Rows where polars and Python could read a param otherwise: amounts grouped, scaled, in
# fractions, too long for a float, in other digits, or said as a change; values of another JSON
# type, directions next to Chinese, values that are no single word, repeated accounts.
_PARAMS_EDGES = [
    (_with(TRANSFER, amount=1_000_000), "Send 1,000,000 from ACC001 to ACC002."),
    (_with(TRANSFER, amount=1_000_001), "Send 1,000,000 from ACC001 to ACC002."),
    (_with(TRANSFER, amount=25_000), "从 ACC001 转 2.5万 到 ACC002"),
    (_with(TRANSFER, amount=25_001), "从 ACC001 转 2.5万 到 ACC002"),
    (_with(TRANSFER, amount=5), "Send 123456789012345678901 from ACC001 to ACC002."),
    (_with(TRANSFER, amount=100_000), "从 ACC001 转 １０万 到 ACC002"),
    (_with(TRANSFER, amount="100000"), "Send 10万 from ACC001 to ACC002."),
    (_with(TRANSFER, amount=True), "Send 10万 from ACC001 to ACC002."),
    (_with(TRANSFER, amount=7), "Raise it by 7 and send 3 from ACC001 to ACC002."),
    (_with(TRANSFER, amount=1e300), "Send 10万 from ACC001 to ACC002."),
    (_with(TRANSFER, from_account="ACC002", to_account="ACC001"), "从ACC001转10万给ACC002"),
    (_with(TRANSFER, from_account="ACC002"), "Send 10万 to ACC002 from ACC002."),
    (_with(TRANSFER, from_account="ACC 002", to_account="ACC001"), "Send 5 to ACC 002."),
    (
        _with(TRANSFER, from_account="ACC002", to_account="ACC001", amount=5),
        "Send 5 to ACC002, ACC002.",
    ),
    (_with(TRANSFER, from_account=7), "Send 5 to ACC002 from ACC001."),
    (_with(TRANSFER, to_account="账户二"), "从 ACC001 转 5 到 账户二"),
    (_with(TRANSFER, from_account="ACC002", to_account="ACC001", amount=5), "Send 5 to ACC002."),
    (
        _with(TRANSFER, from_account="ACC002", to_account="ACC001", amount=5),
        "Into ACC002 from ACC002: 5.",
    ),
    (
        _with(TRANSFER, from_account="ACC002", to_account="ACC001", amount=5),
        "Send 5 to ACC002 from ACC001.",
    ),
    (
        _with(TRANSFER, from_account="ACC002", to_account="ACC001", amount=5),
        "Send 5 to ACC002, to ACC001.",
    ),
    (
        _with(TRANSFER, from_account="ACC002", to_account="ACC001", amount=5),
        "Send 5 to ACC002 我ACC001",
    ),
    (
        _with(TRANSFER, from_account="ACC002", to_account="ACC001", amount=5),
        "To ACC002_ from ACC001: 5.",
    ),
    (_with(ORDER, symbol="AMZN1"), "Buy 200 AMZN1 for me."),
    (_with(ORDER, symbol=None), "Buy 200 AMZN for me."),
    (_with(ORDER, side=["buy"]), "Buy 200 AMZN for me."),
    (_with(ORDER, quantity=200.5), "Buy 200.5 AMZN for me."),
    (_with(STATEMENT, days=14), "Show ACC001's last 14-day activity, not 30."),
    (_with(STATEMENT, days=30), "Show ACC001's last 14-day activity."),
]


def test_the_params_screen_keeps_every_finding_of_the_rule(tmp_path):
    """Read in polars or by the rule, the same findings on rows made to be read otherwise."""
    rows = [
        _single(label, text) | {"id": f"e-{i}", "scenario_id": f"e{i}"}
        for i, (label, text) in enumerate(_PARAMS_EDGES)
    ]
    frame = loaded_rows(tmp_path, *rows)
    screened = label_inconsistencies(frame)
    assert screened == label_inconsistencies(frame, screen=False)
    flagged = {f.id for f in screened if f.check == PARAMS_MATCH_REQUEST}
    reversed_ = _with(TRANSFER, from_account="ACC002", to_account="ACC001", amount=5)
    expected = [  # amounts and days written otherwise, a reversal
        (_with(TRANSFER, amount=1_000_001), "Send 1,000,000 from ACC001 to ACC002."),
        (_with(TRANSFER, amount=25_001), "从 ACC001 转 2.5万 到 ACC002"),
        (_with(STATEMENT, days=30), "Show ACC001's last 14-day activity."),
        (reversed_, "Send 5 to ACC002 from ACC001."),
    ]
    assert {f"e-{_PARAMS_EDGES.index(case)}" for case in expected} <= flagged


# word characters, others of one byte and of several, and runs about `ASCII_WORD`'s 64
_AROUND = st.text(alphabet=st.sampled_from(list("aZ0_ .,-我é\n")), max_size=6)
_VALUES = st.one_of(
    st.text(alphabet=st.sampled_from(list("aZ0_é-")), max_size=5),
    st.integers(62, 66).map(lambda n: "a" * n),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(_AROUND, _VALUES, _AROUND, _VALUES), min_size=1, max_size=30))
def test_a_value_found_written_as_a_word_is_one_of_the_requests_words(cases):
    """The params screen drops a row whose value the request writes as a word on its own: that
    value must be among the request's words (`ASCII_WORD`, as the rule cuts them out), for any
    characters around it, a value twice or written inside a longer word first."""
    texts = [before + value + after + other for before, value, after, other in cases]
    values = [value for _, value, _, _ in cases]
    frame = pl.DataFrame({"text": texts, "value": values})
    found = frame.select(_written_as_a_word(pl.col("text"), pl.col("value"))).to_series()
    for text, value, word in zip(texts, values, found.fill_null(False), strict=True):
        if word:
            assert value in ASCII_WORD.findall(text), (text, value)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(_AROUND, _VALUES), min_size=1, max_size=30))
def test_the_words_the_params_screen_reads_are_the_whole_ascii_words(parts):
    r"""Where the params screen finds a request's words (`_request_reads`): each `ASCII_WORD`
    with no `\w` character (the rule's `\b`) just before or after it, any characters around."""
    text = "".join(around + value for around, value in parts)

    def whole(word: re.Match[str]) -> bool:
        return not re.search(r"\w", text[word.start() - 1 : word.start()] + text[word.end() :][:1])

    expected = [word.span() for word in ASCII_WORD.finditer(text) if whole(word)]
    assert _request_reads(text, (), words=True)[0] == expected


# step numbers, tools and observations holding what the history's lines are cut at
_STEP = st.one_of(st.integers(0, 12).map(str), st.sampled_from(["", "x", "1a", "\u0661"]))
_LINE_TEXT = st.text(alphabet=st.sampled_from(list("aZ1:→ -_")), max_size=8)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_STEP, _LINE_TEXT, _LINE_TEXT, _LINE_TEXT), max_size=6))
def test_the_history_lines_are_the_steps_python_reads(lines):
    """The screens' history lines (`_history_lines`) are the steps `split_prompt` reads: each
    line's number, tool and observation, a number listed twice by its last line, for tools and
    observations holding ": " and " → ", and lines that are no step."""
    history = "\n".join(
        f"{noise}\nStep {step}: {tool} → {observation}" for step, tool, observation, noise in lines
    )
    prompt = PREVIOUS_STEPS_HEADER + history
    frame = pl.DataFrame({ROW: [0], "scenario_id": ["s"], "tool": ["t"], "prompt": [prompt]})
    read = _history_lines(frame.with_columns(pl.col(ROW).cast(pl.UInt32)))
    if read.get_column("unsure").any():  # a number of other digits Python reads: the rules do
        assert "\u0661" in history
        return
    steps = read.filter(pl.col("recorded_tool").is_not_null())
    _, expected = split_prompt(prompt)
    assert sorted(steps.select("recorded_step", "recorded_tool", "observation").rows()) == sorted(
        (step, done.tool, done.observation) for step, done in expected.items()
    )


def test_a_value_written_on_its_own_is_found_as_a_word():
    cases = {
        ("Pay ACC001 now", "ACC001"): True,
        ("ACC001", "ACC001"): True,
        ("从 ACC001 转", "ACC001"): True,
        ("我ACC001", "ACC001"): True,
        ("To ACC002_ from ACC001", "ACC002"): False,
        ("xACC003 and ACC003", "ACC003"): False,  # first written inside a word: the rule decides
        ("Pay ACC-1", "ACC-1"): False,
        ("Pay ACC004", "ACC005"): False,
    }
    frame = pl.DataFrame({"text": [t for t, _ in cases], "value": [v for _, v in cases]})
    found = frame.select(_written_as_a_word(pl.col("text"), pl.col("value")).fill_null(False))
    assert found.to_series().to_list() == list(cases.values())


def test_a_value_the_history_states_counts_once_the_request_states_one(tmp_path):
    """ "Send what's left" takes its amount from the balance step; an observation alone (the
    payee of an earlier step) is no request's account."""
    request_text = "Check ACC001, then send 7 or whatever is left to ACC002."
    second = _row(2, _with(TRANSFER, amount=150_000), ["check_balance → balance 150,000"])
    second["prompt"] = request_text + second["prompt"][len(REQUEST) :]
    assert _found(tmp_path, second) == []


@pytest.mark.parametrize(
    ("thought", "history", "flagged"),
    [
        # the committing clause decides, whatever the thought reports before it
        ("The balance is enough, so now I transfer 10万.", [], False),
        (
            "The balance is in and enough; I will move 10万 to ACC002.",
            ["check_balance → 150,000"],
            False,
        ),
        # it commits in words no keyword names: what it names before is a report, silent
        ("Balance checked and enough, so I go ahead.", [], False),
        # no marker, and the tools named are done: a report, silent
        ("Balance checked and it is enough.", ["check_balance → 150,000"], False),
        # ... but not when the tool named is not done yet
        ("The user wants the balance of ACC001.", [], True),
        ("I will check the balance of ACC001.", ["check_balance → 150,000"], True),
    ],
)
def test_a_thought_is_judged_by_the_clause_it_commits_with(tmp_path, thought, history, flagged):
    label = (*TRANSFER[:2], thought, TRANSFER[3])
    found = [f.check for f in _found(tmp_path, _row(len(history) + 1, label, history))]
    assert (THOUGHT_ANNOUNCES_ACTION in found) is flagged


def test_the_gate_warns_with_file_line_and_evidence_and_still_passes(tmp_path):
    first, second = scenario("balance 1,000,000", REPLY)
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (first, second)))
    report = validate_samples.fn(load_samples.fn([path]))
    assert report.ok
    assert report.warnings == [
        f"{path}:2: s-2: the check_balance budget 1,000,000 covers 10万 (100,000), yet the label "
        f"replies [check: {BRANCH_MATCHES_FIGURES}]"
    ]


# --- the screens ----------------------------------------------------------------------------


def _as_scenario(name: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**row, "scenario_id": name, "id": f"{name}-{row['step']}"} for row in rows]


def one_broken_row_per_rule() -> list[dict[str, Any]]:
    """A scenario breaking each rule (the rows of the tests above), and rows the screens cannot
    read as Python does: a solution with prose around it or past the contract's length, a blank
    plan step, a tab and a non-ASCII digit in a history, a letter Python folds onto ASCII."""
    first, second = scenario()
    blank_plan = (*CHECK[:3], [" "])
    prose = f"Sure: {_solution(*TRANSFER[:2], 'I check the balance first.', TRANSFER[3])} ok"
    statement = [_row(1, TRANSFER, []), _row(2, STATEMENT, ["transfer_funds → sent 10万"])]
    for row in statement:
        row["prompt"] = "Transfer 10万, then show me what's left." + row["prompt"][len(REQUEST) :]
    single = {"kind": "single", "n_steps": 1}
    kelvin = (*TRANSFER[:2], "I \u212aheck the balance now.", TRANSFER[3])  # the Kelvin sign
    note = {"thought": "I check the balance first."}  # what the "thought" case's row thinks
    long = {"note": note} | json.loads(_solution(*TRANSFER)) | {"plan": ["x" * 25_000]}
    balances, fails = ["check_balance → balance 50"], {"n_steps": 3, "condition": "fails"}
    listed_twice = _row(2, REPLY, balances)["prompt"] + "\nStep 1: check_balance → balance 10万"
    cases = {
        "thought": [
            _row(1, (*TRANSFER[:2], "I check the balance first.", TRANSFER[3]), [], **single)
        ],
        "plan": [
            _row(
                1,
                ("withdraw", {"account": "ACC001", "amount": 5}, "Now.", ["deposit"]),
                [],
                **single,
            )
        ],
        "history": [{**first, **_row(1, TRANSFER, [])}, second],
        "repeat": [first, {**second, **_row(2, CHECK, ["check_balance → balance 150,000"])}],
        "request": statement,
        "branch": scenario("balance 1,000,000", REPLY),
        "prose": [_row(1, CHECK, [], **single) | {"solution": prose, "tool": "transfer_funds"}],
        "blank plan": [_row(1, blank_plan, [], **single)],
        "tab": [first, {**second, **_row(2, CHECK, ["check_balance\t→ balance 150,000"])}],
        "digit": [_row(1, TRANSFER, []), _row(2, CHECK, ["check_balance → balance ١٥٠"])],
        "folded": [_row(1, kelvin, [], **single)],
        # a solution past the contract's length: Python's reader cuts it, and reads the thought
        # of the first whole object in it; polars reads the solution's own
        "long": [_row(1, TRANSFER, [], **single) | {"solution": json.dumps(long)}],
        # the figures screen reads the latest balance, and a step listed twice by its last line
        "latest balance": [
            _row(3, REPLY, [*balances, "check_balance → balance 1,000,000"], **fails)
        ],
        "listed twice": [_row(2, REPLY, balances, **fails) | {"prompt": listed_twice}],
        "branch digit": scenario("balance ١٠٠٠٠٠٠", REPLY),  # Python reads 1000000
        "params": [
            _row(1, (*TRANSFER[:1], {**TRANSFER[1], "amount": 1_000_000}, *TRANSFER[2:]), [])
        ],
        "reversed": [
            _row(
                1,
                (
                    *TRANSFER[:1],
                    {**TRANSFER[1], "from_account": "ACC002", "to_account": "ACC001"},
                    *TRANSFER[2:],
                ),
                [],
            )
        ],
    }
    return [row for name, rows in cases.items() for row in _as_scenario(name, rows)]


def test_rows_sharing_one_scenario_id_are_screened_like_every_rule_on_every_row(tmp_path):
    """Copies of scenarios under their ids (fresh row ids), as a million repeated rows have:
    the screens find what every rule on every row finds (their history join keeps one row per
    step's label, not one per copy: 1M such rows once asked for more than 23 GB)."""
    rows = one_broken_row_per_rule()
    copies = [{**row, "id": f"{row['id']}#{copy}"} for copy in range(40) for row in rows]
    frame = loaded_rows(tmp_path, *copies)
    screened = label_inconsistencies(frame)
    assert screened == label_inconsistencies(frame, screen=False)
    assert len(screened) == 40 * len(label_inconsistencies(loaded_rows(tmp_path, *rows)))


def test_the_screens_keep_every_finding_of_every_rule_on_every_row(tmp_path):
    """On the shipped rows and a scenario breaking each rule, the screened checks find exactly
    what running every rule on every row finds (rows, rules, evidence, order)."""
    shipped = load_samples.fn(sorted(DATA_DIR.glob("*/*.jsonl"))).frame
    frame = pl.concat([shipped, loaded_rows(tmp_path, *one_broken_row_per_rule())])
    screened = label_inconsistencies(frame)
    assert screened == label_inconsistencies(frame, screen=False)
    assert {found.check for found in screened} == {
        THOUGHT_ANNOUNCES_ACTION,
        PLAN_STARTS_WITH_ACTION,
        STEP_MATCHES_HISTORY,
        STEP_NOT_REPEATED,
        STEP_NAMED_BY_REQUEST,
        BRANCH_MATCHES_FIGURES,
        PARAMS_MATCH_REQUEST,
    }
    branches = {found.id for found in screened if found.check == BRANCH_MATCHES_FIGURES}
    assert {"latest balance-3", "listed twice-2", "branch digit-2"} <= branches


def _odd_solutions(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`rows` with their solutions written in ways the contract's parts read as null or the
    rules read leniently: a thought, params or plan of another JSON type, text after the
    object, a key given twice."""
    odd = []
    for number, row in enumerate(rows):
        solution = json.loads(row["solution"])
        action = solution["action"]
        variants = {
            "number thought": {**solution, "thought": 5},
            "params as text": {
                **solution,
                "action": {**action, "params": json.dumps(action["params"])},
            },
            "plan of numbers": {**solution, "plan": [1, *solution["plan"]]},
        }
        texts = {name: json.dumps(value) for name, value in variants.items()}
        texts["text after"] = row["solution"] + " and so on"
        texts["thought twice"] = row["solution"].replace("{", '{"thought": "I buy AMZN.", ', 1)
        for name, text in texts.items():
            scenario_id = f"{row['scenario_id']} {name}#{number}"
            odd.append(
                row | {"id": f"{row['id']} {name}", "scenario_id": scenario_id, "solution": text}
            )
    return odd


def test_the_parts_the_gate_parsed_give_the_findings_of_every_rule_on_every_row(tmp_path):
    """The data gate hands the context checks the solutions' parts it parsed for the contract
    (`parse_solution`); read from them, the screens find what every rule on every row finds,
    also where a part is of another type or the solution is read leniently by the rules."""
    shipped = load_samples.fn(sorted(DATA_DIR.glob("*/*.jsonl"))).frame
    broken = one_broken_row_per_rule()
    edges = [
        _single(label, text) | {"id": f"e-{i}", "scenario_id": f"e{i}"}
        for i, (label, text) in enumerate(_PARAMS_EDGES)
    ]
    frame = pl.concat([shipped, loaded_rows(tmp_path, *broken, *edges, *_odd_solutions(edges))])
    parsed = parse_solution(frame).select(*frame.columns, *PARTS_READ)
    reference = label_inconsistencies(frame, screen=False)
    assert label_inconsistencies(parsed) == reference
    assert {found.check for found in reference} >= {PARAMS_MATCH_REQUEST, STEP_NAMED_BY_REQUEST}


def test_findings_judged_on_worker_processes_are_those_of_every_rule_on_every_row(
    tmp_path, monkeypatch
):
    """The screens' texts and the rules' scenarios spread over two worker processes, however
    few (the thresholds lowered to one), give the findings of every rule on every row, in the
    same order."""
    monkeypatch.setattr(spread, "MIN_ITEMS_PER_WORKER", 1)
    monkeypatch.setattr(context, "MIN_ROWS_FOR_CHUNKS", 1)
    shipped = load_samples.fn(sorted(DATA_DIR.glob("*/*.jsonl"))).frame
    rows = one_broken_row_per_rule()
    copies = [{**row, "id": f"{row['id']}#{copy}"} for copy in range(3) for row in rows]
    frame = pl.concat([shipped, loaded_rows(tmp_path, *copies)])
    reference = label_inconsistencies(frame, screen=False, workers=1)
    assert label_inconsistencies(frame, workers=2) == reference
    assert label_inconsistencies(frame, screen=False, workers=2) == reference
    assert len({found.check for found in reference}) == len(RULES)  # every rule found one


def test_workers_follow_the_cpus_this_process_may_use():
    assert spread.Spread().workers == len(os.sched_getaffinity(0))
    assert spread.Spread(1).workers == 1


def _judged_where(number: int, offset: int) -> tuple[int, int]:
    return number + offset, os.getpid()


def test_a_spread_call_answers_in_order_from_worker_processes():
    answers = spread.Spread(2).map(_judged_where, [(n,) for n in range(10)], 100, per_worker=1)
    assert [answer for answer, _ in answers] == list(range(100, 110))
    assert os.getpid() not in {pid for _, pid in answers}
    assert spread.Spread(1).map(_judged_where, [(1,)], 0) == [(1, os.getpid())]


def _figure(rng: random.Random, odd: bool = True) -> str:
    """An amount as people, or (`odd`) a careless file, might write it."""
    plain = (["0", "5", "237", "1,000", "99,999", "13.5", "562.54"], ["", "$", "¥ ", "x"])
    numbers, before = plain
    scales, units = ["", "万", " 万", "k", "K", "千"], ["", "元", " rupees", "块"]
    if odd:
        numbers, before = (
            [*numbers, "١٥٠", "1" * 20],
            [*before, "ACC", ".", ",", "\u212a", "\u3000"],
        )
        scales, units = [*scales, "\u00a0万", "\u212a", "kg"], [*units, "rupeesx"]
    return "".join(rng.choice(part) for part in (before, numbers, scales, units))


def test_figures_read_in_polars_flag_what_the_rule_flags(tmp_path):
    """Conditional steps with figures in every form the amount parser reads, and forms it reads
    in ways polars does not (non-ASCII digits, 20 digits, the Kelvin sign): the figures screen
    (amounts placed in Python once per digit-zeroed shape, their values read in polars) lets
    through every row the rule flags."""
    rng = random.Random(45)
    words = ["below", "above", "beats", "跌破", "高于", "比", "cheaper than", "buy", ""]
    rows = []
    for number in range(400):
        after = rng.choice(["", "便宜", "以上", "之下", "高"])
        parts = [f"{rng.choice(words)} {_figure(rng)}{after}"]
        request = " ".join(parts * rng.randint(1, 2)) if rng.random() < 0.3 else parts[0]
        seen = [_figure(rng, odd=rng.random() < 0.1) for _ in range(2)]
        history = [f"check_balance → balance {seen[0]}", f"get_quote → NIO at {seen[1]}"]
        history = history[rng.randrange(3) :] or [f"get_quote → KO at {seen[1]}"]
        label, condition = (REPLY, "fails") if rng.random() < 0.5 else (SELL, "holds")
        row = _row(len(history) + 1, label, history, n_steps=len(history) + 1)
        row["prompt"] = request + row["prompt"][len(REQUEST) :]
        rows.append(
            {**row, "condition": condition, "scenario_id": f"f{number}", "id": f"f{number}"}
        )
    # a balance exactly covering the amount, or the cost: the condition holds
    exact = [
        ("Transfer 10万 if ACC001 covers it.", ["check_balance → balance 100,000"]),
        (
            "Buy 4 NIO if it's enough.",
            ["check_balance → balance 50.5", "get_quote → NIO at 12.625"],
        ),
    ]
    for number, (request, history) in enumerate(exact):
        row = _row(len(history) + 1, REPLY, history, n_steps=len(history) + 1)
        row["prompt"] = request + row["prompt"][len(REQUEST) :]
        rows.append({**row, "condition": "fails", "scenario_id": f"e{number}", "id": f"e{number}"})
    frame = loaded_rows(tmp_path, *rows)
    screened = label_inconsistencies(frame)
    assert screened == label_inconsistencies(frame, screen=False)
    assert sum(found.check == BRANCH_MATCHES_FIGURES for found in screened) > 30


def test_a_new_rule_without_a_screen_reads_every_row(tmp_path, monkeypatch):
    """A label check is its rule alone: a rule the screens know nothing of runs on every row,
    screened or not, with the same findings."""
    from toolgrpo.validation import screens as screens_module

    def thought_writes_no_figure(label, scenario, catalogue):
        if label.thought and "10万" in label.thought:
            return label.breaks("thought_writes_no_figure", "10万 in the thought")
        return None

    rules = (*RULES, thought_writes_no_figure)
    monkeypatch.setattr(context, "RULES", rules)
    monkeypatch.setattr(screens_module, "RULES", rules)
    frame = loaded_rows(
        tmp_path, _row(1, CHECK, []), _row(2, TRANSFER, ["check_balance → 150,000"])
    )
    screened = label_inconsistencies(frame)
    assert screened == label_inconsistencies(frame, screen=False)
    assert [(found.check, found.id) for found in screened] == [("thought_writes_no_figure", "s-2")]
