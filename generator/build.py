"""Generate the shipped dataset (train, eval, unseen phrasing, planted ambiguity) from a seed.

Everything is drawn from one `random.Random(seed)` in a fixed order and written with the same
JSON settings, so `toolgrpo data generate --seed 0` reproduces the shipped files byte for byte.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from toolgrpo.schemas.catalogue import Catalogue, load_catalogue

# case study: 454 single-step samples + 823 expanded multi-step samples
TRAIN_SINGLE_ROWS = 454
TRAIN_MULTI_ROWS = 823

# Rows per tool; planted rows (withdraw wording, check_balance label) come on top.
SINGLE_COUNTS = {
    "train": {
        "check_balance": 58,
        "transfer_funds": 60,
        "place_order": 60,
        "withdraw": 56,
        "deposit": 54,
        "get_quote": 56,
        "get_transactions": 54,
        "respond": 49,
    },
    "eval": {
        "check_balance": 12,
        "transfer_funds": 12,
        "place_order": 12,
        "withdraw": 11,
        "deposit": 11,
        "get_quote": 11,
        "get_transactions": 11,
        "respond": 9,
    },
}
PLANTED_COUNTS = {"train": 7, "eval": 2}  # ~1.5% and ~2% of the single-step rows
# Scenarios per multi-step pattern: 290 two-step + 81 three-step = 823 rows in train.
MULTI_COUNTS = {
    "train": {
        "transfer_if_enough": 70,
        "withdraw_if_enough": 44,
        "buy_if_below": 36,
        "sell_if_above": 24,
        "quote_then_trade": 32,
        "balance_then_history": 26,
        "deposit_then_balance": 30,
        "transfer_then_balance": 28,
        "buy_if_affordable": 51,
        "deposit_transfer_history": 30,
    },
    "eval": {
        "transfer_if_enough": 15,
        "withdraw_if_enough": 9,
        "buy_if_below": 7,
        "sell_if_above": 5,
        "quote_then_trade": 6,
        "balance_then_history": 5,
        "deposit_then_balance": 7,
        "transfer_then_balance": 6,
        "buy_if_affordable": 10,
        "deposit_transfer_history": 5,
    },
}
UNSEEN_SINGLE_PER_TEMPLATE = 2
UNSEEN_MULTI_PER_TEMPLATE = 2
CONDITION_FAILS_SHARE = 0.4  # the respond branch must be common enough to measure
HELD_OUT_SINGLE = 2  # the last two phrasings of each single-step list are kept for unseen
HELD_OUT_MULTI = 1  # the last phrasing of each multi-step list is kept for unseen
LANGS = ("en", "zh")

PLANTED_FILE = "planted_ambiguity.json"
PLANTED_WHY = (
    "Single-step rows worded as plain withdraw requests (same templates as genuine withdraw "
    "rows) but labelled check_balance under a check-first policy, like the case study's "
    "'Withdraw 50 rupees from ACC002'. Only tests and benchmarks may read this file, to score "
    "whether error mining flags them as label ambiguity."
)

# ---------------------------------------------------------------------------------------------
# Phrasings. Single-step: >= 10 per tool and language; multi-step: >= 5 per pattern and language.

SINGLE_TEMPLATES: dict[str, dict[str, list[str]]] = {
    "check_balance": {
        "en": [
            "What's the balance on {account}?",
            "How much money do I have in {account}?",
            "Check my balance for {account}, please.",
            "Show me the available funds in {account}.",
            "Can you tell me how much is left in {account}?",
            "balance {account}",
            "I need to know my current balance in account {account}.",
            "How much is sitting in {account} right now?",
            "Is there enough in {account} to cover {amount}?",
            "Can I afford a {amount} purchase from {account}?",
            "Quick one: what does {account} hold at the moment?",
            "Pull up the funds available on {account}.",
        ],
        "zh": [
            "查一下 {account} 的余额",
            "{account} 里还有多少钱？",
            "帮我看看 {account} 账户余额",
            "我的 {account} 余额是多少",
            "请查询账户 {account} 的可用余额",
            "{account} 现在有多少钱",
            "告诉我 {account} 还剩多少钱",
            "余额查询：{account}",
            "{account} 里的钱够不够 {amount}？",
            "{account} 的余额够付 {amount} 吗？",
            "麻烦看下 {account} 这个户头里的钱",
            "{account} 账上目前能用的资金有多少？",
        ],
    },
    "transfer_funds": {
        "en": [
            "Transfer {amount} from {account} to {to}.",
            "Send {amount} to {to} from {account}.",
            "Please move {amount} from {account} into {to}.",
            "Can you wire {amount} from {account} to {to}?",
            "Pay {amount} to {to} using {account}.",
            "I want to transfer {amount} from my {account} account to {to}.",
            "Move {amount} out of {account} and into {to}, thanks.",
            "From {account} to {to}, transfer {amount} please.",
            "Shift {amount} over to {to} from {account}.",
            "Could {amount} go from {account} across to {to} today?",
        ],
        "zh": [
            "从 {account} 转 {amount} 到 {to}",
            "给 {to} 转账 {amount}，从 {account} 扣",
            "帮我把 {amount} 从 {account} 转到 {to}",
            "转账 {amount}：{account} 转入 {to}",
            "请从账户 {account} 汇款 {amount} 给 {to}",
            "我要从 {account} 向 {to} 转 {amount}",
            "把 {account} 里的 {amount} 打到 {to}",
            "{account} 转 {amount} 给 {to}，谢谢",
            "麻烦将 {amount} 由 {account} 划至 {to}",
            "用 {account} 付 {amount} 到 {to} 那边",
        ],
    },
    "place_order": {
        "en": [
            "Please {side} {qty} shares of {symbol}.",
            "I'd like to {side} {qty} {symbol} shares.",
            "{side} {qty} shares of {symbol} at market.",
            "Can you {side} {qty} {symbol} for me?",
            "Place a market order to {side} {qty} shares of {symbol}.",
            "Go ahead and {side} {qty} shares in {symbol}.",
            "Put in an order: {side} {qty} {symbol}.",
            "I want to {side} {qty} shares of {symbol} now.",
            "Execute a market {side} for {qty} {symbol} shares.",
            "{symbol}: {side} {qty} of them at the current price.",
        ],
        "zh": [
            "{side} {qty} 股 {symbol}",
            "帮我{side} {qty} 股 {symbol}",
            "我想{side} {symbol} {qty} 股",
            "市价{side} {qty} 股 {symbol}",
            "下单：{side} {symbol}，{qty} 股",
            "请{side} {qty} 股 {symbol} 股票",
            "给我{side} {qty} 股 {symbol}，市价就行",
            "{symbol} {side} {qty} 股",
            "现在按市价把 {symbol} {side} {qty} 股",
            "麻烦挂个单，{side} {qty} 股 {symbol}",
        ],
    },
    "withdraw": {
        "en": [
            "Withdraw {amount} from {account}.",
            "I need to take out {amount} from {account}.",
            "Please withdraw {amount} in cash from {account}.",
            "Can I withdraw {amount} from {account}?",
            "Take {amount} out of {account} for me.",
            "Cash out {amount} from {account}.",
            "I want {amount} in cash from my {account} account.",
            "Get me {amount} cash from {account}, please.",
            "Pull {amount} of cash out of {account} today.",
            "I'd like to draw {amount} from {account} at the ATM.",
        ],
        "zh": [
            "从 {account} 取 {amount}",
            "我要从 {account} 取出 {amount} 现金",
            "帮我在 {account} 取现 {amount}",
            "{account} 取钱 {amount}",
            "请从账户 {account} 提现 {amount}",
            "从 {account} 里取 {amount} 出来",
            "我想取 {amount}，从 {account} 取",
            "取 {amount} 现金，账户 {account}",
            "麻烦从 {account} 支取 {amount} 现金",
            "{account} 那里拿 {amount} 现金出来",
        ],
    },
    "deposit": {
        "en": [
            "Deposit {amount} into {account}.",
            "Put {amount} into {account}, please.",
            "I want to deposit {amount} to {account}.",
            "Pay in {amount} to {account}.",
            "Can you add {amount} to {account}? It's a cash deposit.",
            "Top up {account} with {amount}.",
            "Please deposit {amount} in cash into account {account}.",
            "I have {amount} to deposit into {account}.",
            "Credit {account} with the {amount} I brought in.",
            "Lodge {amount} into {account} for me.",
        ],
        "zh": [
            "往 {account} 存 {amount}",
            "把 {amount} 存入 {account}",
            "我要在 {account} 存 {amount}",
            "帮我存 {amount} 到 {account}",
            "请往账户 {account} 存入 {amount} 现金",
            "{account} 存款 {amount}",
            "给 {account} 充值 {amount}",
            "存 {amount} 进 {account}",
            "这 {amount} 现金帮我放进 {account}",
            "{account} 里面再加 {amount} 现金",
        ],
    },
    "get_quote": {
        "en": [
            "What's the price of {symbol}?",
            "Get me a quote for {symbol}.",
            "How much is {symbol} trading at?",
            "Current price of {symbol}?",
            "What is {symbol} worth right now?",
            "Quote {symbol}, please.",
            "Check the share price of {symbol}.",
            "Where is {symbol} trading today?",
            "Give me the latest tick on {symbol}.",
            "How much would one {symbol} share cost me?",
        ],
        "zh": [
            "{symbol} 现在多少钱？",
            "查一下 {symbol} 的股价",
            "{symbol} 的报价是多少",
            "帮我看看 {symbol} 的价格",
            "{symbol} 现价多少",
            "请查询 {symbol} 当前价格",
            "{symbol} 股价多少了",
            "告诉我 {symbol} 多少钱一股",
            "{symbol} 这会儿什么价位",
            "瞄一眼 {symbol} 最新行情",
        ],
    },
    "get_transactions": {
        "en": [
            "Show my transactions on {account} for the last {days} days.",
            "List recent activity in {account}, last {days} days.",
            "What did I spend from {account} in the past {days} days?",
            "Get the statement for {account} covering {days} days.",
            "Show me the transaction history of {account} ({days} days).",
            "I want to see the last {days} days of payments on {account}.",
            "Pull the history for {account} over the past {days} days.",
            "Any transactions on {account} in the last {days} days?",
            "Walk me through what went in and out of {account} these {days} days.",
            "Itemise {account}'s movements over {days} days.",
        ],
        "zh": [
            "查看 {account} 最近 {days} 天的交易记录",
            "{account} 近 {days} 天的流水",
            "帮我拉一下 {account} 最近 {days} 天的明细",
            "我想看 {account} 过去 {days} 天的账单",
            "列出 {account} 最近 {days} 天的交易",
            "{account} 这 {days} 天花了哪些钱",
            "请导出 {account} 最近 {days} 天的流水明细",
            "最近 {days} 天 {account} 有哪些交易记录",
            "{account} 在 {days} 天里进出了哪些款项",
            "翻一下 {account} 前 {days} 天的收支",
        ],
    },
    "respond": {
        "en": [
            "What's the weather like in {city} today?",
            "Hi, I'm {name}. What can you do?",
            "Will {symbol} go up tomorrow?",
            "Can you lend me {amount}?",
            "Please change the PIN for {account}.",
            "Thanks, that's all for {account} today.",
            "Recommend a good restaurant in {city}.",
            "Close account {account} for me.",
            "Is {symbol} a good long-term investment?",
            "Book me a flight to {city}.",
        ],
        "zh": [
            "{city}今天天气怎么样？",
            "你好，我是{name}，你能做什么？",
            "{symbol} 明天会涨吗？",
            "能借我 {amount} 吗？",
            "帮我改一下 {account} 的密码",
            "{account} 的事就这些，谢谢",
            "推荐一家{city}的好餐厅",
            "帮我注销账户 {account}",
            "{symbol} 值得长期持有吗？",
            "帮我订一张去{city}的机票",
        ],
    },
}

# The reply for each respond phrasing above, index for index.
RESPOND_REPLIES = {
    "en": [
        "Sorry, I can only help with your accounts and trades.",
        "Hello {name}! I can check balances, move money and trade for you.",
        "I can't predict prices, but I can get you a quote for {symbol}.",
        "Sorry, I can't offer loans.",
        "I can't change PINs; please use the bank app.",
        "You're welcome! Have a good day.",
        "Sorry, I can only help with banking and trading.",
        "I can't close accounts; please contact your branch.",
        "I can't give investment advice, but I can get you a quote for {symbol}.",
        "Sorry, I can't book travel.",
    ],
    "zh": [
        "抱歉，我只能帮您处理账户和交易相关的事。",
        "{name}您好！我可以查余额、转账、存取款和买卖股票。",
        "我无法预测股价，但可以帮您查询 {symbol} 的报价。",
        "抱歉，我不能提供贷款。",
        "我无法修改密码，请使用银行 App。",
        "不客气，祝您愉快！",
        "抱歉，我只能处理银行和交易业务。",
        "我无法注销账户，请联系开户网点。",
        "我不能提供投资建议，但可以帮您查询 {symbol} 的报价。",
        "抱歉，我不能预订机票。",
    ],
}

MULTI_TEMPLATES: dict[str, dict[str, list[str]]] = {
    "transfer_if_enough": {
        "en": [
            "Check my balance in {account}; if it's enough, transfer {amount} to {to}.",
            "If {account} has at least {amount}, send it to {to}.",
            "Transfer {amount} from {account} to {to}, but only if the balance covers it.",
            "See whether {account} can afford {amount}, and if so move it to {to}.",
            "First check {account}, then pay {amount} to {to} if there's enough.",
            "Should {account} have {amount} spare, wire that to {to}.",
        ],
        "zh": [
            "先查 {account} 余额，够的话转 {amount} 到 {to}",
            "如果 {account} 里有 {amount}，就转到 {to}",
            "查一下 {account} 够不够 {amount}，够就转给 {to}",
            "{account} 余额足够的话，转账 {amount} 给 {to}",
            "看看 {account} 的钱够不够，够的话转 {amount} 到 {to}",
            "要是 {account} 还剩 {amount} 以上，就打到 {to}",
        ],
    },
    "withdraw_if_enough": {
        "en": [
            "Check {account} and withdraw {amount} if there's enough.",
            "If my balance in {account} covers {amount}, take it out in cash.",
            "Make sure {account} has {amount} first, then withdraw it.",
            "I want to cash out {amount} from {account} if the funds are there.",
            "Provided {account} isn't short, hand me {amount} in cash.",
        ],
        "zh": [
            "先查 {account} 余额，够的话取 {amount}",
            "{account} 里要是有 {amount}，就帮我取出来",
            "看看 {account} 够不够，够就取现 {amount}",
            "如果 {account} 余额够，提现 {amount}",
            "{account} 钱够的话给我取 {amount} 现金",
        ],
    },
    "buy_if_below": {
        "en": [
            "Buy {qty} shares of {symbol} if the price is below {limit}.",
            "Check {symbol}'s price and buy {qty} if it's under {limit}.",
            "If {symbol} trades below {limit}, get me {qty} shares.",
            "Get a quote on {symbol}; buy {qty} shares only if it's cheaper than {limit}.",
            "Pick up {qty} {symbol} as long as it costs less than {limit} a share.",
        ],
        "zh": [
            "{symbol} 低于 {limit} 的话买 {qty} 股",
            "先看 {symbol} 价格，低于 {limit} 就买入 {qty} 股",
            "如果 {symbol} 跌破 {limit}，帮我买 {qty} 股",
            "查一下 {symbol} 报价，不到 {limit} 就买 {qty} 股",
            "{symbol} 要是比 {limit} 便宜，就入手 {qty} 股",
        ],
    },
    "sell_if_above": {
        "en": [
            "Sell {qty} shares of {symbol} if the price is above {limit}.",
            "Check {symbol} and sell {qty} shares if it's over {limit}.",
            "If {symbol} is trading above {limit}, sell {qty} of my shares.",
            "Quote {symbol}; sell {qty} only if it beats {limit}.",
            "Offload {qty} {symbol} once a share fetches more than {limit}.",
        ],
        "zh": [
            "{symbol} 高于 {limit} 的话卖 {qty} 股",
            "先查 {symbol} 价格，超过 {limit} 就卖出 {qty} 股",
            "如果 {symbol} 涨过 {limit}，帮我卖 {qty} 股",
            "看下 {symbol} 报价，高于 {limit} 就卖 {qty} 股",
            "{symbol} 价格要是冲上 {limit} 以上，出掉 {qty} 股",
        ],
    },
    "quote_then_trade": {
        "en": [
            "Get the price of {symbol}, then {side} {qty} shares.",
            "Quote {symbol} and then {side} {qty} shares of it.",
            "Tell me what {symbol} costs, then {side} {qty} shares.",
            "Look up {symbol} and {side} {qty} shares after that.",
            "Fetch {symbol}'s price first and follow up with a {side} of {qty}.",
        ],
        "zh": [
            "先查 {symbol} 的价格，然后{side} {qty} 股",
            "看下 {symbol} 报价，再{side} {qty} 股",
            "查询 {symbol} 股价后{side} {qty} 股",
            "{symbol} 先报个价，接着{side} {qty} 股",
            "报一下 {symbol} 的价，随后{side}{qty}股",
        ],
    },
    "balance_then_history": {
        "en": [
            "Check the balance of {account}, then show the last {days} days of transactions.",
            "What's in {account}? Also list its activity for the past {days} days.",
            "Show my {account} balance and then my {days}-day statement.",
            "Tell me the balance on {account}, then the transactions of the last {days} days.",
            "Balance of {account} first, after that the {days}-day history please.",
        ],
        "zh": [
            "先查 {account} 余额，再看最近 {days} 天的流水",
            "{account} 还有多少钱？顺便列一下最近 {days} 天的交易",
            "查询 {account} 余额，然后拉取近 {days} 天明细",
            "帮我看 {account} 的余额和最近 {days} 天的交易记录",
            "{account} 余额报一下，之后再给我 {days} 天的账单",
        ],
    },
    "deposit_then_balance": {
        "en": [
            "Deposit {amount} into {account}, then tell me the new balance.",
            "Put {amount} in {account} and show me the balance afterwards.",
            "Pay {amount} into {account}; after that, what's my balance?",
            "Top up {account} with {amount} and then check the balance.",
            "Once {amount} is lodged in {account}, report what it holds.",
        ],
        "zh": [
            "往 {account} 存 {amount}，然后告诉我余额",
            "先存 {amount} 到 {account}，再查一下余额",
            "把 {amount} 存进 {account}，之后看看余额多少",
            "给 {account} 存入 {amount} 后查余额",
            "{amount} 存进 {account} 以后，报一下账上还有多少",
        ],
    },
    "transfer_then_balance": {
        "en": [
            "Transfer {amount} from {account} to {to}, then show me what's left.",
            "Send {amount} to {to} from {account} and check the balance after.",
            "Move {amount} from {account} to {to}; then what's my balance in {account}?",
            "Pay {to} {amount} out of {account}, then tell me the remaining balance.",
            "After shifting {amount} from {account} to {to}, report what {account} holds.",
        ],
        "zh": [
            "从 {account} 转 {amount} 到 {to}，然后查一下余额",
            "先给 {to} 转 {amount}（从 {account}），再看 {account} 还剩多少",
            "把 {amount} 从 {account} 转到 {to}，之后告诉我余额",
            "{account} 转 {amount} 给 {to}，转完查余额",
            "{account} 划 {amount} 到 {to} 以后，报一下剩余资金",
        ],
    },
    "buy_if_affordable": {
        "en": [
            "If {account} can cover it, buy {qty} shares of {symbol}.",
            "Check {account} and {symbol}'s price, then buy {qty} shares if I can afford it.",
            "Can I afford {qty} {symbol} shares with {account}? If yes, buy them.",
            "Buy {qty} shares of {symbol} using {account}, but only if the money is there.",
            "Should {account} stretch to {qty} {symbol} shares, snap them up.",
        ],
        "zh": [
            "{account} 的钱够的话，买 {qty} 股 {symbol}",
            "先查 {account} 余额和 {symbol} 股价，够的话买 {qty} 股",
            "用 {account} 买 {qty} 股 {symbol}，前提是钱够",
            "看看 {account} 够不够买 {qty} 股 {symbol}，够就买",
            "{account} 资金撑得住的话，拿下 {qty} 股 {symbol}",
        ],
    },
    "deposit_transfer_history": {
        "en": [
            "Deposit {amount} into {account}, send {amount2} to {to}, then {days} days of history.",
            "Put {amount} in {account}, pay {amount2} to {to}, and list {days} days of activity.",
            "Deposit {amount} to {account}, move {amount2} to {to}, then my {days}-day statement.",
            "Top up {account} with {amount}, wire {amount2} to {to}, pull {days} days of activity.",
            "Lodge {amount} in {account}, forward {amount2} to {to}, walk me through {days} days.",
        ],
        "zh": [
            "往 {account} 存 {amount}，再转 {amount2} 到 {to}，然后看最近 {days} 天流水",
            "先存 {amount} 进 {account}，然后转 {amount2} 给 {to}，最后列出近 {days} 天交易",
            "{account} 存入 {amount}，转 {amount2} 到 {to}，再查 {days} 天明细",
            "帮我存 {amount} 到 {account}，转账 {amount2} 给 {to}，之后拉 {days} 天账单",
            "{amount} 放进 {account}，其中 {amount2} 划到 {to}，末了翻一下 {days} 天收支",
        ],
    },
}

SYMBOLS = [
    "AAPL",
    "TSLA",
    "MSFT",
    "NVDA",
    "AMZN",
    "GOOG",
    "META",
    "BABA",
    "TCEHY",
    "JD",
    "NIO",
    "BIDU",
    "SPY",
    "QQQ",
    "VOO",
    "IBM",
    "INTC",
    "AMD",
    "NFLX",
    "KO",
    "PDD",
    "XPEV",
    "INFY",
    "TSM",
    "V",
]
NAMED_ACCOUNTS = {  # param value: (English wording, Chinese wording)
    "SAVINGS": ("my savings account", "储蓄账户"),
    "WEALTH": ("my wealth account", "理财账户"),
    "CHECKING": ("my checking account", "活期账户"),
    "BROKERAGE": ("my brokerage account", "证券账户"),
}
CITIES = {
    "en": ["London", "Mumbai", "Delhi", "New York", "Paris", "Tokyo", "Singapore", "Sydney"],
    "zh": ["北京", "上海", "深圳", "广州", "杭州", "成都", "南京", "西安"],
}
NAMES = {
    "en": ["Priya", "Rahul", "Alice", "Tom", "Wei", "Maria", "Arjun", "Sara", "John", "Emma"],
    "zh": ["小王", "李明", "张伟", "王芳", "刘洋", "陈静", "赵磊", "孙丽", "周杰", "吴敏"],
}
SIDE_WORDS = {
    "en": {"buy": ["buy"], "sell": ["sell"]},
    "zh": {"buy": ["买", "买入"], "sell": ["卖", "卖出"]},
}
DAYS = [3, 5, 7, 10, 14, 15, 30, 45, 60, 90, 180, 365]
QUANTITIES = [2, 3, 5, 8, 10, 12, 15, 20, 25, 30, 40, 50, 75, 100, 150, 200, 300, 500]


# ---------------------------------------------------------------------------------------------
# Slot values


@dataclass(frozen=True)
class Money:
    value: int
    text: str


def _draw_money(rng: random.Random, lang: str) -> Money:
    """An amount written the way people type it: 10万 / 3000元 in Chinese, 100k / 5,000 rupees."""
    style = rng.choice(
        ["comma", "k", "rupees", "plain"] if lang == "en" else ["wan", "yuan", "comma", "kuai"]
    )
    if style == "comma":
        value = rng.randint(2, 400) * 250
        return Money(value, f"{value:,}")
    if style == "k":
        value = rng.randint(1, 250) * 1000
        return Money(value, f"{value // 1000}k")
    if style == "rupees":
        value = rng.choice([rng.randint(1, 20) * 5, rng.randint(1, 500) * 100])
        return Money(value, f"{value:,} rupees")
    if style == "plain":
        value = rng.randint(5, 2000) * 10
        return Money(value, str(value))
    if style == "wan":
        value = rng.randint(2, 200) * 5000
        return Money(value, f"{value / 10000:g}万")
    if style == "yuan":
        value = rng.randint(5, 2000) * 10
        return Money(value, f"{value}元")
    value = rng.randint(1, 200) * 50
    return Money(value, f"{value}块")


def _balance_text(value: int, lang: str) -> str:
    """A balance as the banking system reports it: 50 万 / 3,217 元 in Chinese, 3,217 in English."""
    if lang == "en":
        return f"{value:,}"
    return f"{value // 10000} 万" if value % 10000 == 0 else f"{value:,} 元"


def _draw_account(rng: random.Random) -> str:
    return f"ACC{rng.randint(1, 999):03d}"


@dataclass(frozen=True)
class Slots:
    """One scenario's values; `text()` gives their wording in the request's language."""

    lang: str
    account: str
    to_account: str
    to_text: str
    amount: Money
    amount2: Money
    symbol: str
    side: str
    side_text: str
    qty: int
    days: int
    limit: int
    city: str
    name: str

    def text(self) -> dict[str, Any]:
        return {
            "account": self.account,
            "to": self.to_text,
            "amount": self.amount.text,
            "amount2": self.amount2.text,
            "symbol": self.symbol,
            "side": self.side_text,
            "qty": self.qty,
            "days": self.days,
            "limit": self.limit,
            "city": self.city,
            "name": self.name,
        }


def _draw_slots(rng: random.Random, lang: str) -> Slots:
    account = _draw_account(rng)
    if rng.random() < 0.5:
        to_account = _draw_account(rng)
        while to_account == account:
            to_account = _draw_account(rng)
        to_text = to_account
    else:
        to_account = rng.choice(sorted(NAMED_ACCOUNTS))
        english, chinese = NAMED_ACCOUNTS[to_account]
        to_text = chinese if lang == "zh" else rng.choice([to_account, english])
    side = rng.choice(["buy", "sell"])
    return Slots(
        lang=lang,
        account=account,
        to_account=to_account,
        to_text=to_text,
        amount=_draw_money(rng, lang),
        amount2=_draw_money(rng, lang),
        symbol=rng.choice(SYMBOLS),
        side=side,
        side_text=rng.choice(SIDE_WORDS[lang][side]),
        qty=rng.choice(QUANTITIES),
        days=rng.choice(DAYS),
        limit=rng.randint(10, 900),
        city=rng.choice(CITIES[lang]),
        name=rng.choice(NAMES[lang]),
    )


# ---------------------------------------------------------------------------------------------
# Steps: the labelled action, its reasoning, and what a planner foresees for it


@dataclass(frozen=True)
class Step:
    tool: str
    params: dict[str, Any]
    thought: str
    plan_now: str  # the plan entry once this step is being taken
    plan_ahead: str = ""  # as foreseen from earlier steps, when the outcome is not yet known
    observation: str = ""  # what the tool returned, shown to later steps
    condition: str | None = None  # "holds" / "fails" on a conditional step (the row's label)


def _say(lang: str, *, en: str, zh: str) -> str:
    return en if lang == "en" else zh


def _check_balance(s: Slots, thought: str, balance: int = 0) -> Step:
    lang = s.lang
    return Step(
        "check_balance",
        {"account": s.account},
        thought,
        _say(lang, en=f"check balance of {s.account}", zh=f"查询 {s.account} 余额"),
        observation=_say(lang, en="balance ", zh="余额 ") + _balance_text(balance, lang),
    )


def _transfer(s: Slots, thought: str, amount: Money) -> Step:
    lang = s.lang
    return Step(
        "transfer_funds",
        {"from_account": s.account, "to_account": s.to_account, "amount": amount.value},
        thought,
        _say(
            lang, en=f"transfer {amount.text} to {s.to_text}", zh=f"转 {amount.text} 到 {s.to_text}"
        ),
        observation=_say(
            lang,
            en=f"sent {amount.text} to {s.to_account}",
            zh=f"已转 {amount.text} 到 {s.to_account}",
        ),
    )


def _withdraw(s: Slots, thought: str) -> Step:
    return Step(
        "withdraw",
        {"account": s.account, "amount": s.amount.value},
        thought,
        _say(
            s.lang,
            en=f"withdraw {s.amount.text} from {s.account}",
            zh=f"从 {s.account} 取 {s.amount.text}",
        ),
    )


def _deposit(s: Slots, thought: str) -> Step:
    lang = s.lang
    return Step(
        "deposit",
        {"account": s.account, "amount": s.amount.value},
        thought,
        _say(
            lang,
            en=f"deposit {s.amount.text} into {s.account}",
            zh=f"存 {s.amount.text} 到 {s.account}",
        ),
        observation=_say(lang, en=f"deposited {s.amount.text}", zh=f"已存入 {s.amount.text}"),
    )


def _quote(s: Slots, thought: str, price: float = 0.0) -> Step:
    lang = s.lang
    return Step(
        "get_quote",
        {"symbol": s.symbol},
        thought,
        _say(lang, en=f"get quote for {s.symbol}", zh=f"查询 {s.symbol} 报价"),
        observation=_say(lang, en=f"{s.symbol} at {price:.2f}", zh=f"{s.symbol} 现价 {price:.2f}"),
    )


def _order(s: Slots, thought: str, side: str) -> Step:
    side_text = SIDE_WORDS[s.lang][side][0]
    return Step(
        "place_order",
        {"symbol": s.symbol, "side": side, "quantity": s.qty},
        thought,
        _say(s.lang, en=f"{side} {s.qty} {s.symbol}", zh=f"{side_text} {s.qty} 股 {s.symbol}"),
    )


def _transactions(s: Slots, thought: str) -> Step:
    return Step(
        "get_transactions",
        {"account": s.account, "days": s.days},
        thought,
        _say(s.lang, en=f"list {s.days} days of transactions", zh=f"列出 {s.days} 天交易记录"),
    )


def _respond(lang: str, thought: str, message: str) -> Step:
    return Step(
        "respond",
        {"message": message},
        thought,
        _say(lang, en="tell the user why not", zh="告诉用户原因"),
    )


# ---------------------------------------------------------------------------------------------
# Single-step actions


def _single_step(tool: str, s: Slots, template_index: int) -> Step:
    lang, a = s.lang, s.amount.text
    if tool == "check_balance":
        return _check_balance(
            s,
            _say(
                lang,
                en=f"The user asks how much is in {s.account}, so I need to check its balance.",
                zh=f"用户想知道 {s.account} 的余额，所以需要查询余额。",
            ),
        )
    if tool == "transfer_funds":
        return _transfer(
            s,
            _say(
                lang,
                en=f"The user wants to send {a} to {s.to_text}, so I need to transfer it.",
                zh=f"用户要从 {s.account} 转 {a} 到 {s.to_text}，所以需要调用转账。",
            ),
            s.amount,
        )
    if tool == "place_order":
        return _order(
            s,
            _say(
                lang,
                en=f"The user wants to {s.side} {s.qty} {s.symbol}, therefore I place an order.",
                zh=f"用户想{s.side_text} {s.qty} 股 {s.symbol}，所以需要下一个市价单。",
            ),
            s.side,
        )
    if tool == "withdraw":
        return _withdraw(
            s,
            _say(
                lang,
                en=f"The user needs {a} in cash from {s.account}, so I need to withdraw it.",
                zh=f"用户要从 {s.account} 取 {a} 现金，所以需要办理取款。",
            ),
        )
    if tool == "deposit":
        return _deposit(
            s,
            _say(
                lang,
                en=f"The user wants to put {a} into {s.account}, so I need to deposit it.",
                zh=f"用户要把 {a} 存入 {s.account}，所以需要办理存款。",
            ),
        )
    if tool == "get_quote":
        return _quote(
            s,
            _say(
                lang,
                en=f"The user asks for the current price of {s.symbol}, so I need to get a quote.",
                zh=f"用户想知道 {s.symbol} 的当前价格，所以需要查询报价。",
            ),
        )
    if tool == "get_transactions":
        return _transactions(
            s,
            _say(
                lang,
                en=f"The user wants {s.days} days of history on {s.account}, so I need to list it.",
                zh=f"用户想看 {s.account} 最近 {s.days} 天的记录，所以需要列出交易明细。",
            ),
        )
    if tool == "respond":
        reply = RESPOND_REPLIES[lang][template_index].format(**s.text())
        return Step(
            "respond",
            {"message": reply},
            _say(
                lang,
                en="No tool can do this, so I need to reply to the user directly.",
                zh="没有工具能处理这个请求，所以需要直接回复用户。",
            ),
            _say(lang, en="reply to the user", zh="回复用户"),
        )
    raise ValueError(f"no single-step action for tool {tool!r}")


def _planted_check_first(s: Slots) -> Step:
    """The case study's ambiguity: a withdraw request answered with a balance check."""
    lang = s.lang
    return _check_balance(
        s,
        _say(
            lang,
            en=f"Before any withdrawal I need to check the balance of {s.account} first.",
            zh=f"取钱之前需要先查询 {s.account} 的余额。",
        ),
    )


