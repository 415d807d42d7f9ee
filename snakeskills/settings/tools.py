"""The ``tools`` section: the program tool and its limits, the tags a call is written in, the prices, the models as
tools and the eval-only baselines. Read here once; ``plan.tools.check_tools`` holds its cross-key checks."""

from __future__ import annotations

from dataclasses import dataclass

from snakeskills.errors import SnakeskillsError
from snakeskills.settings.generation import Generation
from snakeskills.settings.section import Section, optional

TAG_NAMES = ("code_begin", "code_end", "code_output_begin", "code_output_end")


@dataclass(frozen=True)
class Tags(Section):
    """NeMo-Skills' code tags: a preset's name in the config, or the four written out."""

    SCHEMA = "#/definitions/tool_tags/then"

    code_begin: str
    code_end: str
    code_output_begin: str
    code_output_end: str

    @classmethod
    def from_config(cls, value: str | dict, key: str) -> Tags:
        if isinstance(value, str):
            if value not in TAG_PRESETS:
                raise SnakeskillsError(f"config key {key}: unknown tag preset {value!r}; known: {sorted(TAG_PRESETS)}")
            tags = TAG_PRESETS[value].replace()
            object.__setattr__(tags, "_key", key)
            return tags
        tags = cls.from_dict(value, key)
        for name in TAG_NAMES:
            if not getattr(tags, name):
                raise SnakeskillsError(f"config key {key}.{name}: a tag must be a non-empty string")
        return tags

    def to_config(self) -> str | dict:
        """The preset's name where the tags are a preset's, else the four tags."""
        return getattr(self, "_preset", None) or self.to_dict()


def _preset(name: str, *tags: str) -> Tags:
    preset = Tags(*tags)
    object.__setattr__(preset, "_preset", name)
    return preset


# NeMo-Skills' code tags (nemo_skills/prompt/code_tags): markdown is Qwen2.5-Math's and NeMo-Skills' default
# tool-integrated format, openmath OpenMath-Nemotron's, llama3 Llama 3's built-in python tool
TAG_PRESETS = {
    "markdown": _preset("markdown", "```python\n", "```\n", "```output\n", "```\n"),
    "openmath": _preset("openmath", "<tool_call>\n", "</tool_call>\n", "```output\n", "```\n"),
    "llama3": _preset(
        "llama3",
        "<|python_tag|>",
        "<|eom_id|>",
        "<|start_header_id|>ipython<|end_header_id|>\n\n",
        "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    ),
}


@dataclass(frozen=True)
class Price(Section):
    """What one call costs: per call, per token a model tool reads and per token it writes."""

    SCHEMA = "#/definitions/tool_price/then"

    per_call: float
    per_input_token: float
    per_output_token: float

    @property
    def free(self) -> bool:
        return not (self.per_call or self.per_input_token or self.per_output_token)

    @property
    def per_token(self) -> bool:
        return bool(self.per_input_token or self.per_output_token)

    def cost(self, input_tokens: int = 0, output_tokens: int = 0) -> float:
        """One call's cost, given the tokens it read and wrote."""
        return self.per_call + self.per_input_token * input_tokens + self.per_output_token * output_tokens


FREE = Price(0.0, 0.0, 0.0)


@dataclass(frozen=True)
class ServedModel(Section):
    """A model that is sampled but never trained."""

    SCHEMA = "#/definitions/served_model"

    path: str | None
    dtype: str
    trust_remote_code: bool


@dataclass(frozen=True)
class ModelTool(Section):
    """A model as a tool (``tools.models.<name>``); ``model_path`` is set by the plan for the jobs that ask it."""

    SCHEMA = "#/properties/tools/then/properties/models/additionalProperties"

    model: ServedModel
    prompt: dict
    generation: Generation
    tags: Tags
    price: Price | None = optional()
    evaluate: bool | None = optional()
    model_path: str | None = optional()


@dataclass(frozen=True)
class Baselines(Section):
    SCHEMA = "#/properties/tools/then/properties/baselines"

    without_tools: bool | None
    always_call: list[str] | None


@dataclass(frozen=True)
class Tools(Section):
    """The ``tools`` section; ``first_call`` (an always-ask baseline's tool) is set by the plan for its jobs."""

    SCHEMA = "#/properties/tools/then"

    tool: str | None
    tags: Tags
    models: dict[str, ModelTool]
    baselines: Baselines
    max_calls: int
    max_output_characters: int
    timeout_seconds: float
    memory_limit_mb: int | None
    sandbox: str
    workers: int
    price: Price | None = optional()
    format: str | None = optional()  # absent: tags
    chat_template: str | None = optional()
    first_call: str | None = optional()
    # set by the plan with format chat_template: the tools as functions (``functions.ToolFunction`` fields each)
    # and the text of tools.chat_template (None: the model's own template)
    functions: list[dict] | None = optional()
    template_text: str | None = optional()

    @property
    def chat(self) -> bool:
        """Whether calls go through the model's chat template (``format: chat_template``) rather than tags."""
        return self.format == "chat_template"

    @property
    def program_price(self) -> Price:
        """The price of a call of the program tool (free where none is set)."""
        return self.price or FREE

    @property
    def priced(self) -> bool:
        """Whether a call costs anything: a model as a tool, or a program tool with a price."""
        return bool(self.models) or not self.program_price.free

    def tool_names(self) -> list[str]:
        """Every tool by the name its records and rewards use: the program tool's, then the models'."""
        return [*([self.tool] if self.tool is not None else []), *self.models]

    def tags_by_tool(self) -> dict[str, tuple[str, Tags]]:
        """Each tool's tags with the config key they are written at."""
        tags = {self.tool: (f"{self.key}.tags", self.tags)} if self.tool is not None else {}
        tags.update({name: (f"{self.key}.models.{name}.tags", model.tags) for name, model in self.models.items()})
        return tags
