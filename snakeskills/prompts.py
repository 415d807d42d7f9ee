"""Prompt templates filled from record fields.

A resolved prompt is ``{"system": str | None, "user": str, "examples": str, "chat_template": bool,
"stop": list[str]}``.
Templates use Python ``str.format`` placeholders (``{problem}``, any record field, and
``{examples}`` for the few-shot block); literal braces are doubled (``\\boxed{{}}``), as in
NeMo-Skills' prompt files. With ``chat_template: true`` the tokenizer's chat template turns the
messages into the model input; otherwise the system and user texts are concatenated.

Prompt templates live in YAML files with the keys ``system`` (optional), ``user``,
``few_shot`` (optional: ``template``, ``separator``, ``examples``) and ``stop`` (optional: strings that end
a generation in the template's format, e.g. the next few-shot problem's header). The config's ``prompt.template``
names a shipped template (``snakeskills/prompt_templates/<name>.yaml``) or a path to such a file;
``prompt.system`` / ``prompt.user`` given in the config override the file's.
"""

from __future__ import annotations

import string
from pathlib import Path

import yaml

from snakeskills.errors import SnakeskillsError

TEMPLATES_DIR = Path(__file__).resolve().parent / "prompt_templates"
TEMPLATE_KEYS = {"system", "user", "few_shot", "stop"}
FEW_SHOT_KEYS = {"template", "separator", "examples"}


def shipped_templates() -> list[str]:
    return sorted(path.stem for path in TEMPLATES_DIR.glob("*.yaml"))


def template_path(name_or_path: str, key: str) -> Path:
    """A shipped template's file, or the given path; ``key`` names the config key in errors."""
    if name_or_path in shipped_templates():
        return TEMPLATES_DIR / f"{name_or_path}.yaml"
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    raise SnakeskillsError(
        f"config key {key}: {name_or_path!r} is neither a shipped prompt template ({', '.join(shipped_templates())}) "
        "nor an existing .yaml file"
    )


def load_template_file(path: Path) -> dict:
    """Read and check a prompt YAML file; every problem names the file and the key."""
    try:
        content = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise SnakeskillsError(f"{path}: not valid YAML: {error}") from None
    if not isinstance(content, dict):
        raise SnakeskillsError(f"{path}: a prompt template must be a mapping with at least a 'user' key")
    unknown = set(content) - TEMPLATE_KEYS
    if unknown:
        raise SnakeskillsError(f"{path}: unknown key(s) {sorted(unknown)}; known: {sorted(TEMPLATE_KEYS)}")
    if not isinstance(content.get("user"), str):
        raise SnakeskillsError(f"{path}: key 'user' (the user message template) is required and must be a string")
    few_shot = content.get("few_shot")
    if few_shot is not None:
        if not isinstance(few_shot, dict) or set(few_shot) - FEW_SHOT_KEYS:
            raise SnakeskillsError(f"{path}: key 'few_shot' must be a mapping with keys {sorted(FEW_SHOT_KEYS)}")
        if not isinstance(few_shot.get("template"), str) or not isinstance(few_shot.get("examples"), list):
            raise SnakeskillsError(f"{path}: few_shot needs 'template' (a string) and 'examples' (a list of mappings)")
    stop = content.get("stop", [])
    if not isinstance(stop, list) or not all(isinstance(marker, str) and marker for marker in stop):
        raise SnakeskillsError(f"{path}: key 'stop' must be a list of non-empty strings")
    return content


def render_examples(few_shot: dict | None, num_examples: int | None, where: str) -> str:
    """The few-shot block: each example filled into ``few_shot.template``, joined by the separator."""
    if not few_shot:
        if num_examples:
            raise SnakeskillsError(
                f"config key prompt.num_few_shot is {num_examples} but {where} has no few_shot examples"
            )
        return ""
    examples = few_shot["examples"]
    if num_examples is not None:
        if num_examples > len(examples):
            raise SnakeskillsError(
                f"config key prompt.num_few_shot is {num_examples} but {where} has only {len(examples)} examples"
            )
        examples = examples[:num_examples]
    separator = few_shot.get("separator", "\n\n")
    return "".join(fill_template(few_shot["template"], example) + separator for example in examples)


