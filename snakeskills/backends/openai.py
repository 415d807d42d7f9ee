"""OpenAI-compatible backend: any server speaking the OpenAI API (a vLLM server, ``transformers
serve``, an API model), for generation and for the LLM judge.

Requests go out from one asyncio loop, at most ``max_concurrency`` at a time. Connection errors, timeouts, rate
limits and server errors are retried with exponential backoff ``max_retries`` times, then the job fails (its
progress file keeps finished batches). A prompt too long for the model gives an empty ``generation`` with
``finish_reason: error`` and an ``error`` field, not a dead job. The API key is read from the environment variable
``api_key_env`` names and never logged or written.

With tools through the chat template (``GenerationRequest.functions``) a chat request offers them as its ``tools``
and the answer's ``tool_calls`` (read by the server's tool parser) come back beside its content.

Token counts (``num_generated_tokens``, ``num_prompt_tokens``) are the server's ``usage``, else counted with
``openai.tokenizer_path``'s tokenizer (the whole budget where the answer stopped at its length); without one the job
stops at the first such answer, since a count of 0 would spend no token budget and cost nothing."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random

from snakeskills.backends.types import GenerationRequest, GenerationResult, SamplingParams
from snakeskills.errors import SnakeskillsError

logger = logging.getLogger(__name__)

CONTEXT_LENGTH_MARKERS = ("context length", "context_length", "maximum context", "too long", "max_model_len")


def is_context_length_error(error: Exception) -> bool:
    text = str(error).lower()
    return any(marker in text for marker in CONTEXT_LENGTH_MARKERS)


def refusal_reason(error: Exception) -> str:
    """What a server said when it refused a request: the ``message`` of its JSON error, else the whole error."""
    body = getattr(error, "body", None)
    message = body.get("message") if isinstance(body, dict) else None
    return message if isinstance(message, str) and message else str(error)


def split_off_reasoning(message) -> str | None:
    """The reasoning a server's reasoning parser returned beside a chat answer: ``reasoning_content`` (vLLM,
    SGLang, DeepSeek's API) or ``reasoning`` (newer vLLM, OpenRouter); None when the text came back whole."""
    for field in ("reasoning_content", "reasoning"):
        value = getattr(message, field, None)
        if isinstance(value, str) and value:
            return value
    return None