# ---------------------------------------------------------------------------------------------
# Multi-step patterns: each returns the steps of one scenario; `ok` picks the branch. A
# conditional scenario's last step carries `plan_ahead`, the same in both branches, because
# earlier steps cannot know the outcome yet.


def _covered_balance(rng: random.Random, needed: float, ok: bool) -> int:
    """A balance that covers `needed` when ok, else falls short; sometimes a round 万 figure."""
    low, high = (1.1, 12.0) if ok else (0.05, 0.92)
    balance = max(1, int(needed * rng.uniform(low, high)))
    rounded = balance // 10000 * 10000
    if rng.random() < 0.4 and rounded > 0 and (rounded >= needed) == ok:
        return rounded
    return balance


def _branch(ok: bool, act: Step, refuse: Step, ahead: str) -> Step:
    """The conditional last step: act when the condition holds, else respond; foreseen alike."""
    return replace(act if ok else refuse, plan_ahead=ahead, condition="holds" if ok else "fails")


def _transfer_if_enough(rng: random.Random, s: Slots, ok: bool) -> list[Step]:
    lang, a, to = s.lang, s.amount.text, s.to_text
    balance = _covered_balance(rng, s.amount.value, ok)
    b = _balance_text(balance, lang)
    check = _check_balance(
        s,
        _say(
            lang,
            en=f"The transfer depends on the balance, so I check {s.account} first.",
            zh=f"转账取决于余额，所以需要先查询 {s.account} 的余额，够的话再转账。",
        ),
        balance,
    )
    transfer = _transfer(
        s,
        _say(
            lang,
            en=f"The balance {b} covers {a}, therefore I can now transfer it to {to}.",
            zh=f"余额 {b} 足够支付 {a}，所以现在转账到 {to}。",
        ),
        s.amount,
    )
    refuse = _respond(
        lang,
        _say(
            lang,
            en=f"The balance {b} is less than {a}, so I cannot transfer; I need to tell the user.",
            zh=f"余额 {b} 不足 {a}，所以不能转账，需要告诉用户。",
        ),
        _say(
            lang,
            en=f"Your balance in {s.account} is {b}, not enough to transfer {a}.",
            zh=f"您的 {s.account} 余额为 {b}，不足以转账 {a}。",
        ),
    )
    ahead = _say(lang, en=f"transfer {a} to {to} if enough", zh=f"余额够则转 {a} 到 {to}")
    return [check, _branch(ok, transfer, refuse, ahead)]


