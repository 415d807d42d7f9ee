"""The calculator tool: one arithmetic expression (integers and decimals, ``+ - * / // % **``, unary signs,
parentheses), read by walking Python's ``ast`` over an allow-list of node types. Nothing is executed: a name, a
call, an attribute, a subscript or any other node is refused, so it runs in the job's own process without a
sandbox.

Integers and decimals are exact (a decimal is read from its digits as a fraction: ``0.1 + 0.2`` is ``0.3``); a
power with a fractional exponent is a float. Every step is bounded: an integer exponent above ``MAX_EXPONENT``, a
number or result of more than ``MAX_DIGITS`` digits, an expression longer than ``MAX_LENGTH`` characters or a float
that overflows is an error, found before it could take long. A value shows like a calculator's: an integral value
without a decimal point (``6/3`` is ``2``), any other with at most ``SIGNIFICANT_DIGITS`` significant digits.
"""

from __future__ import annotations

import ast
import decimal
import math
import operator
import re
from fractions import Fraction

from snakeskills.tools.session import Ran, ToolSession

MAX_EXPONENT = 1000
MAX_DIGITS = 4300  # Python's own limit on the digits of an int it converts to text
MAX_BITS = int(MAX_DIGITS * math.log2(10))  # 2**MAX_BITS has fewer than MAX_DIGITS + 1 digits
MAX_LENGTH = 10_000
SIGNIFICANT_DIGITS = 12
FLOAT_INTEGERS = 2**53  # below it, an integral float is exactly the integer it shows

OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
SIGNS = {ast.USub: operator.neg, ast.UAdd: operator.pos}
# What a refused node is called in the error
REFUSED = {
    ast.Name: "a name",
    ast.Call: "a call",
    ast.Attribute: "an attribute",
    ast.Subscript: "a subscript",
    ast.Lambda: "a lambda",
    ast.Compare: "a comparison",
    ast.BoolOp: "a logical operator",
}
EXPONENT = re.compile(r"[eE]([+-]?[\d_]+)$")

Number = int | Fraction | float


class CalculationError(Exception):
    """An expression the calculator refuses or cannot evaluate; the message is what the model is shown."""


def calculate(text: str) -> str:
    """The value of the arithmetic expression ``text``, as the calculator shows it; raises ``CalculationError``."""
    expression = text.strip()
    if len(expression) > MAX_LENGTH:
        raise CalculationError(f"expression too long (over {MAX_LENGTH} characters)")
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError) as error:  # ValueError: an integer of more than MAX_DIGITS digits
        raise CalculationError("not an arithmetic expression") from error
    except (RecursionError, MemoryError) as error:
        raise CalculationError("expression too deeply nested") from error
    try:
        return show(_evaluate(tree.body, expression))
    except RecursionError as error:
        raise CalculationError("expression too deeply nested") from error
    except ZeroDivisionError as error:
        raise CalculationError("division by zero") from error
    except ValueError as error:  # a decimal of more than MAX_DIGITS digits
        raise CalculationError(f"number too long (more than {MAX_DIGITS} digits)") from error
    except OverflowError as error:
        raise CalculationError("result too large") from error


def _evaluate(node: ast.expr, source: str) -> Number:
    """The exact value of an allowed node (an int, a Fraction, or a float once a fractional power made one)."""
    if isinstance(node, ast.Constant):
        return _number(node, source)
    if isinstance(node, ast.UnaryOp) and type(node.op) in SIGNS:
        return SIGNS[type(node.op)](_evaluate(node.operand, source))
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        left, right = _evaluate(node.left, source), _evaluate(node.right, source)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        if isinstance(node.op, ast.Div) and isinstance(left, int):
            left = Fraction(left)  # exact: 1/3 is a third, not a float
        return _bounded(OPERATORS[type(node.op)](left, right))
    if isinstance(node, ast.BinOp | ast.UnaryOp):
        what = f"the operator {type(node.op).__name__}"
    else:
        what = REFUSED.get(type(node), f"{type(node).__name__}")
    raise CalculationError(f"not an arithmetic expression ({what} is not allowed)")


def _number(node: ast.Constant, source: str) -> Number:
    """A number written in the expression: an int as it is, a decimal as the exact fraction its digits say."""
    value = node.value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalculationError(f"not an arithmetic expression ({type(value).__name__} is not a number)")
    if isinstance(value, int):
        return _bounded(value)
    if not math.isfinite(value):
        raise CalculationError("number too large")
    written = (ast.get_source_segment(source, node) or repr(value)).replace("_", "")
    exponent = EXPONENT.search(written)
    if exponent and abs(int(exponent.group(1))) > MAX_DIGITS:  # 1e-9999: a float's 0.0, not a 10**9999 fraction
        return Fraction(value)
    return _bounded(Fraction(written))


def _power(base: Number, exponent: Number) -> Number:
    """``base ** exponent``, refused before it is computed when its exponent or its result would be too large."""
    if isinstance(exponent, Fraction) and exponent.denominator == 1:
        exponent = exponent.numerator
    if isinstance(exponent, int):
        if abs(exponent) > MAX_EXPONENT:
            raise CalculationError(f"exponent too large (above {MAX_EXPONENT})")
        if isinstance(base, int | Fraction) and _bits(base) * abs(exponent) > MAX_BITS:
            raise CalculationError(f"result too large (more than {MAX_DIGITS} digits)")
        return _bounded(Fraction(base) ** exponent if exponent < 0 else base**exponent)
    result = float(base) ** float(exponent)
    if isinstance(result, complex):
        raise CalculationError("result is not a real number")
    return _bounded(result)


def _bits(value: int | Fraction) -> int:
    """The larger bit length of a value's numerator and denominator."""
    value = Fraction(value)
    return max(value.numerator.bit_length(), value.denominator.bit_length())


def _bounded(value: Number) -> Number:
    """``value``, or an error when it has more than ``MAX_DIGITS`` digits (an exact one) or overflowed (a float)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CalculationError("result too large")
        return value
    if _bits(value) > MAX_BITS:
        raise CalculationError(f"result too large (more than {MAX_DIGITS} digits)")
    return value


def show(value: Number) -> str:
    """A value as a calculator shows it: an integral value as an integer, any other with at most
    ``SIGNIFICANT_DIGITS`` significant digits (trailing zeros trimmed)."""
    if isinstance(value, float):
        if value.is_integer() and abs(value) < FLOAT_INTEGERS:
            return str(int(value))
        return f"{value:.{SIGNIFICANT_DIGITS}g}"
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    context = decimal.Context(prec=SIGNIFICANT_DIGITS, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
    quotient = context.divide(decimal.Decimal(value.numerator), decimal.Decimal(value.denominator))
    return f"{quotient.normalize(context):g}"


class CalculatorSession(ToolSession):
    """The calculator's session: each call is one expression, evaluated in this process; it keeps nothing."""

    def run(self, text: str) -> Ran:
        try:
            return Ran(calculate(text))
        except CalculationError as error:
            return Ran(f"Error: {error}", error=True)
