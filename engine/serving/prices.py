"""What a model's tokens cost: the price table (US dollars per million input and output tokens)
and one model's price, for the cost ``pre`` states before a run (dry runs), while it runs (the
progress line) and after (results.json, records, reports).

The shipped table (``prices.toml``) names its source and date; ``--prices FILE`` replaces it and
``--price-per-mtok IN,OUT`` gives one model's price. Only models served over an API are priced
(a backend registration's ``http_api``); tokens are counted as the server reports them.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from promptrobust.engine.errors import PromptRobustError
from promptrobust.engine.safe_io.bounded_toml import TomlNestingError, load_toml

__all__ = ["Price", "PriceTable", "PriceTableError", "load_prices", "parse_price"]


class PriceTableError(PromptRobustError, ValueError):
    """A price file or price that cannot be read; the message names the file and the fix."""


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens, and where the figure comes from."""

    input: float
    output: float
    source: str = ""
    """The table (its source and date) or the flag the price came from."""

    def __post_init__(self) -> None:
        for name in ("input", "output"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0):
                raise PriceTableError(f"a price per million {name} tokens must be a finite number >= 0 (got {value!r})",
                                      setting="price_per_mtok")

    def usd(self, input_tokens: int, output_tokens: int) -> float:
        """What that many tokens cost, in US dollars."""
        return (input_tokens * self.input + output_tokens * self.output) / 1e6


@dataclass(frozen=True)
class PriceTable:
    """Prices by model name, with the table's source and date."""

    prices: Mapping[str, Price]
    source: str

    def price_of(self, model: str) -> Price | None:
        """The price of ``model`` (a registry name, ``openai:MODEL`` or ``MODEL``), or None."""
        return self.prices.get(model) or self.prices.get(model.partition(":")[2])


def load_prices(path: str | Path | None = None) -> PriceTable:
    """The price table: the shipped one, or ``path``."""
    source = Path(path) if path is not None else Path(str(resources.files("promptrobust.engine.serving").joinpath("prices.toml")))
    try:
        data = load_toml(source.read_text())
    except TomlNestingError as exc:
        raise PriceTableError(f"{source}: {exc}; flatten the file") from None
    except FileNotFoundError:
        raise PriceTableError(f"{source}: no such price file; pass --prices FILE with [prices.\"MODEL\"] input/output tables") from None
    except (tomllib.TOMLDecodeError, RecursionError, UnicodeDecodeError) as exc:
        raise PriceTableError(f"{source}: not valid TOML ({type(exc).__name__})") from None
    said = ", ".join(str(data[k]) for k in ("source", "date") if isinstance(data.get(k), str))
    label = f"{source.name}" + (f" ({said})" if said else "")
    table = data.get("prices", {})
    out: dict[str, Price] = {}
    for model, entry in table.items() if isinstance(table, dict) else ():
        try:
            price = Price(float(entry["input"]), float(entry["output"]), label)
        except (KeyError, TypeError, ValueError):
            raise PriceTableError(f"{source}: prices.{model} needs numbers input and output (US dollars per million tokens)") from None
        if price.input < 0 or price.output < 0:
            raise PriceTableError(f"{source}: prices.{model}: prices cannot be negative")
        out[str(model)] = price
    return PriceTable(out, label)


def parse_price(text: str) -> Price:
    """``--price-per-mtok IN,OUT``: US dollars per million input and output tokens."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        if len(parts) != 2:
            raise ValueError
        return Price(float(parts[0]), float(parts[1]), "--price-per-mtok")
    except ValueError:
        raise PriceTableError(f"price_per_mtok {text!r} is not IN,OUT in US dollars per million tokens (e.g. 0.15,0.60)",
                              setting="price_per_mtok") from None
