"""What a tool call costs (ToolOrchestra's efficiency): a price per call, per input token and per output token, in
whatever unit the user prices in (dollars, a paid API's credits, seconds of a GPU). A call's cost is the sum; a model
as a tool reports the tokens of the prompt it read and of the answer it wrote, a program tool none (its price is per
call only). A sample's cost is the sum over its calls (the record's ``cost``); a priced model answering on its own
(evaluated alone) costs what one call of it would."""

from __future__ import annotations

from dataclasses import dataclass

from snakeskills.errors import SnakeskillsError

PRICE_KEYS = ("per_call", "per_input_token", "per_output_token")


@dataclass(frozen=True)
class Price:
    per_call: float = 0.0
    per_input_token: float = 0.0
    per_output_token: float = 0.0

    @property
    def free(self) -> bool:
        return not (self.per_call or self.per_input_token or self.per_output_token)

    @property
    def per_token(self) -> bool:
        return bool(self.per_input_token or self.per_output_token)

    def cost(self, input_tokens: int = 0, output_tokens: int = 0) -> float:
        """One call's cost, given the tokens it read and wrote."""
        return self.per_call + self.per_input_token * input_tokens + self.per_output_token * output_tokens


FREE = Price()


def price_from_config(section: dict | None, key: str) -> Price:
    """A ``price`` section (``per_call``, ``per_input_token``, ``per_output_token``; a key left out costs 0; null:
    free). A value that is not a number from 0 names its key."""
    if section is None:
        return FREE
    unknown = sorted(set(section) - set(PRICE_KEYS))
    if unknown:
        raise SnakeskillsError(f"config key {key}.{unknown[0]}: not a price; a price has {', '.join(PRICE_KEYS)}")
    values = {}
    for name in PRICE_KEYS:
        value = section.get(name, 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise SnakeskillsError(f"config key {key}.{name}: a price from 0, not {value!r}")
        values[name] = float(value)
    return Price(**values)
