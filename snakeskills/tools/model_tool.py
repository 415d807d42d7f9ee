"""A model as a tool (ToolOrchestra's "ask the expert"): a call's text is put to another model, in that model's own
prompt (the call's text is the template's ``{problem}``), and its answer is the call's output.

The model is any configured one, in the teacher's shape (``tools.models.<name>``: ``model``, ``prompt``,
``generation``). One whose weights are local (hf, vllm) is always loaded by the shared model server of its settings
(``backends.model_server``): once per node, whatever its ``generation.share_model.enabled`` says, and reused by every
job that asks it (the student's generate jobs, the GRPO rollouts, the model's own eval jobs when it is evaluated
alone), never loaded per job. One behind an OpenAI-compatible server is asked there.

In a job, the calls of every sample go to one ``AskedModel`` per tool, which sends the calls that wait at the same
time as one batch (the tool loop runs ``tools.workers`` calls at once). Each call is sampled from a seed made from
its sample's seed, the tool's name and the call's number (``call_seed``), so an answer does not depend on which
calls share its batch, and a resumed job asks again what it asked before.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
from dataclasses import dataclass

from snakeskills.tools.session import Ran, ToolSession, ToolSettings


@dataclass(frozen=True)
class ModelToolSettings:
    """A model tool's section as a job reads it: its name, the model and where its weights are, its resolved
    prompt and its generation section (schema defaults filled)."""

    name: str
    model: dict
    model_path: str | None
    prompt: dict
    generation: dict


def shared_generation(generation: dict) -> dict:
    """A model tool's generation section with its shared model server on (a backend that loads local weights; an
    openai server is asked where it is)."""
    from snakeskills.backends.specs import backend_spec

    if not backend_spec(generation).needs_local_model:
        return generation
    return {**generation, "share_model": {**generation["share_model"], "enabled": True}}


def call_seed(seed: int, tool: str, call: int) -> int:
    """The seed of a sample's ``call``-th call (from 0) of the model tool ``tool``."""
    digest = hashlib.sha256(f"{seed}\x00tool\x00{tool}\x00{call}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass
class _Waiting:
    request: object
    result: object = None
    error: BaseException | None = None
    done: bool = False


class AskedModel:
    """The model behind a model tool, in one process: its backend is built at the first call (a local model's
    through its shared server) and answers the calls of every session; calls that arrive while a batch is out go
    together in the next one."""

    def __init__(self, settings: ModelToolSettings):
        self.settings = settings
        self.backend = None
        self.sampling = None
        self._lock = threading.Condition()
        self._queue: list[_Waiting] = []
        self._busy = False

    def _build(self) -> None:
        from snakeskills.backends import backend_from_config, sampling_from_config
        from snakeskills.prompts import chat_format

        generation = shared_generation(self.settings.generation)  # once per node, whatever the section says
        self.backend = backend_from_config(
            generation,
            self.settings.model,
            model_path=self.settings.model_path,
            adapter_path=None,
            threads=generation["share_model"]["threads"] or len(os.sched_getaffinity(0)),
            **chat_format(self.settings.prompt),
        )
        self.sampling = sampling_from_config(generation["sampling"], self.settings.prompt)

    def ask(self, text: str, seed: int):
        """The model's answer (a ``GenerationResult``) to ``text`` put in its prompt as the problem."""
        from snakeskills.backends import build_request

        with self._lock:
            if self.backend is None:
                self._build()
            waiting = _Waiting(build_request(self.backend, self.settings.prompt, {"problem": text}, seed))
            self._queue.append(waiting)
            while not waiting.done and self._busy:
                self._lock.wait()
            if waiting.done:
                return self._outcome(waiting)
            self._busy, batch, self._queue = True, self._queue, []
        try:
            results = self.backend.generate([item.request for item in batch], self.sampling)
        except BaseException as error:  # every caller of the batch sees it
            results, failure = [None] * len(batch), error
        else:
            failure = None
        results = [_counted(item.request, result) for item, result in zip(batch, results, strict=True)]
        with self._lock:
            for item, result in zip(batch, results, strict=True):
                item.result, item.error, item.done = result, failure, True
            self._busy = False
            self._lock.notify_all()
        return self._outcome(waiting)

    @staticmethod
    def _outcome(waiting: _Waiting):
        if waiting.error is not None:
            raise waiting.error
        return waiting.result

    def close(self) -> None:
        if self.backend is not None and hasattr(self.backend, "close"):
            self.backend.close()


def _counted(request, result):
    """A result with its prompt's tokens counted: the backend's count (the model server's, an OpenAI server's usage),
    else the request's own token ids (None where neither says: an OpenAI server that reports no usage)."""
    if result is None or result.num_prompt_tokens is not None or request.prompt_token_ids is None:
        return result
    return dataclasses.replace(result, num_prompt_tokens=len(request.prompt_token_ids))


_ASKED: dict[str, AskedModel] = {}
_ASKED_LOCK = threading.Lock()


def asked_model(settings: ModelToolSettings) -> AskedModel:
    """The process's one ``AskedModel`` for these settings."""
    key = json.dumps([settings.name, settings.model, settings.model_path, settings.prompt, settings.generation])
    with _ASKED_LOCK:
        if key not in _ASKED:
            _ASKED[key] = AskedModel(settings)
        return _ASKED[key]


class ModelToolSession(ToolSession):
    """A sample's calls of a model tool: each is a fresh question (the model sees only the call's text in its
    prompt, none of the sample's earlier calls), sampled from ``call_seed``. A call whose answer the backend could
    not give (a prompt too long for the model) is a failed call with the reason as its output."""

    def __init__(self, settings: ToolSettings, model: ModelToolSettings, seed: int):
        super().__init__(settings)
        self.model, self.seed, self.calls = model, seed, 0

    def run(self, text: str) -> Ran:
        seed = call_seed(self.seed, self.model.name, self.calls)
        self.calls += 1
        result = asked_model(self.model).ask(text, seed)
        if result.finish_reason == "error":
            output = result.error or "the model gave no answer"
            return Ran(output, error=True, input_tokens=result.num_prompt_tokens, output_tokens=0)
        return Ran(result.generation, input_tokens=result.num_prompt_tokens, output_tokens=result.num_generated_tokens)
