"""Prompt templates filled from record fields.

A prompt config is ``{"system": str | None, "user": str, "chat_template": bool}``. Templates use
Python ``str.format`` placeholders (``{problem}``); literal braces are doubled (``\\boxed{{}}``), as
in NeMo-Skills' prompt files. With ``chat_template: true`` the tokenizer's chat template turns the
messages into the model input; otherwise the system and user texts are concatenated.
"""

from __future__ import annotations

import string

from snakeskills.errors import SnakeskillsError


def template_fields(template: str) -> set[str]:
    """The record fields a template refers to."""
    return {field for _, field, _, _ in string.Formatter().parse(template) if field}


def fill_template(template: str, record: dict) -> str:
    try:
        return template.format_map(record)
    except KeyError as error:
        record_id = record.get("id", "<no id>")
        raise SnakeskillsError(
            f"prompt template {template!r} refers to field {error.args[0]!r}, which record {record_id!r} lacks "
            f"(it has: {sorted(record)})"
        ) from None
    except (ValueError, IndexError) as error:
        raise SnakeskillsError(f"prompt template {template!r} is not a valid format string: {error}") from None


def build_messages(prompt_config: dict, record: dict) -> list[dict]:
    """The conversation for one record: optional system message, then the user turn."""
    messages = []
    if prompt_config["system"]:
        messages.append({"role": "system", "content": fill_template(prompt_config["system"], record)})
    messages.append({"role": "user", "content": fill_template(prompt_config["user"], record)})
    return messages


def render_messages(messages: list[dict], *, chat_template: bool, tokenizer=None) -> str:
    """Turn messages (ending with a user turn) into the text the model continues."""
    if chat_template:
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise SnakeskillsError(
                "prompt.chat_template is true but the model's tokenizer has no chat template; "
                "set prompt.chat_template: false for base (non-chat) models"
            )
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return "".join(message["content"] for message in messages)


def format_prompt(prompt_config: dict, record: dict, tokenizer=None) -> str:
    return render_messages(
        build_messages(prompt_config, record), chat_template=prompt_config["chat_template"], tokenizer=tokenizer
    )