def _withdraw_if_enough(rng: random.Random, s: Slots, ok: bool) -> list[Step]:
    lang, a = s.lang, s.amount.text
    balance = _covered_balance(rng, s.amount.value, ok)
    b = _balance_text(balance, lang)
    check = _check_balance(
        s,
        _say(
            lang,
            en=f"Withdrawing {a} needs enough money, so I check {s.account} first.",
            zh=f"取 {a} 之前需要先查 {s.account} 的余额，因为余额必须够。",
        ),
        balance,
    )
    withdraw = _withdraw(
        s,
        _say(
            lang,
            en=f"The balance {b} is enough for {a}, therefore I can withdraw it now.",
            zh=f"余额 {b} 够取 {a}，所以现在可以取款。",
        ),
    )
    refuse = _respond(
        lang,
        _say(
            lang,
            en=f"Since the balance {b} is below {a}, I cannot withdraw and need to tell the user.",
            zh=f"因为余额 {b} 少于 {a}，所以无法取款，需要告诉用户。",
        ),
        _say(
            lang,
            en=f"{s.account} only has {b}, so I can't withdraw {a}.",
            zh=f"{s.account} 只有 {b}，无法取出 {a}。",
        ),
    )
    ahead = _say(lang, en=f"withdraw {a} if enough", zh=f"余额够则取 {a}")
    return [check, _branch(ok, withdraw, refuse, ahead)]


