"""What a model call costs: the dated price table in ``data/prices.yaml`` applied to a response's usage.

A call's prompt is billed in three parts: ``input_tokens`` (not cached) at the input price,
``cache_creation_input_tokens`` at the cache-write price and ``cache_read_input_tokens`` at the cache-read
price; ``output_tokens`` (thinking included) at the output price. A model with no price in the table has an
unknown cost: ``None``, never zero.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any


from .errors import ConfigError
from .paths import data_dir, read_dated_table

PRICES_FILE = data_dir() / "prices.yaml"
PRICE_FIELDS = ("input", "output", "cache_write", "cache_write_1h", "cache_read")
_DATE_SUFFIX = re.compile(r"-\d{8}$")


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens for one model."""

    model: str
    input: float
    output: float
    cache_write: float
    cache_write_1h: float
    cache_read: float


@dataclass(frozen=True)
class PriceTable:
    checked: str          # the date the prices were checked against the source
    source: str
    prices: dict[str, Price]

    def price(self, model: str | None) -> Price | None:
        """The price of ``model`` (exact id, or the id without its date suffix); None when unknown."""
        if not model:
            return None
        if model in self.prices:
            return self.prices[model]
        return self.prices.get(_DATE_SUFFIX.sub("", model))


def load_prices(path: str | Path = PRICES_FILE) -> PriceTable:
    """Read a price table; a malformed one raises ConfigError naming the file and the entry."""
    path = Path(path)
    raw = read_dated_table(path, "price table", ("checked", "source"))
    prices: dict[str, Price] = {}
    for model, row in raw["models"].items():
        if not isinstance(row, dict):
            raise ConfigError(f"{path}: models.{model}: expected a mapping of prices")
        missing = [f for f in PRICE_FIELDS if f not in row]
        if missing:
            raise ConfigError(f"{path}: models.{model}: missing {', '.join(missing)}")
        values = {}
        for f in PRICE_FIELDS:
            value = row[f]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"{path}: models.{model}.{f}: expected a price of 0 or more, got {value!r}")
            values[f] = float(value)
        prices[str(model)] = Price(model=str(model), **values)
    return PriceTable(checked=str(raw["checked"]), source=str(raw["source"]), prices=prices)


@lru_cache(maxsize=1)
def default_prices() -> PriceTable:
    return load_prices()


def _int(usage: dict[str, Any], key: str) -> int:
    return int(usage.get(key) or 0)


def call_cost(usage: dict[str, Any], price: Price | None) -> float | None:
    """The cost in US dollars of one call's ``usage`` at ``price``; None when the price is unknown."""
    if price is None:
        return None
    written = _int(usage, "cache_creation_input_tokens")
    split = usage.get("cache_creation") if isinstance(usage.get("cache_creation"), dict) else None
    written_1h = int(split.get("ephemeral_1h_input_tokens") or 0) if split else 0
    written_1h = min(written_1h, written)
    dollars = (_int(usage, "input_tokens") * price.input
               + (written - written_1h) * price.cache_write + written_1h * price.cache_write_1h
               + _int(usage, "cache_read_input_tokens") * price.cache_read
               + _int(usage, "output_tokens") * price.output)
    return dollars / 1_000_000


def usage_cost(usage: dict[str, Any], model: str | None, table: PriceTable | None = None) -> float | None:
    """The cost of one call of ``model``; None when the table has no price for it."""
    table = table or default_prices()
    return call_cost(usage, table.price(model))


def uncached_cost(usage: dict[str, Any], price: Price | None) -> float | None:
    """What the same call would cost if every prompt token were billed at the input price (no caching)."""
    if price is None:
        return None
    prompt = (_int(usage, "input_tokens") + _int(usage, "cache_creation_input_tokens")
              + _int(usage, "cache_read_input_tokens"))
    return (prompt * price.input + _int(usage, "output_tokens") * price.output) / 1_000_000


def format_cost(cost: float | None, unknown: list[str] | tuple[str, ...] = ()) -> str:
    """``$0.0123``, or why the cost is unknown."""
    if cost is None:
        models = ", ".join(sorted(set(unknown))) or "the model"
        return f"cost unknown (no price for {models})"
    return f"${cost:.4f}"