def resolve_prompt(prompt_config: dict) -> dict:
    """The config's ``prompt`` section -> a resolved prompt (template file read, few-shot block rendered)."""
    content: dict = {}
    where = "config key prompt"
    if prompt_config["template"] is not None:
        path = template_path(prompt_config["template"], "prompt.template")
        content = load_template_file(path)
        where = str(path)
    system = prompt_config["system"] if prompt_config["system"] is not None else content.get("system")
    user = prompt_config["user"] if prompt_config["user"] is not None else content.get("user")
    if user is None:
        raise SnakeskillsError("config key prompt.user is required unless prompt.template gives a user template")
    for name, text in (("system", system), ("user", user)):
        if text is not None:
            check_template(text, f"{where} ({name})")
    return {
        "system": system or None,
        "user": user,
        "examples": render_examples(content.get("few_shot"), prompt_config["num_few_shot"], where),
        "chat_template": prompt_config["chat_template"],
        # strings that end a generation in this prompt's format (added to generation.sampling.stop)
        "stop": content.get("stop", []),
    }


def check_template(template: str, where: str) -> None:
    try:
        list(string.Formatter().parse(template))
    except ValueError as error:
        raise SnakeskillsError(f"{where}: {template!r} is not a valid format string: {error}") from None


def fill_template(template: str, record: dict) -> str:
    try:
        return template.format_map(record)
    except KeyError as error:
        record_id = record.get("id", "<no id>")
        raise SnakeskillsError(
            f"prompt template {template!r} refers to field {error.args[0]!r}, which record {record_id!r} lacks "
            f"(it has: {sorted(record)})"
        ) from None
    except (ValueError, IndexError, AttributeError) as error:
        raise SnakeskillsError(f"prompt template {template!r} is not a valid format string: {error}") from None


def build_messages(prompt: dict, record: dict) -> list[dict]:
    """The conversation for one record: optional system message, then the user turn."""
    fields = {**record, "examples": prompt["examples"]}
    messages = []
    if prompt["system"]:
        messages.append({"role": "system", "content": fill_template(prompt["system"], fields)})
    messages.append({"role": "user", "content": fill_template(prompt["user"], fields)})
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


def encode_messages(messages: list[dict], *, chat_template: bool, tokenizer) -> list[int]:
    """The token ids the model continues for a conversation ending with a user turn.

    The one place a prompt becomes model input (generation in every backend that tokenizes, the shared
    model server, SFT, the tiny model's bootstrap). Text rendered by a chat template already holds every
    special token the model expects (Llama-3's template writes BOS, ChatML writes ``<|im_start|>``), so it
    is tokenized without adding special tokens, as transformers' and vLLM's chat paths do; a tokenizer that
    adds BOS on its own (Llama-3's does) would otherwise double it. Plain concatenated text (base models)
    gets the tokenizer's special tokens, as in pretraining.
    """
    text = render_messages(messages, chat_template=chat_template, tokenizer=tokenizer)
    return tokenizer(text, add_special_tokens=not chat_template)["input_ids"]


def model_input_ids(prompt: dict, record: dict, tokenizer) -> list[int]:
    """The token ids the model continues for one record under a resolved prompt."""
    return encode_messages(build_messages(prompt, record), chat_template=prompt["chat_template"], tokenizer=tokenizer)


def format_prompt(prompt: dict, record: dict, tokenizer=None) -> str:
    """The prompt's text for one record (what ``model_input_ids`` tokenizes), for display and text APIs."""
    return render_messages(build_messages(prompt, record), chat_template=prompt["chat_template"], tokenizer=tokenizer)