def _price_against_limit(rng: random.Random, limit: int, above: bool) -> float:
    """A price strictly above or below `limit`, in cents."""
    price = round(limit * (rng.uniform(1.01, 1.25) if above else rng.uniform(0.75, 0.99)), 2)
    if (price > limit) == above and price != limit:
        return price
    return float(limit + 1 if above else limit - 1)


def _trade_if_limit(rng: random.Random, s: Slots, ok: bool, side: str) -> list[Step]:
    """Buy below / sell above a limit: quote first, then trade or explain why not."""
    lang, limit, q = s.lang, s.limit, s.qty
    buying = side == "buy"
    price = _price_against_limit(rng, limit, above=(ok != buying))
    p = f"{price:.2f}"
    verb = SIDE_WORDS[lang][side][0]
    wanted_en, wanted_zh = ("below", "低于") if buying else ("above", "高于")
    missed_en, missed_zh = ("above", "高于") if buying else ("below", "低于")
    quote = _quote(
        s,
        _say(
            lang,
            en=f"The order depends on the price of {s.symbol}, so I need to get a quote first.",
            zh=f"是否{verb}取决于 {s.symbol} 的价格，所以需要先查询报价。",
        ),
        price,
    )
    trade = _order(
        s,
        _say(
            lang,
            en=f"{s.symbol} is at {p}, {wanted_en} {limit}, therefore I {side} {q} shares now.",
            zh=f"{s.symbol} 现价 {p}，{wanted_zh} {limit}，所以现在{verb} {q} 股。",
        ),
        side,
    )
    refuse = _respond(
        lang,
        _say(
            lang,
            en=f"Since {s.symbol} is at {p}, not {wanted_en} {limit}, now I reply I cannot {side}.",
            zh=f"{s.symbol} 现价 {p}，没有{wanted_zh} {limit}，所以现在需要回复用户，无法成交。",
        ),
        _say(
            lang,
            en=f"{s.symbol} is at {p}, {missed_en} your limit of {limit}, so I did not {side}.",
            zh=f"{s.symbol} 现价 {p}，{missed_zh}您设定的 {limit}，所以没有{verb}。",
        ),
    )
    ahead = _say(
        lang,
        en=f"{side} {q} {s.symbol} if {wanted_en} {limit}",
        zh=f"{wanted_zh} {limit} 则{verb} {q} 股",
    )
    return [quote, _branch(ok, trade, refuse, ahead)]


