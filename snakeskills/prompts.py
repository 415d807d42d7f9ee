"""Prompt templates filled from record fields.

A resolved prompt is ``{"system": str | None, "user": str, "examples": str, "chat_template": bool,
"chat_template_kwargs": dict, "stop": list[str]}``. Templates use ``str.format`` placeholders (``{problem}``, any
record field, ``{examples}`` for the few-shot block); literal braces are doubled (``\\boxed{{}}``), as in
NeMo-Skills. With ``chat_template: true`` the tokenizer's chat template builds the model input, else system and user
texts are concatenated. ``chat_template_kwargs`` are the template's extra variables (Qwen3's ``enable_thinking``),
also sent with an OpenAI-compatible chat request.

Template YAML files have ``system`` (optional), ``user``, ``few_shot`` (optional: ``template``, ``separator``,
``examples``) and ``stop`` (optional: strings ending a generation). ``prompt.template`` names a shipped template
(``snakeskills/prompt_templates/<name>.yaml``) or a file; ``prompt.system`` / ``prompt.user`` override the file's."""

from __future__ import annotations

import functools
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


def resolve_prompt(prompt_config: dict, key: str = "prompt") -> dict:
    """A config prompt section (``key`` names it in errors) -> a resolved prompt (template file read, few-shot
    block rendered)."""
    content: dict = {}
    where = f"config key {key}"
    if prompt_config["template"] is not None:
        path = template_path(prompt_config["template"], f"{key}.template")
        content = load_template_file(path)
        where = str(path)
    system = prompt_config["system"] if prompt_config["system"] is not None else content.get("system")
    user = prompt_config["user"] if prompt_config["user"] is not None else content.get("user")
    if user is None:
        raise SnakeskillsError(f"config key {key}.user is required unless {key}.template gives a user template")
    for name, text in (("system", system), ("user", user)):
        if text is not None:
            check_template(text, f"{where} ({name})")
    return {
        "system": system or None,
        "user": user,
        "examples": render_examples(content.get("few_shot"), prompt_config["num_few_shot"], where),
        "chat_template": prompt_config["chat_template"],
        "chat_template_kwargs": prompt_config["chat_template_kwargs"],
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


# apply_chat_template's own arguments and the variables it sets, which chat_template_kwargs cannot pass
RESERVED_CHAT_TEMPLATE_KWARGS = frozenset(
    {
        "conversation",
        "messages",
        "tools",
        "documents",
        "chat_template",
        "add_generation_prompt",
        "continue_final_message",
        "tokenize",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
        "bos_token",
        "eos_token",
        "unk_token",
        "pad_token",
    }
)
# variables every chat template may read: set by apply_chat_template, or the template's own helpers
_STANDARD_TEMPLATE_VARIABLES = RESERVED_CHAT_TEMPLATE_KWARGS | {"raise_exception", "strftime_now", "namespace"}


def check_chat_template_kwargs(kwargs: dict, key: str) -> None:
    """``kwargs`` must not name an argument of ``apply_chat_template`` itself; ``key`` names the config key."""
    reserved = sorted(set(kwargs) & RESERVED_CHAT_TEMPLATE_KWARGS)
    if reserved:
        raise SnakeskillsError(
            f"config key {key} has {', '.join(map(repr, reserved))}, which the pipeline sets itself (an argument "
            "of apply_chat_template or a special token); chat_template_kwargs is for the template's own variables, "
            "e.g. enable_thinking"
        )


@functools.lru_cache(maxsize=16)
def chat_template_variables(template: str) -> frozenset[str] | None:
    """The variables a Jinja chat template reads from its caller (``None`` when Jinja cannot parse it here;
    transformers' own environment adds loop controls and the ``{% generation %}`` tag, both accepted)."""
    import jinja2
    import jinja2.ext
    import jinja2.meta

    class GenerationTag(jinja2.ext.Extension):  # transformers' AssistantTracker tag, parsed and kept as a block
        tags = {"generation"}

        def parse(self, parser):
            next(parser.stream)
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.Scope(body)

    environment = jinja2.Environment(extensions=[jinja2.ext.loopcontrols, GenerationTag])
    try:
        return frozenset(jinja2.meta.find_undeclared_variables(environment.parse(template)))
    except jinja2.TemplateError:
        return None


def unread_chat_template_kwargs(template: str | dict, kwargs: dict) -> str | None:
    """Why ``kwargs`` would change nothing in ``template`` (a tokenizer's ``chat_template``: one template or
    named ones), as a sentence, or ``None`` when the template reads every one of them (or cannot be parsed).
    A misspelt variable (``enable_thinkng``) is otherwise silently ignored by Jinja."""
    templates = list(template.values()) if isinstance(template, dict) else [template]
    variables: set[str] = set()
    for text in templates:
        found = chat_template_variables(text)
        if found is None:
            return None
        variables |= found
    unread = sorted(set(kwargs) - variables)
    if not unread:
        return None
    own = sorted(variables - _STANDARD_TEMPLATE_VARIABLES)
    reads = (
        f"the variables of its own that it reads are {', '.join(own)}" if own else "it reads no variables of its own"
    )
    return (
        f"chat_template_kwargs {', '.join(map(repr, unread))}: the model's chat template never reads "
        f"{'it' if len(unread) == 1 else 'them'}, so {'it' if len(unread) == 1 else 'they'} would change nothing "
        f"({reads})"
    )


def saved_chat_template(folder: Path) -> str | dict | None:
    """The chat template a saved tokenizer folder holds, read from its files without loading it:
    ``chat_template.jinja`` (transformers 4.43 on), else ``tokenizer_config.json``'s ``chat_template`` (one
    template, or named ones as a list); ``None`` when it has none."""
    import json

    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config_path = folder / "tokenizer_config.json"
    if not config_path.is_file():
        return None
    try:
        template = json.loads(config_path.read_text(encoding="utf-8")).get("chat_template")
    except (json.JSONDecodeError, AttributeError):
        return None
    if isinstance(template, list):
        return {entry["name"]: entry["template"] for entry in template}
    return template


def render_messages(
    messages: list[dict],
    *,
    chat_template: bool,
    chat_template_kwargs: dict,
    tokenizer=None,
    functions: list[dict] | None = None,
    template: str | None = None,
) -> str:
    """Turn messages (ending with a user turn) into the text the model continues; ``chat_template_kwargs`` are
    passed to the chat template (prompt.chat_template_kwargs). With tools called through the chat template
    (``tools.format: chat_template``), ``functions`` are the tools' JSON schemas the template offers and
    ``template`` the template that replaces the tokenizer's (tools.chat_template)."""
    if chat_template:
        used = template if template is not None else getattr(tokenizer, "chat_template", None)
        if tokenizer is None or not used:
            raise SnakeskillsError(
                "prompt.chat_template is true but the model's tokenizer has no chat template; "
                "set prompt.chat_template: false for base (non-chat) models"
            )
        if chat_template_kwargs:
            check_chat_template_kwargs(chat_template_kwargs, "prompt.chat_template_kwargs")
            problem = unread_chat_template_kwargs(used, chat_template_kwargs)
            if problem:
                raise SnakeskillsError(f"prompt.{problem}; check their names against the model's chat template")
        # without tools, the tokenizer's own template as before (a named set of templates too)
        offered = {"tools": functions, "chat_template": template} if functions or template is not None else {}
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **offered, **chat_template_kwargs
        )
    if chat_template_kwargs:
        raise SnakeskillsError(
            "prompt.chat_template_kwargs is set but prompt.chat_template is false: the kwargs are the chat "
            "template's variables; set chat_template: true or drop them"
        )
    return "".join(message["content"] for message in messages)


