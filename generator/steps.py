"""Steps: a labelled tool call, its reasoning, and how it reads in a plan and in later prompts.

`STEP_BUILDERS` holds, per tool, what only code knows: the params it is called with and the
values its wording needs. The wording itself is data/phrases/tools/<tool>.yaml.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from toolgrpo.generator.phrases import (
    Phrase,
    Side,
    planted_phrases,
    respond_phrases,
    tool_phrases,
    vocabulary,
)
from toolgrpo.generator.slots import Money, Slots, balance_text, price_text

Condition = Literal["holds", "fails"]


@dataclass(frozen=True)
class Step:
    tool: str
    params: dict[str, Any]
    thought: str
    plan_now: str  # the plan entry once this step is being taken
    plan_ahead: str = ""  # as foreseen from earlier steps, when the outcome is not yet known
    observation: str = ""  # what the tool returned, shown to later steps
    condition: Condition | None = None  # on a conditional step: the branch the row labels


@dataclass(frozen=True)
class Facts:
    """What a scenario fixes for one step beyond the request's slots."""

    balance: int = 0  # check_balance: the balance it reports to later steps
    price: float = 0.0  # get_quote: the price it reports to later steps
    amount: Money | None = None  # transfer_funds: the amount sent, if not the request's first
    side: Side | None = None  # place_order: the side, if the scenario fixes it
    message: str = ""  # respond: what it tells the user


class Call(NamedTuple):
    """What a step builder makes of a request: the params, and values for its wording."""

    params: dict[str, Any]
    placeholders: dict[str, object]  # for the tool's plan and observation wording


def _check_balance(slots: Slots, facts: Facts) -> Call:
    return Call({"account": slots.account}, {"balance": balance_text(facts.balance, slots.lang)})


def _transfer_funds(slots: Slots, facts: Facts) -> Call:
    amount = facts.amount or slots.amount
    params = {"from_account": slots.account, "to_account": slots.to_account, "amount": amount.value}
    return Call(params, {"amount": amount.text})


def _place_order(slots: Slots, facts: Facts) -> Call:
    side = facts.side or slots.side
    params = {"symbol": slots.symbol, "side": side, "quantity": slots.quantity}
    return Call(params, {"side": vocabulary().side_words.of(side).of(slots.lang)[0]})


def _withdraw(slots: Slots, facts: Facts) -> Call:
    return Call({"account": slots.account, "amount": slots.amount.value}, {})


def _deposit(slots: Slots, facts: Facts) -> Call:
    return Call({"account": slots.account, "amount": slots.amount.value}, {})


def _get_quote(slots: Slots, facts: Facts) -> Call:
    return Call({"symbol": slots.symbol}, {"price": price_text(facts.price)})


def _get_transactions(slots: Slots, facts: Facts) -> Call:
    return Call({"account": slots.account, "days": slots.days}, {})


def _respond(slots: Slots, facts: Facts) -> Call:
    return Call({"message": facts.message}, {})


STEP_BUILDERS: dict[str, Callable[[Slots, Facts], Call]] = {
    "check_balance": _check_balance,
    "transfer_funds": _transfer_funds,
    "place_order": _place_order,
    "withdraw": _withdraw,
    "deposit": _deposit,
    "get_quote": _get_quote,
    "get_transactions": _get_transactions,
    "respond": _respond,
}


def build_step(
    tool: str, slots: Slots, thought: str, facts: Facts | None = None, plan: Phrase | None = None
) -> Step:
    """The step calling `tool`, worded from its YAML (`plan` replaces the tool's plan entry)."""
    call = STEP_BUILDERS[tool](slots, facts or Facts())
    phrases = tool_phrases(tool)
    placeholders = slots.placeholders() | call.placeholders
    observation = phrases.observation.say(slots.lang, placeholders) if phrases.observation else ""
    return Step(
        tool=tool,
        params=call.params,
        thought=thought,
        plan_now=(plan or phrases.plan).say(slots.lang, placeholders),
        observation=observation,
    )


def single_step(tool: str, slots: Slots, phrasing: int) -> Step:
    """The labelled step for a single-step request worded by `tool`'s request `phrasing`."""
    placeholders = slots.placeholders()
    facts = Facts()
    if tool == "respond":  # the reply is written per request
        reply = respond_phrases().replies.of(slots.lang)[phrasing]
        facts = Facts(message=reply.format(**placeholders))
    thought = tool_phrases(tool).thought.say(slots.lang, placeholders)
    return build_step(tool, slots, thought, facts)


def planted_check_first(slots: Slots) -> Step:
    """The planted ambiguity: a withdraw request answered with a balance check."""
    thought = planted_phrases().thought.say(slots.lang, slots.placeholders())
    return build_step("check_balance", slots, thought)


def refusal(slots: Slots, thought: str, reply: str) -> Step:
    """The respond step a conditional scenario ends with when its condition fails."""
    plan = respond_phrases().refusal_plan
    return build_step("respond", slots, thought, Facts(message=reply), plan)