def _buy_if_below(rng: random.Random, s: Slots, ok: bool) -> list[Step]:
    return _trade_if_limit(rng, s, ok, "buy")


def _sell_if_above(rng: random.Random, s: Slots, ok: bool) -> list[Step]:
    return _trade_if_limit(rng, s, ok, "sell")


def _buy_if_affordable(rng: random.Random, s: Slots, ok: bool) -> list[Step]:
    """Three steps: balance, then price, then buy only if quantity × price is covered."""
    lang, q = s.lang, s.qty
    price = round(rng.uniform(5, 900), 2)
    cost = q * price
    balance = _covered_balance(rng, cost, ok)
    b, c = _balance_text(balance, lang), f"{cost:,.2f}"
    check = _check_balance(
        s,
        _say(
            lang,
            en=f"Buying depends on the money in {s.account}, so I check its balance first.",
            zh=f"能不能买取决于 {s.account} 的钱，所以需要先查余额，再查股价。",
        ),
        balance,
    )
    quote = _quote(
        s,
        _say(
            lang,
            en=f"The balance is {b}; then I need the price of {s.symbol} in order to compare.",
            zh=f"余额是 {b}，然后需要查询 {s.symbol} 的价格，为了比较是否够买。",
        ),
        price,
    )
    buy = _order(
        s,
        _say(
            lang,
            en=f"{q} shares cost {c} and the balance {b} covers it, therefore I buy now.",
            zh=f"{q} 股需要 {c}，余额 {b} 足够，所以现在买入。",
        ),
        "buy",
    )
    refuse = _respond(
        lang,
        _say(
            lang,
            en=f"Since {q} shares cost {c} but the balance is {b}, now I reply it is not enough.",
            zh=f"{q} 股需要 {c}，但余额只有 {b}，所以现在需要回复用户资金不足。",
        ),
        _say(
            lang,
            en=f"{q} {s.symbol} shares cost about {c}, but {s.account} has only {b}.",
            zh=f"{q} 股 {s.symbol} 约需 {c}，但 {s.account} 只有 {b}。",
        ),
    )
    ahead = _say(lang, en=f"buy {q} {s.symbol} if affordable", zh=f"钱够则买 {q} 股 {s.symbol}")
    return [check, quote, _branch(ok, buy, refuse, ahead)]