class OpenAIBackend:
    name = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api: str,
        api_key_env: str | None,
        max_concurrency: int,
        max_retries: int,
        retry_initial_seconds: float,
        request_timeout_seconds: float,
        tokenizer_path: str | None,
        chat_template_kwargs: dict,
    ):
        try:
            import openai
        except ImportError as error:
            raise SnakeskillsError(
                f"generation.backend is 'openai' but the openai package cannot be imported ({error}); "
                "install it with `pip install openai`"
            ) from None
        if api not in ("chat", "completions"):
            raise SnakeskillsError(f"generation.openai.api: {api!r} is not one of chat, completions")
        api_key = "EMPTY"  # local servers accept any key
        if api_key_env:
            if api_key_env not in os.environ:
                raise SnakeskillsError(
                    f"openai.api_key_env of this job's generation section names {api_key_env}, which is not set in "
                    "the job's environment (the plan saw it: on a cluster, pass it to the jobs, e.g. SLURM's "
                    "--export); the key is read from the environment only, never from the config"
                )
            api_key = os.environ[api_key_env]
        self.openai = openai
        self.base_url = base_url
        self.model = model
        self.api = api
        self.warned_reasoning = False
        self.warned_usage = False
        # chat: the server applies its chat template; completions: our rendered text, which the server tokenizes
        self.takes = "messages" if api == "chat" else "text"
        # a chat server's tool parser reads the calls of tools offered through the chat template (``tool_calls``)
        self.reads_tool_calls = api == "chat"
        # the chat API's template variables, sent as the request's chat_template_kwargs (vLLM, SGLang,
        # transformers serve); the completions API gets text rendered here with them (prompts.format_prompt)
        self.chat_template_kwargs = chat_template_kwargs
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.retry_initial_seconds = retry_initial_seconds
        self.client_options = {
            "base_url": base_url,
            "api_key": api_key,
            "max_retries": 0,  # retries are ours, with backoff and logging
            "timeout": request_timeout_seconds,
        }
        self.tokenizer = None
        self.tokenizer_path = tokenizer_path
        # renders chat templates client-side for the completions API, and counts tokens a server does not report
        if tokenizer_path is not None:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
        logger.info("openai backend: model %s at %s (%s API)", model, base_url, api)

    def generate(
        self, requests: list[GenerationRequest], sampling: SamplingParams, on_results=None
    ) -> list[GenerationResult]:
        return asyncio.run(self._generate_all(requests, sampling, on_results))

    async def _generate_all(self, requests, sampling, on_results=None):
        client = self.openai.AsyncOpenAI(**self.client_options)
        semaphore = asyncio.Semaphore(self.max_concurrency)

        async def one(request):
            result = await self._generate_one(client, semaphore, request, sampling)
            if on_results is not None:
                on_results([result])
            return result

        try:
            return await asyncio.gather(*(one(request) for request in requests))
        finally:
            await client.close()

    async def _generate_one(self, client, semaphore, request: GenerationRequest, sampling: SamplingParams):
        openai = self.openai
        retryable = (
            openai.APIConnectionError,
            openai.APITimeoutError,
            openai.RateLimitError,
            openai.InternalServerError,
        )
        delay = self.retry_initial_seconds
        for attempt in range(self.max_retries + 1):
            try:
                async with semaphore:
                    return await self._call(client, request, sampling)
            except openai.BadRequestError as error:
                if is_context_length_error(error):
                    logger.warning("prompt too long for the model, recorded as a soft failure: %s", error)
                    return GenerationResult(
                        generation="", num_generated_tokens=0, finish_reason="error", error=refusal_reason(error)
                    )
                raise SnakeskillsError(f"openai backend: {self.base_url} rejected a request: {error}") from None
            except retryable as error:
                if attempt == self.max_retries:
                    raise SnakeskillsError(
                        f"openai backend: {self.base_url} failed {self.max_retries + 1} times "
                        f"({type(error).__name__}: {error}); rows finished so far are kept, rerun to resume"
                    ) from None
                logger.warning(
                    "attempt %d of %d failed (%s); retrying in %.1fs",
                    attempt + 1,
                    self.max_retries + 1,
                    type(error).__name__,
                    delay,
                )
                await asyncio.sleep(delay * (1 + 0.1 * random.random()))
                delay *= 2
        raise AssertionError("unreachable")

    async def _call(self, client, request: GenerationRequest, sampling: SamplingParams) -> GenerationResult:
        options = {
            "model": self.model,
            "max_tokens": request.budget(sampling),
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "seed": request.seed,
        }
        if sampling.stop:
            options["stop"] = list(sampling.stop)
        extra_body = {}
        if sampling.top_k > 0:
            extra_body["top_k"] = sampling.top_k
        if self.api == "chat" and self.chat_template_kwargs:
            extra_body["chat_template_kwargs"] = self.chat_template_kwargs
        messages = list(request.messages or ())
        if request.assistant_prefix is not None:
            # a tool loop's later turn: the server continues the assistant's unfinished reply (vLLM's
            # continue_final_message; a server without it, e.g. transformers serve, answers a new turn instead)
            messages.append({"role": "assistant", "content": request.assistant_prefix})
            extra_body.update(continue_final_message=True, add_generation_prompt=False)
        if extra_body:
            options["extra_body"] = extra_body
        if self.api == "chat" and request.functions:
            # tools through the chat template: the server renders the functions and its tool parser reads the calls
            # (vLLM: --enable-auto-tool-choice --tool-call-parser)
            options["tools"] = list(request.functions)
        reasoning, tool_calls = None, None
        if self.api == "chat":
            response = await client.chat.completions.create(messages=messages, **options)
            choice = response.choices[0]
            text = choice.message.content or ""
            if request.functions:
                tool_calls = tuple(
                    {"name": call.function.name, "arguments": call.function.arguments}
                    for call in choice.message.tool_calls or ()
                )
            reasoning = split_off_reasoning(choice.message)
            if reasoning is not None and not self.warned_reasoning:
                self.warned_reasoning = True
                logger.warning(
                    "%s returns the model's reasoning apart from its answer (a reasoning parser): the reasoning is "
                    "kept as reasoning_content and `generation` is the answer alone, which is also what SFT trains "
                    "on; to keep the whole text (and train on the thinking), serve the model without a reasoning "
                    "parser and set parse_reasoning: true in its generation settings",
                    self.base_url,
                )
        else:
            response = await client.completions.create(prompt=request.prompt, **options)
            choice = response.choices[0]
            text = choice.text
        finish_reason = "length" if choice.finish_reason == "length" else "stop"
        usage = response.usage
        generated = getattr(usage, "completion_tokens", None)
        prompt = getattr(usage, "prompt_tokens", None)
        if generated is None or prompt is None:
            written = text + "".join(json.dumps(call) for call in tool_calls or ())
            counted_generated, counted_prompt = self._count(
                request, messages, sampling, written, reasoning, finish_reason
            )
            generated = counted_generated if generated is None else generated
            prompt = counted_prompt if prompt is None else prompt
        return GenerationResult(
            generation=text,
            num_generated_tokens=generated,
            finish_reason=finish_reason,
            reasoning_content=reasoning,
            num_prompt_tokens=prompt,
            tool_calls=tool_calls,
        )

    def _count(
        self, request, messages: list[dict], sampling, text: str, reasoning: str | None, finish_reason: str
    ) -> tuple[int, int]:
        """(completion tokens, prompt tokens) of an answer the server gave no ``usage`` for, counted with the
        tokenizer of ``openai.tokenizer_path``: the text (and split-off reasoning) encoded, at most the request's
        budget, all of it where the answer stopped at its length; the prompt as the server encodes it (a chat
        request through the tokenizer's chat template)."""
        if self.tokenizer is None:
            raise SnakeskillsError(
                f"openai backend: {self.base_url} reports no `usage` (token counts) and openai.tokenizer_path of this "
                "job's generation section is not set (e.g. generation.openai.tokenizer_path, "
                "tools.models.<name>.generation.openai.tokenizer_path): set it to a local folder with the tokenizer "
                f"of {self.model}, to count the tokens of its answers (num_generated_tokens, the tool loop's token "
                "budget, a price per token)"
            )
        if not self.warned_usage:
            self.warned_usage = True
            logger.warning(
                "%s reports no usage: tokens are counted with the tokenizer of openai.tokenizer_path (%s)",
                self.base_url,
                self.tokenizer_path,
            )
        tokenizer = self.tokenizer
        budget = request.budget(sampling)
        if finish_reason == "length":
            generated = budget
        else:
            written = [part for part in (reasoning, text) if part]
            generated = min(budget, sum(len(tokenizer.encode(part, add_special_tokens=False)) for part in written))
        if self.api == "completions":
            return generated, len(tokenizer(request.prompt)["input_ids"])
        try:  # the messages sent: a later turn's end with the assistant's unfinished reply
            rendered = tokenizer.apply_chat_template(
                messages,
                tokenize=False,
                add_generation_prompt=request.assistant_prefix is None,
                continue_final_message=request.assistant_prefix is not None,
                tools=list(request.functions) if request.functions else None,
                **self.chat_template_kwargs,
            )
        except ValueError as error:  # transformers: the tokenizer has no chat template
            raise SnakeskillsError(
                f"openai.tokenizer_path: {self.tokenizer_path} cannot count the prompt tokens of a chat request "
                f"({error}); give the served model's own tokenizer, with its chat template"
            ) from None
        return generated, len(tokenizer(rendered, add_special_tokens=False)["input_ids"])
