"""Multi-step patterns: what each draws and fixes, and the steps that follow from it.

A pattern's steps and their reasoning are data/phrases/scenarios/<pattern>.yaml; its set-up here
draws the figures the tools will report (so a conditional pattern's condition holds or fails as
asked) and fixes what a step acts with. A conditional scenario's last step carries `plan_ahead`,
the same in both branches, because earlier steps cannot know the outcome yet; drawn `walked`, its
reasoning is the worked one in the walked form (generator/comparisons.py), all else the same.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from toolgrpo.generator.comparisons import walked_thought
from toolgrpo.generator.phrases import ScenarioPhrases, Side, scenario_phrases
from toolgrpo.generator.slots import Slots, balance_text, digits, price_text
from toolgrpo.generator.steps import Facts, Step, build_step, refusal


@dataclass(frozen=True)
class SetUp:
    """A scenario's facts per tool, and the placeholders its reasoning adds to the slots'."""

    facts: dict[str, Facts] = field(default_factory=dict)
    placeholders: dict[str, str] = field(default_factory=dict)


# How a pattern sets up one scenario, given whether its condition is to hold.
SetUpFunction = Callable[[random.Random, Slots, bool], SetUp]


def covered_balance(rng: random.Random, needed: float, covers: bool) -> int:
    """A balance that covers `needed` or falls short, as asked; sometimes a round 万 figure."""
    low, high = (1.1, 12.0) if covers else (0.05, 0.92)
    balance = max(1, int(needed * rng.uniform(low, high)))
    rounded = balance // 10000 * 10000
    if rng.random() < 0.4 and rounded > 0 and (rounded >= needed) == covers:
        return rounded
    return balance


def price_against_limit(rng: random.Random, limit: int, above: bool) -> float:
    """A price strictly above or below `limit`, to the cent."""
    price = round(limit * (rng.uniform(1.01, 1.25) if above else rng.uniform(0.75, 0.99)), 2)
    if (price > limit) == above and price != limit:
        return price
    return float(limit + 1 if above else limit - 1)


def market_price(rng: random.Random) -> float:
    return round(rng.uniform(5, 900), 2)


def _balance_covers_amount(rng: random.Random, slots: Slots, condition_holds: bool) -> SetUp:
    balance = covered_balance(rng, slots.amount.value, condition_holds)
    return SetUp(
        facts={"check_balance": Facts(balance=balance)},
        placeholders={
            "balance": balance_text(balance, slots.lang),
            "balance_digits": digits(balance),
            "amount_digits": digits(slots.amount.value),
        },
    )


def _price_meets_limit(side: Side) -> SetUpFunction:
    """Buy below / sell above the request's limit: the quote lands on the wanted side or not."""

    def set_up(rng: random.Random, slots: Slots, condition_holds: bool) -> SetUp:
        above = condition_holds if side == "sell" else not condition_holds
        price = price_against_limit(rng, slots.limit, above)
        return SetUp(
            facts={"get_quote": Facts(price=price), "place_order": Facts(side=side)},
            placeholders={"price": price_text(price)},
        )

    return set_up


def _balance_covers_cost(rng: random.Random, slots: Slots, condition_holds: bool) -> SetUp:
    """Buy only if quantity × the quoted price is covered by the balance."""
    price = market_price(rng)
    cost = slots.quantity * price
    balance = covered_balance(rng, cost, condition_holds)
    return SetUp(
        facts={
            "check_balance": Facts(balance=balance),
            "get_quote": Facts(price=price),
            "place_order": Facts(side="buy"),
        },
        placeholders={
            "balance": balance_text(balance, slots.lang),
            "balance_digits": digits(balance),
            "cost": f"{cost:,.2f}",
            "cost_digits": digits(cost),
            "price": price_text(price),
        },
    )


def _quote_first(rng: random.Random, slots: Slots, condition_holds: bool) -> SetUp:
    return SetUp(facts={"get_quote": Facts(price=market_price(rng))})


def _balance_first(rng: random.Random, slots: Slots, condition_holds: bool) -> SetUp:
    return SetUp(facts={"check_balance": Facts(balance=rng.randint(100, 2_000_000))})


def _as_requested(rng: random.Random, slots: Slots, condition_holds: bool) -> SetUp:
    return SetUp()


def _second_amount_transferred(rng: random.Random, slots: Slots, condition_holds: bool) -> SetUp:
    return SetUp(facts={"transfer_funds": Facts(amount=slots.amount2)})


@dataclass(frozen=True)
class Pattern:
    name: str
    set_up: SetUpFunction

    @property
    def phrases(self) -> ScenarioPhrases:
        return scenario_phrases(self.name)

    @property
    def conditional(self) -> bool:
        return self.phrases.condition is not None

    def steps(
        self, rng: random.Random, slots: Slots, condition_holds: bool, *, walked: bool = False
    ) -> list[Step]:
        """A scenario's steps; a conditional one ends in respond when its condition fails, its
        last step reasoned in the walked form if `walked` (the draws are the same either way)."""
        set_up = self.set_up(rng, slots, condition_holds)
        lang, placeholders = slots.lang, slots.placeholders() | set_up.placeholders

        steps = [
            build_step(
                step.tool, slots, step.thought.say(lang, placeholders), set_up.facts.get(step.tool)
            )
            for step in self.phrases.steps
        ]
        condition = self.phrases.condition
        if condition is None:
            return steps
        last = steps[-1]
        if walked and condition_holds:
            worked = condition.worked_thought.say(lang, placeholders)
            last = replace(last, thought=walked_thought(worked))
        if not condition_holds:
            if walked:
                thought = walked_thought(condition.worked_refusal_thought.say(lang, placeholders))
            else:
                thought = condition.refusal_thought.say(lang, placeholders)
            last = refusal(slots, thought, condition.refusal_reply.say(lang, placeholders))
        last = replace(
            last,
            plan_ahead=condition.plan_ahead.say(lang, placeholders),
            condition="holds" if condition_holds else "fails",
        )
        return [*steps[:-1], last]


PATTERNS: dict[str, Pattern] = {
    pattern.name: pattern
    for pattern in (
        Pattern("transfer_if_enough", _balance_covers_amount),
        Pattern("withdraw_if_enough", _balance_covers_amount),
        Pattern("buy_if_below", _price_meets_limit("buy")),
        Pattern("sell_if_above", _price_meets_limit("sell")),
        Pattern("quote_then_trade", _quote_first),
        Pattern("balance_then_history", _balance_first),
        Pattern("deposit_then_balance", _as_requested),
        Pattern("transfer_then_balance", _as_requested),
        Pattern("buy_if_affordable", _balance_covers_cost),
        Pattern("deposit_transfer_history", _second_amount_transferred),
    )
}