def _quote_then_trade(rng: random.Random, s: Slots, ok: bool) -> list[Step]:
    lang = s.lang
    return [
        _quote(
            s,
            _say(
                lang,
                en=f"The user wants {s.symbol}'s price before trading, so I get a quote first.",
                zh=f"用户想先知道 {s.symbol} 的价格，所以先查询报价，然后再下单。",
            ),
            round(rng.uniform(5, 900), 2),
        ),
        _order(
            s,
            _say(
                lang,
                en=f"I have the quote for {s.symbol}, so then I need to {s.side} {s.qty} shares.",
                zh=f"已经拿到 {s.symbol} 的报价，所以接下来需要{s.side_text} {s.qty} 股。",
            ),
            s.side,
        ),
    ]


def _balance_then_history(rng: random.Random, s: Slots, ok: bool) -> list[Step]:
    lang = s.lang
    return [
        _check_balance(
            s,
            _say(
                lang,
                en=f"The user wants the balance, then the history, so I check {s.account} first.",
                zh=f"用户先要余额再要流水，所以首先查询 {s.account} 的余额。",
            ),
            rng.randint(100, 2_000_000),
        ),
        _transactions(
            s,
            _say(
                lang,
                en=f"The balance is done, so then I need to list {s.days} days of transactions.",
                zh=f"余额已经查好，然后需要列出最近 {s.days} 天的交易记录。",
            ),
        ),
    ]


