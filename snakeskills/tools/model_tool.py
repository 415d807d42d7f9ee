"""A model as a tool (ToolOrchestra's "ask the expert"): a call's text is the ``{problem}`` of that model's own
prompt, and its answer is the call's output.

The model is configured in the teacher's shape (``tools.models.<name>``: ``model``, ``prompt``, ``generation``).
Local weights (hf, vllm) are always served by the shared model server of its settings (``backends.model_server``),
once per node whatever ``generation.share_model.enabled`` says; an OpenAI-compatible model is asked at its server.

In a job, one ``AskedModel`` per tool batches the calls that wait together. Each call's seed comes from its
sample's seed, the tool's name and the call's number (``call_seed``), so an answer does not depend on its batch and
a resumed job asks the same. A call waits at most ``tools.timeout_seconds``; the job goes on."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass

from snakeskills.errors import SnakeskillsError
from snakeskills.settings.generation import Generation
from snakeskills.settings.tools import ModelTool, Tools
from snakeskills.tools.session import Ran, ToolSession, timed_out


@dataclass(frozen=True)
class ModelToolSettings:
    """A model tool as a job asks it: its name and its section (``model_path`` and the resolved prompt set by the
    plan)."""

    name: str
    section: ModelTool


def shared_generation(generation: Generation) -> Generation:
    """A model tool's generation section with its shared model server on (a backend that loads local weights; an
    openai server is asked where it is)."""
    from snakeskills.backends.specs import backend_spec

    if not backend_spec(generation).needs_local_model:
        return generation
    return generation.replace(share_model=generation.share_model.replace(enabled=True))


def call_seed(seed: int, tool: str, call: int) -> int:
    """The seed of a sample's ``call``-th call (from 0) of the model tool ``tool``."""
    digest = hashlib.sha256(f"{seed}\x00tool\x00{tool}\x00{call}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass(eq=False)  # compared by identity: a caller that gave up takes its own entry off the queue
class _Waiting:
    request: object
    result: object = None
    error: BaseException | None = None
    done: bool = False


class AskedModel:
    """The model behind a model tool, in one process: its backend is built at the first call (a local model's
    through its shared server) and answers the calls of every session. One batch is out at a time, sent from a
    thread of its own; calls that arrive while it is out go together in the next one, sent as soon as it is back.
    A caller waits at most its timeout: a call not answered by then is given up (taken off the queue if it was not
    sent; if its batch is out, its answer is dropped when the batch comes back)."""

    def __init__(self, settings: ModelToolSettings):
        self.settings = settings
        self.backend = None
        self.sampling = None
        self._lock = threading.Condition()
        self._queue: list[_Waiting] = []
        self._busy = False

    def _build(self) -> None:
        from snakeskills.backends import backend_from_config, sampling_params
        from snakeskills.prompts import chat_format

        section = self.settings.section
        generation = shared_generation(section.generation)  # once per node, whatever the section says
        self.backend = backend_from_config(
            generation,
            section.model.to_dict(),
            model_path=section.model_path,
            adapter_path=None,
            threads=generation.share_model.threads or len(os.sched_getaffinity(0)),
            **chat_format(section.prompt),
        )
        self.sampling = sampling_params(generation.sampling, section.prompt)

    def ask(self, text: str, seed: int, timeout: float | None = None):
        """The model's answer (a ``GenerationResult``) to ``text`` put in its prompt as the problem; None where it
        did not come within ``timeout`` seconds of the call (counted once the backend is built: a shared server's
        load is not the call's). An error of the backend on the call's batch is raised to every caller of it."""
        from snakeskills.backends import build_request

        with self._lock:
            if self.backend is None:
                self._build()
            deadline = None if timeout is None else time.monotonic() + timeout
            waiting = _Waiting(build_request(self.backend, self.settings.section.prompt, {"problem": text}, seed))
            self._queue.append(waiting)
            if not self._busy:
                self._send()
            while not waiting.done:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    if waiting in self._queue:
                        self._queue.remove(waiting)  # not sent: the next batch goes without it
                    return None
                self._lock.wait(left)
        if waiting.error is not None:
            raise waiting.error
        return waiting.result

    def _send(self) -> None:
        """Send the queued calls as one batch, from a thread of its own (called with the lock held)."""
        batch, self._queue = self._queue, []
        self._busy = True
        thread = threading.Thread(
            target=self._answer, args=(batch,), name=f"model tool {self.settings.name}", daemon=True
        )
        try:
            thread.start()
        except BaseException as error:  # no thread to send it: the batch's callers see why
            self._finish(batch, None, error)

    def _answer(self, batch: list[_Waiting]) -> None:
        """The batch thread: ask the backend, then hand each caller its result, or the error, whatever it was."""
        results, failure = None, None
        try:
            results = self.backend.generate([item.request for item in batch], self.sampling)
            if len(results) != len(batch):
                raise SnakeskillsError(
                    f"tools.models.{self.settings.name}: the model's backend answered a batch of {len(batch)} calls "
                    f"with {len(results)} results"
                )
            results = [_counted(item.request, result) for item, result in zip(batch, results, strict=True)]
        except BaseException as error:  # every caller of the batch sees it
            failure = error
        finally:
            with self._lock:
                self._finish(batch, results, failure)

    def _finish(self, batch: list[_Waiting], results: list | None, failure: BaseException | None) -> None:
        """Mark the batch answered and not busy, wake its callers, and send the calls that queued meanwhile (called
        with the lock held)."""
        try:
            for index, item in enumerate(batch):
                item.result = None if failure is not None else results[index]
                item.error = failure
                item.done = True
        finally:
            self._busy = False
            self._lock.notify_all()
            if self._queue:
                self._send()

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
    key = json.dumps([settings.name, settings.section.to_dict()])
    with _ASKED_LOCK:
        if key not in _ASKED:
            _ASKED[key] = AskedModel(settings)
        return _ASKED[key]


class ModelToolSession(ToolSession):
    """A sample's calls of a model tool: each is a fresh question (the model sees only the call's text in its
    prompt, none of the sample's earlier calls), sampled from ``call_seed``. A call whose answer the backend
    refused to give (a prompt too long for the model) is a failed, refused call (``Ran.refused``) with the reason
    as its output and no tokens; one not answered within ``tools.timeout_seconds`` (its wait for a batch
    included) is a timed-out call."""

    def __init__(self, settings: Tools, model: ModelToolSettings, seed: int):
        super().__init__(settings)
        self.model, self.seed, self.calls = model, seed, 0

    def run(self, text: str) -> Ran:
        seed = call_seed(self.seed, self.model.name, self.calls)
        self.calls += 1
        seconds = self.settings.timeout_seconds
        result = asked_model(self.model).ask(text, seed, timeout=seconds)
        if result is None:
            return Ran(timed_out(seconds), timeout=True)
        if result.finish_reason == "error":
            reason = result.error or "no reason given"
            return Ran(f"The model refused the call: {reason}", error=True, refused=True)
        return Ran(result.generation, input_tokens=result.num_prompt_tokens, output_tokens=result.num_generated_tokens)