def encode_messages(
    messages: list[dict],
    *,
    chat_template: bool,
    chat_template_kwargs: dict,
    tokenizer,
    functions: list[dict] | None = None,
    template: str | None = None,
) -> list[int]:
    """The token ids the model continues for a conversation ending with a user turn.

    The one place a prompt becomes model input (generation in every backend that tokenizes, the shared
    model server, SFT, the tiny model's bootstrap). Text rendered by a chat template already holds every
    special token the model expects (Llama-3's template writes BOS, ChatML writes ``<|im_start|>``), so it
    is tokenized without adding special tokens, as transformers' and vLLM's chat paths do; a tokenizer that
    adds BOS on its own (Llama-3's does) would otherwise double it. Plain concatenated text (base models)
    gets the tokenizer's special tokens, as in pretraining.
    """
    text = render_messages(
        messages,
        chat_template=chat_template,
        chat_template_kwargs=chat_template_kwargs,
        tokenizer=tokenizer,
        functions=functions,
        template=template,
    )
    return tokenizer(text, add_special_tokens=not chat_template)["input_ids"]


def chat_format(prompt: dict) -> dict:
    """How a prompt's messages become model input: its ``chat_template`` and ``chat_template_kwargs``, as the
    keyword arguments of ``render_messages`` / ``encode_messages`` (and of the backends that render them); with
    tools called through the chat template, the functions offered and the template (``tools.functions``)."""
    formatting = {"chat_template": prompt["chat_template"], "chat_template_kwargs": prompt["chat_template_kwargs"]}
    if prompt.get("functions"):
        formatting.update(functions=prompt["functions"], template=prompt.get("template"))
    return formatting


def model_input_ids(prompt: dict, record: dict, tokenizer) -> list[int]:
    """The token ids the model continues for one record under a resolved prompt."""
    return encode_messages(build_messages(prompt, record), **chat_format(prompt), tokenizer=tokenizer)


def format_prompt(prompt: dict, record: dict, tokenizer=None) -> str:
    """The prompt's text for one record (what ``model_input_ids`` tokenizes), for display and text APIs."""
    return render_messages(build_messages(prompt, record), **chat_format(prompt), tokenizer=tokenizer)