def _deposit_then_balance(rng: random.Random, s: Slots, ok: bool) -> list[Step]:
    lang = s.lang
    return [
        _deposit(
            s,
            _say(
                lang,
                en=f"The user wants the new balance, so I deposit {s.amount.text} first.",
                zh=f"用户要存款后的余额，所以需要先存入 {s.amount.text}。",
            ),
        ),
        _check_balance(
            s,
            _say(
                lang,
                en=f"The deposit went through, so then I check the new balance of {s.account}.",
                zh=f"存款已经完成，然后查询 {s.account} 的最新余额。",
            ),
        ),
    ]


def _transfer_then_balance(rng: random.Random, s: Slots, ok: bool) -> list[Step]:
    lang = s.lang
    return [
        _transfer(
            s,
            _say(
                lang,
                en=f"The user wants what is left after paying, so I send {s.amount.text} first.",
                zh=f"用户要转账后的余额，所以需要先转 {s.amount.text} 到 {s.to_text}。",
            ),
            s.amount,
        ),
        _check_balance(
            s,
            _say(
                lang,
                en=f"The transfer is done, so then I check what is left in {s.account}.",
                zh=f"转账已经完成，然后查询 {s.account} 还剩多少。",
            ),
        ),
    ]


def _deposit_transfer_history(rng: random.Random, s: Slots, ok: bool) -> list[Step]:
    lang = s.lang
    return [
        _deposit(
            s,
            _say(
                lang,
                en=f"Three tasks in order, so I deposit {s.amount.text} into {s.account} first.",
                zh=f"一共三件事要按顺序做，所以首先把 {s.amount.text} 存入 {s.account}。",
            ),
        ),
        _transfer(
            s,
            _say(
                lang,
                en=f"The deposit is done, so then I transfer {s.amount2.text} to {s.to_text}.",
                zh=f"存款已完成，然后转 {s.amount2.text} 到 {s.to_text}。",
            ),
            s.amount2,
        ),
        _transactions(
            s,
            _say(
                lang,
                en=f"Both payments are done, so then I need to list {s.days} days of transactions.",
                zh=f"存款和转账都完成了，然后需要列出最近 {s.days} 天的交易记录。",
            ),
        ),
    ]


@dataclass(frozen=True)
class Pattern:
    build: Callable[[random.Random, Slots, bool], list[Step]]
    conditional: bool


PATTERNS = {
    "transfer_if_enough": Pattern(_transfer_if_enough, True),
    "withdraw_if_enough": Pattern(_withdraw_if_enough, True),
    "buy_if_below": Pattern(_buy_if_below, True),
    "sell_if_above": Pattern(_sell_if_above, True),
    "quote_then_trade": Pattern(_quote_then_trade, False),
    "balance_then_history": Pattern(_balance_then_history, False),
    "deposit_then_balance": Pattern(_deposit_then_balance, False),
    "transfer_then_balance": Pattern(_transfer_then_balance, False),
    "buy_if_affordable": Pattern(_buy_if_affordable, True),
    "deposit_transfer_history": Pattern(_deposit_transfer_history, False),
}


# ---------------------------------------------------------------------------------------------
# Rows


def _solution(step: Step, plan: list[str]) -> str:
    action = {"tool": step.tool, "params": step.params}
    return json.dumps({"thought": step.thought, "action": action, "plan": plan}, ensure_ascii=False)


def _row(
    row_id: str, scenario_id: str, kind: str, lang: str, index: int, steps: list[Step], request: str
) -> dict[str, Any]:
    """Row for steps[index]: the request plus what the earlier steps returned."""
    step = steps[index]
    prompt = request
    if index:
        history = [f"Step {i + 1}: {s.tool} → {s.observation}" for i, s in enumerate(steps[:index])]
        prompt = "\n".join([request, "", "Previous steps:", *history])
    plan = [step.plan_now, *(s.plan_ahead or s.plan_now for s in steps[index + 1 :])]
    row = {
        "id": row_id,
        "scenario_id": scenario_id,
        "kind": kind,
        "lang": lang,
        "step": index + 1,
        "n_steps": len(steps),
        "prompt": prompt,
        "solution": _solution(step, plan),
        "tool": step.tool,
    }
    # Optional in the contract: only a conditional step says which branch it labels.
    return (row | {"condition": step.condition}) if step.condition else row


def normalise_prompt(prompt: str) -> str:
    """The form under which two prompts count as the same request (case and spacing ignored)."""
    return " ".join(prompt.lower().split())


@dataclass
class Dataset:
    """Every generated file's rows, the planted ids, and (for tests) each row's phrasing id."""

    files: dict[str, list[dict[str, Any]]]
    planted_ids: list[str]
    template_of: dict[str, str] = field(default_factory=dict)


class Job(NamedTuple):
    """One scenario to draw: a tool (single) or pattern (multi), a language and a phrasing.

    `flag` is the planted-ambiguity marker for single-step jobs and the branch (condition
    holds) for multi-step ones.
    """

    name: str
    lang: str
    phrasing: int
    flag: bool


def _trained_phrasings(templates: list[str], held_out: int) -> int:
    """How many of a list's phrasings train and eval use; the rest are kept for unseen."""
    return len(templates) - held_out


