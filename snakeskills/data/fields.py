"""Source columns to NeMo-Skills' fields: the field map (a column copied, or a string extracted from it by a
regex), the columns a spec reads (checked before any row is converted), and multiple-choice rows (options
lettered A, B, ..., optionally shuffled, and the correct option's letter as ``expected_answer``)."""

from __future__ import annotations

import random
import re
import string

from snakeskills.data.code_rows import code_columns
from snakeskills.errors import SnakeskillsError


def field_rule(rule: str | dict) -> dict:
    """``"question"`` or ``{column, regex, remove}`` -> ``{column, regex, remove}``."""
    if isinstance(rule, str):
        return {"column": rule, "regex": None, "remove": []}
    return {"column": rule["column"], "regex": rule.get("regex"), "remove": rule.get("remove") or []}


def field_map_key(key: str, field: str, rule: str | dict) -> str:
    return f"{key}.field_map.{field}" + (".column" if isinstance(rule, dict) else "")


def read_columns(spec: dict, key: str) -> dict[str, str]:
    """Every source column a spec reads, by the config key that names it."""
    named = {field_map_key(key, field, rule): field_rule(rule)["column"] for field, rule in spec["field_map"].items()}
    choice = spec["multiple_choice"]
    if choice is not None:
        options = choice["options"]
        if isinstance(options, str):
            named[f"{key}.multiple_choice.options"] = options
        else:
            named.update({f"{key}.multiple_choice.options[{index}]": column for index, column in enumerate(options)})
        named[f"{key}.multiple_choice.correct.column"] = choice["correct"]["column"]
    if spec["code"] is not None:
        named.update(code_columns(spec["code"], f"{key}.code"))
    return named


def check_columns(spec: dict, columns: list[str], *, key: str, where: str) -> None:
    """Every column the field map, multiple_choice and code read must exist; checked once, before any row is
    converted."""
    for config_key, column in read_columns(spec, key).items():
        if column not in columns:
            raise SnakeskillsError(
                f"{where}: config key {config_key} names column {column!r}, which the data lacks; its columns are: "
                f"{', '.join(columns)}"
            )


def extract(value, rule: dict, *, key: str, where: str):
    """A column's value, or (with ``regex``/``remove``) the string extracted from it."""
    if value is None or (rule["regex"] is None and not rule["remove"]):
        return value
    text = str(value)
    if rule["regex"] is not None:
        match = re.search(rule["regex"], text)
        if match is None:
            shown = text if len(text) <= 80 else f"...{text[-77:]}"
            raise SnakeskillsError(
                f"{where}: config key {key}.regex {rule['regex']!r} finds nothing in column "
                f"{rule['column']!r} ({shown!r})"
            )
        text = match.group(1) if match.re.groups else match.group(0)
    for substring in rule["remove"]:
        text = text.replace(substring, "")
    return text.strip()


def apply_field_map(record: dict, field_map: dict, *, key: str, where: str) -> dict:
    """Add NeMo-Skills' fields built from source columns (``field_map = {"problem": "question", ...}``)."""
    mapped = dict(record)
    for field, rule in field_map.items():
        parsed = field_rule(rule)
        if parsed["column"] not in record:
            raise SnakeskillsError(
                f"{where}: config key {field_map_key(key, field, rule)} maps {field!r} from column "
                f"{parsed['column']!r}, which the row lacks"
            )
        mapped[field] = extract(record[parsed["column"]], parsed, key=f"{key}.field_map.{field}", where=where)
    return mapped


def option_texts(record: dict, options: str | list[str], *, key: str, where: str) -> list[str]:
    """The option texts of one row: a list column's items, or one column per option."""
    if isinstance(options, str):
        value = record.get(options)
        if not isinstance(value, list | tuple):
            raise SnakeskillsError(
                f"{where}: config key {key}.options names column {options!r}, which holds a "
                f"{type(value).__name__}, not a list of options; name one column per option instead"
            )
        values, names = list(value), [f"{options}[{index}]" for index in range(len(value))]
    else:
        values, names = [record.get(column) for column in options], list(options)
    if not 2 <= len(values) <= len(string.ascii_uppercase):
        raise SnakeskillsError(f"{where}: {len(values)} options; a question needs 2 to 26")
    texts = []
    for value, name in zip(values, names, strict=True):
        if value is None or str(value).strip() == "":
            raise SnakeskillsError(f"{where}: option {name} is empty")
        texts.append(str(value).strip())
    return texts


def correct_option(record: dict, texts: list[str], correct: dict, *, key: str, where: str) -> int:
    """The index of the correct option, from ``correct.column`` read as an index, a letter or an option's text."""
    value, form = record.get(correct["column"]), correct["is"]
    shown = f"{key}.correct.column {correct['column']!r} holds {value!r}"
    if form == "index":
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and value.isdigit())):
            raise SnakeskillsError(f"{where}: config key {shown}, not an option index (correct.is is index)")
        index = int(value)
    elif form == "letter":
        letter = str(value).strip().strip("()").upper() if value is not None else ""
        if len(letter) != 1 or letter not in string.ascii_uppercase:
            raise SnakeskillsError(f"{where}: config key {shown}, not an option letter (correct.is is letter)")
        index = string.ascii_uppercase.index(letter)
    else:
        matches = [index for index, text in enumerate(texts) if text == str(value).strip()]
        if len(matches) != 1:
            found = "is none of the options" if not matches else f"matches {len(matches)} options"
            raise SnakeskillsError(f"{where}: config key {shown}, which {found} (correct.is is text)")
        index = matches[0]
    if not 0 <= index < len(texts):
        raise SnakeskillsError(f"{where}: config key {shown}, but the row has {len(texts)} options")
    return index


def apply_multiple_choice(record: dict, choice: dict, *, key: str, where: str) -> dict:
    """A multiple-choice row in NeMo-Skills' form: lettered options appended to ``problem``, ``options`` (that
    block), ``option_letters``, one field per letter, and the correct letter as ``expected_answer``.

    With ``shuffle_seed`` the options are put in an order drawn from the seed and the question's text, so a row's
    order does not depend on where it sits in the file and stays the same on every run."""
    key = f"{key}.multiple_choice"
    if record.get("problem") is None:
        raise SnakeskillsError(f"{where}: no problem to add the options to (map one with field_map.problem)")
    texts = option_texts(record, choice["options"], key=key, where=where)
    correct = correct_option(record, texts, choice["correct"], key=key, where=where)
    order = list(range(len(texts)))
    if choice.get("shuffle_seed") is not None:  # optional (the schema fills null; direct callers may omit it)
        random.Random(f"{choice['shuffle_seed']}\n{record['problem']}").shuffle(order)
    letters = string.ascii_uppercase[: len(texts)]
    block = "\n".join(f"{letter}. {texts[index]}" for letter, index in zip(letters, order, strict=True))
    return {
        **record,
        "problem": f"{record['problem']}\n{block}",
        "expected_answer": letters[order.index(correct)],
        "options": block,
        "option_letters": ", ".join(letters),
        **{letter: texts[index] for letter, index in zip(letters, order, strict=True)},
    }
