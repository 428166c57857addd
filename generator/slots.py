"""A scenario's slot values (accounts, amounts, a symbol, ...) and how a request writes them."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from toolgrpo.generator.phrases import SIDES, Lang, Side, vocabulary


@dataclass(frozen=True)
class Money:
    """An amount: the number params carry and the text the request writes."""

    value: int
    text: str


@dataclass(frozen=True)
class MoneyStyle:
    """One way people type an amount: how its value is drawn and how it is written."""

    draw: Callable[[random.Random], int]
    write: Callable[[int], str]

    def __call__(self, rng: random.Random) -> Money:
        value = self.draw(rng)
        return Money(value, self.write(value))


# Amounts written the way people type them: 5,000 / 100k / 500 rupees, or 10万 / 3000元 / 200块.
WITH_COMMAS = MoneyStyle(lambda rng: rng.randint(2, 400) * 250, lambda v: f"{v:,}")
MONEY_STYLES: dict[Lang, tuple[MoneyStyle, ...]] = {
    "en": (
        WITH_COMMAS,
        MoneyStyle(lambda rng: rng.randint(1, 250) * 1000, lambda v: f"{v // 1000}k"),
        MoneyStyle(
            lambda rng: rng.choice([rng.randint(1, 20) * 5, rng.randint(1, 500) * 100]),
            lambda v: f"{v:,} rupees",
        ),
        MoneyStyle(lambda rng: rng.randint(5, 2000) * 10, str),
    ),
    "zh": (
        MoneyStyle(lambda rng: rng.randint(2, 200) * 5000, lambda v: f"{v / 10000:g}万"),
        MoneyStyle(lambda rng: rng.randint(5, 2000) * 10, lambda v: f"{v}元"),
        WITH_COMMAS,
        MoneyStyle(lambda rng: rng.randint(1, 200) * 50, lambda v: f"{v}块"),
    ),
}


def draw_money(rng: random.Random, lang: Lang) -> Money:
    return rng.choice(MONEY_STYLES[lang])(rng)


def balance_text(value: int, lang: Lang) -> str:
    """A balance as the banking system reports it: 50 万 / 3,217 元 in Chinese, 3,217 in English."""
    if lang == "en":
        return f"{value:,}"
    return f"{value // 10000} 万" if value % 10000 == 0 else f"{value:,} 元"


def price_text(price: float) -> str:
    """A price as a quote reports it."""
    return f"{price:.2f}"


def digits(value: float) -> str:
    """An amount in the one form conditional reasoning compares: plain digits, no separators or
    units, cents only when there are any (560000, 112508, 499.95)."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _draw_account(rng: random.Random) -> str:
    return f"ACC{rng.randint(1, 999):03d}"


@dataclass(frozen=True)
class Slots:
    """One scenario's values, drawn in the request's language."""

    lang: Lang
    account: str
    to_account: str  # the destination as params carry it
    to_text: str  # ... and as the request words it
    amount: Money
    amount2: Money  # a second amount, for scenarios that move money twice
    symbol: str
    side: Side
    side_text: str
    quantity: int
    days: int
    limit: int  # a price limit
    city: str
    name: str

    def placeholders(self) -> dict[str, object]:
        """The values phrases' `{placeholder}`s name, worded as in the request."""
        return {
            "account": self.account,
            "to": self.to_text,
            "to_account": self.to_account,
            "amount": self.amount.text,
            "amount2": self.amount2.text,
            "symbol": self.symbol,
            "side": self.side_text,
            "quantity": self.quantity,
            "days": self.days,
            "limit": self.limit,
            "city": self.city,
            "name": self.name,
        }


def draw_slots(rng: random.Random, lang: Lang) -> Slots:
    """Fresh values for one request; the order of the draws is part of the shipped dataset."""
    words = vocabulary()
    account = _draw_account(rng)
    if rng.random() < 0.5:
        to_account = _draw_account(rng)
        while to_account == account:
            to_account = _draw_account(rng)
        to_text = to_account
    else:
        to_account = rng.choice(sorted(words.named_accounts))
        wording = words.named_accounts[to_account]
        to_text = wording.zh if lang == "zh" else rng.choice([to_account, wording.en])
    side = rng.choice(SIDES)
    return Slots(
        lang=lang,
        account=account,
        to_account=to_account,
        to_text=to_text,
        amount=draw_money(rng, lang),
        amount2=draw_money(rng, lang),
        symbol=rng.choice(words.symbols),
        side=side,
        side_text=rng.choice(words.side_words.of(side).of(lang)),
        quantity=rng.choice(words.quantities),
        days=rng.choice(words.days),
        limit=rng.randint(10, 900),
        city=rng.choice(words.cities.of(lang)),
        name=rng.choice(words.names.of(lang)),
    )