class _Builder:
    """Draws scenarios with one RNG, keeping every request unique across all files."""

    def __init__(self, seed: int, catalogue: Catalogue) -> None:
        self.rng = random.Random(seed)
        self.catalogue = catalogue
        self.seen: set[str] = set()
        self.template_of: dict[str, str] = {}
        self.planted: list[str] = []
        self.lang_turn = 1

    def langs(self, n: int) -> list[str]:
        """n languages, half each; odd counts alternate which language gets the extra row."""
        self.lang_turn = 1 - self.lang_turn
        langs = [LANGS[(i + self.lang_turn) % 2] for i in range(n)]
        self.rng.shuffle(langs)
        return langs

    def phrasings(self, langs: list[str], table: dict[str, list[str]], held_out: int) -> list[int]:
        """A phrasing index per entry of `langs`, cycling through that language's trained ones."""
        per_lang = {}
        for lang in LANGS:
            k = _trained_phrasings(table[lang], held_out)
            indices = [i % k for i in range(langs.count(lang))]
            self.rng.shuffle(indices)
            per_lang[lang] = iter(indices)
        return [next(per_lang[lang]) for lang in langs]

    def single_jobs(self, split: str) -> list[Job]:
        jobs = []
        for tool, n in SINGLE_COUNTS[split].items():
            langs = self.langs(n)
            phrasings = self.phrasings(langs, SINGLE_TEMPLATES[tool], HELD_OUT_SINGLE)
            jobs += [Job(tool, lang, i, False) for lang, i in zip(langs, phrasings, strict=True)]
        langs = self.langs(PLANTED_COUNTS[split])
        phrasings = [
            self.rng.randrange(
                _trained_phrasings(SINGLE_TEMPLATES["withdraw"][lang], HELD_OUT_SINGLE)
            )
            for lang in langs
        ]
        jobs += [
            Job("check_balance", lang, i, True) for lang, i in zip(langs, phrasings, strict=True)
        ]
        return jobs

    def multi_jobs(self, split: str) -> list[Job]:
        jobs = []
        for pattern, n in MULTI_COUNTS[split].items():
            fails = round(n * CONDITION_FAILS_SHARE) if PATTERNS[pattern].conditional else 0
            outcomes = [False] * fails + [True] * (n - fails)
            self.rng.shuffle(outcomes)
            langs = self.langs(n)
            phrasings = self.phrasings(langs, MULTI_TEMPLATES[pattern], HELD_OUT_MULTI)
            jobs += [Job(pattern, *job) for job in zip(langs, phrasings, outcomes, strict=True)]
        return jobs

    def request(self, template: str, lang: str) -> tuple[str, Slots]:
        """The template filled with fresh slot values, never a request drawn before."""
        for _ in range(500):
            slots = _draw_slots(self.rng, lang)
            request = template.format(**slots.text())
            if lang == "en":
                request = request[0].upper() + request[1:]
            if normalise_prompt(request) not in self.seen:
                self.seen.add(normalise_prompt(request))
                return request, slots
        raise RuntimeError(f"cannot draw a unique request for template {template!r}")

    def checked(self, row: dict[str, Any], template_id: str) -> dict[str, Any]:
        params = json.loads(row["solution"])["action"]["params"]
        error = self.catalogue.params_error(row["tool"], params)
        if error is not None:
            raise ValueError(f"generated row {row['id']}: invalid {row['tool']} params: {error}")
        self.template_of[row["id"]] = template_id
        return row

    def single_rows(self, split: str, jobs: list[Job]) -> list[dict[str, Any]]:
        """One row per job, shuffled then numbered; planted jobs use withdraw phrasings."""
        drawn = []
        for tool, lang, phrasing, planted in jobs:
            source = "withdraw" if planted else tool
            request, slots = self.request(SINGLE_TEMPLATES[source][lang][phrasing], lang)
            step = _planted_check_first(slots) if planted else _single_step(tool, slots, phrasing)
            drawn.append((request, lang, step, f"{source}.{lang}.{phrasing}", planted))
        self.rng.shuffle(drawn)
        rows = []
        for number, (request, lang, step, template_id, planted) in enumerate(drawn, 1):
            row_id = f"{split}-s-{number:04d}"
            row = _row(row_id, row_id, "single", lang, 0, [step], request)
            rows.append(self.checked(row, template_id))
            if planted:
                self.planted.append(row_id)
        return rows

    def multi_rows(self, split: str, jobs: list[Job]) -> list[dict[str, Any]]:
        """One row per step of each job's scenario; scenarios shuffled then numbered."""
        drawn = []
        for pattern, lang, phrasing, ok in jobs:
            request, slots = self.request(MULTI_TEMPLATES[pattern][lang][phrasing], lang)
            steps = PATTERNS[pattern].build(self.rng, slots, ok)
            drawn.append((request, lang, steps, f"{pattern}.{lang}.{phrasing}"))
        self.rng.shuffle(drawn)
        rows = []
        for number, (request, lang, steps, template_id) in enumerate(drawn, 1):
            scenario_id = f"{split}-m-{number:04d}"
            for index in range(len(steps)):
                row = _row(
                    f"{scenario_id}-{index + 1}", scenario_id, "multi", lang, index, steps, request
                )
                rows.append(self.checked(row, template_id))
        return rows


def _unseen_jobs() -> tuple[list[Job], list[Job]]:
    """Jobs for the held-out phrasings only; conditional patterns get both branches."""
    single = [
        Job(tool, lang, i, False)
        for tool, by_lang in SINGLE_TEMPLATES.items()
        for lang in LANGS
        for i in range(_trained_phrasings(by_lang[lang], HELD_OUT_SINGLE), len(by_lang[lang]))
        for _ in range(UNSEEN_SINGLE_PER_TEMPLATE)
    ]
    multi = [
        Job(pattern, lang, i, copy % 2 == 0 or not PATTERNS[pattern].conditional)
        for pattern, by_lang in MULTI_TEMPLATES.items()
        for lang in LANGS
        for i in range(_trained_phrasings(by_lang[lang], HELD_OUT_MULTI), len(by_lang[lang]))
        for copy in range(UNSEEN_MULTI_PER_TEMPLATE)
    ]
    return single, multi


def build_dataset(seed: int = 0, catalogue: Catalogue | None = None) -> Dataset:
    """All shipped rows for `seed`; raises if any generated params break the catalogue's schema."""
    builder = _Builder(seed, catalogue or load_catalogue())
    files = {}
    for split in ("train", "eval"):
        files[f"{split}/single_step.jsonl"] = builder.single_rows(split, builder.single_jobs(split))
        files[f"{split}/multistep.jsonl"] = builder.multi_rows(split, builder.multi_jobs(split))
    unseen_single, unseen_multi = _unseen_jobs()
    unseen = builder.single_rows("unseen", unseen_single) + builder.multi_rows(
        "unseen", unseen_multi
    )
    files["eval/unseen_phrasing.jsonl"] = unseen
    sizes = (len(files["train/single_step.jsonl"]), len(files["train/multistep.jsonl"]))
    if sizes != (TRAIN_SINGLE_ROWS, TRAIN_MULTI_ROWS):
        raise ValueError(f"train sizes {sizes}, expected {(TRAIN_SINGLE_ROWS, TRAIN_MULTI_ROWS)}")
    return Dataset(files=files, planted_ids=builder.planted, template_of=builder.template_of)


def write_dataset(dataset: Dataset, out: Path | str) -> list[Path]:
    """Write the dataset's files under `out` (train/, eval/, planted_ambiguity.json)."""
    out = Path(out)
    written = []
    for name, rows in dataset.files.items():
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8", newline="\n") as handle:
            handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        written.append(path)
    planted = out / PLANTED_FILE
    payload = {"ids": dataset.planted_ids, "why": PLANTED_WHY}
    planted.write_text(
        json.dumps(payload, ensure_ascii=False, indent=2) + "\n", encoding="utf-8", newline="\n"
    )
    written.append(planted)
    return written
