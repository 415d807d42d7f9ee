"""The real pretrained model (SmolLM2-135M-Instruct: BPE vocabulary of 49,152, ChatML template, `<|im_end|>` as
EOS) through what depends on the tokenizer, the chat template and the checkpoint: model input, SFT labels,
the checkpoint's generation_config, stop strings and the context limit. Where SmolLM2 cannot show a problem
(its tokenizer adds no BOS), the tiny model's tokenizer stands in for Llama-3's: it adds BOS to text and its
chat template writes BOS too.
"""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch
from conftest import hf_backend, openai_backend, resolved_prompt, sft_training_rows, training_section
from transformers import AutoModelForCausalLM, AutoTokenizer

from snakeskills.backends import GenerationRequest, SamplingParams, build_request
from snakeskills.models.tiny_model import build_char_tokenizer
from snakeskills.prompts import build_messages, model_input_ids, resolve_prompt
from snakeskills.training.sft import IGNORE_INDEX, to_prompt_completion, tokenize_prompt_completion

GREEDY = SamplingParams(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=24)
SAMPLED = SamplingParams(temperature=0.7, top_p=1.0, top_k=0, max_new_tokens=24)
PROBLEMS = ["12+30", "7+85", "64+19", "33+44"]


def chat_prompt(template: str | None = "generic-math", **overrides) -> dict:
    return resolve_prompt(
        {
            "template": template,
            "system": None,
            "user": None,
            "num_few_shot": None,
            "chat_template": True,
            "chat_template_kwargs": {},
            **overrides,
        }
    )


@pytest.fixture(scope="module")
def tokenizer(smollm2):
    return AutoTokenizer.from_pretrained(smollm2)


@pytest.fixture(scope="module")
def backend(smollm2):
    return hf_backend(str(smollm2), device="cpu", dtype="float32", batch_size=4, threads=2)


def requests_for(backend, prompt, problems=PROBLEMS):
    return [build_request(backend, prompt, {"problem": problem}, seed) for seed, problem in enumerate(problems)]


# ---------------------------------------------------------------- model input: chat template, special tokens


def test_chat_prompt_is_chatml_with_one_start_token(tokenizer):
    ids = model_input_ids(chat_prompt(), {"problem": "12+30"}, tokenizer)
    start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert ids[0] == start and ids[1] != start, "exactly one template start token opens the prompt"
    assert ids.count(start) == 3  # system (the template's default), user, assistant
    text = tokenizer.decode(ids, skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\n")
    assert "<|im_start|>user\nSolve the following math problem." in text and "\\boxed{}" in text
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_llama3_like_tokenizer_gets_one_bos_in_every_path(tiny_checkpoint):
    """The tiny tokenizer adds BOS to text and its chat template writes BOS, as Llama-3's do: generation
    (hf), SFT and what vLLM receives each start with exactly one BOS, chat template or not."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    bos = tokenizer.bos_token_id
    assert tokenizer("1+1")["input_ids"][0] == bos and build_char_tokenizer().chat_template.startswith("{{ bos_token")
    backend = hf_backend(str(tiny_checkpoint), device="cpu", threads=1)
    for chat_template in (True, False):
        prompt = resolved_prompt(user="{problem}=", chat_template=chat_template)
        generation_ids = build_request(backend, prompt, {"problem": "1+1"}, 0).prompt_token_ids
        messages = [*build_messages(prompt, {"problem": "1+1"}), {"role": "assistant", "content": "2"}]
        example = to_prompt_completion(
            {"id": "a", "messages": messages}, chat_template=chat_template, chat_template_kwargs={}, tokenizer=tokenizer
        )
        sft_ids = tokenize_prompt_completion(tokenizer, [example], max_length=64)[0]["input_ids"]
        for ids in (generation_ids, sft_ids, vllm_prompt_token_ids(tiny_checkpoint, prompt)):
            assert ids[0] == bos and list(ids).count(bos) == 1, (chat_template, ids)
        assert list(sft_ids[: len(generation_ids)]) == list(generation_ids), "SFT trains on what generation sends"


def vllm_prompt_token_ids(checkpoint, prompt) -> list[int]:
    """What VLLMBackend hands to ``vllm.LLM.generate`` for one row, and its answer for a prompt too long for
    the context (a soft failure that never reaches vLLM).

    vLLM cannot be installed here (GPU only), so a stand-in ``vllm`` module records the call: this fake
    covers only what our code passes to vLLM, which the real ``LLM`` then tokenizes no further.
    """
    from snakeskills.backends.vllm import VLLMBackend

    received = []

    class FakeLLM:
        def generate(self, inputs, parameters, **options):
            received.extend(inputs)
            output = types.SimpleNamespace(text="2", token_ids=[5], finish_reason="stop")
            return [types.SimpleNamespace(outputs=[output]) for _ in inputs]

    fake_vllm = types.ModuleType("vllm")
    fake_vllm.SamplingParams = lambda **options: options
    backend = VLLMBackend.__new__(VLLMBackend)
    backend.llm, backend.lora_request, backend.context_length = FakeLLM(), None, 64
    backend.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    saved = sys.modules.get("vllm")
    sys.modules["vllm"] = fake_vllm
    try:
        too_long = GenerationRequest(seed=1, prompt_token_ids=tuple(range(60)))  # 60 + 24 new > 64
        results = backend.generate([build_request(backend, prompt, {"problem": "1+1"}, 0), too_long], GREEDY)
    finally:
        if saved is None:
            del sys.modules["vllm"]
        else:
            sys.modules["vllm"] = saved
    (single,) = received
    assert set(single) == {"prompt_token_ids"}, "vLLM gets token ids, never text it would tokenize again"
    assert results[0].generation == "2" and results[1].finish_reason == "error" and "64" in results[1].error
    return single["prompt_token_ids"]


def test_sft_labels_cover_the_assistant_turn_and_its_eos_only(smollm2, tokenizer, tmp_path):
    prompt = chat_prompt()
    answer = "12 + 30 = 42. The answer is \\boxed{42}."
    messages = [*build_messages(prompt, {"problem": "12+30"}), {"role": "assistant", "content": answer}]
    example = to_prompt_completion(
        {"id": "a", "messages": messages}, chat_template=True, chat_template_kwargs={}, tokenizer=tokenizer
    )
    (row,), _ = sft_training_rows(smollm2, [example], tmp_path, max_length=512)  # what SFTTrainer trains on
    prompt_ids = model_input_ids(prompt, {"problem": "12+30"}, tokenizer)
    assert row["input_ids"][: len(prompt_ids)] == prompt_ids
    assert row["labels"][: len(prompt_ids)] == [IGNORE_INDEX] * len(prompt_ids), "no prompt token is learned"
    learned = row["labels"][len(prompt_ids) :]
    assert IGNORE_INDEX not in learned and learned == row["input_ids"][len(prompt_ids) :]
    assert learned[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>") == tokenizer.eos_token_id
    assert tokenizer.decode(learned, skip_special_tokens=False) == answer + "<|im_end|>"


# ---------------------------------------------------------------- the checkpoint's generation_config


def test_checkpoint_generation_config_never_changes_our_sampling(smollm2, tmp_path, backend):
    altered = tmp_path / "altered"
    altered.mkdir()
    for path in smollm2.iterdir():
        if path.name != "generation_config.json":
            (altered / path.name).symlink_to(path)
    settings = json.loads((smollm2 / "generation_config.json").read_text())
    settings.update(
        do_sample=True, temperature=0.05, top_k=3, top_p=0.5, repetition_penalty=3.0, no_repeat_ngram_size=2
    )
    (altered / "generation_config.json").write_text(json.dumps(settings))
    prompt = chat_prompt()

    # the altered file does change what plain transformers generates greedily from the checkpoint...
    plain_outputs = []
    for folder in (smollm2, altered):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        ids = torch.tensor([model_input_ids(prompt, {"problem": PROBLEMS[0]}, backend.tokenizer)])
        plain_outputs.append(model.generate(ids, do_sample=False, max_new_tokens=24)[0].tolist())
    assert plain_outputs[0] != plain_outputs[1]

    # ...but not what the backend generates: greedy stays greedy, and a row's seed alone decides its sample
    altered_backend = hf_backend(str(altered), device="cpu", dtype="float32", batch_size=4, threads=2)
    for sampling in (GREEDY, SAMPLED):
        assert altered_backend.generate(requests_for(altered_backend, prompt), sampling) == backend.generate(
            requests_for(backend, prompt), sampling
        )
    greedy = backend.generate(requests_for(backend, prompt)[:1], GREEDY)[0]
    expected = backend.tokenizer.decode(plain_outputs[0][ids.shape[1] :], skip_special_tokens=True)
    assert greedy.generation == expected, "greedy is plain transformers' greedy on the unaltered checkpoint"


# ---------------------------------------------------------------- the decoding loop against plain generate


def test_decoding_loop_gives_each_row_what_generate_gives_it_alone(backend, monkeypatch):
    """The backend's own loop (prompts batched longest first, finished rows dropped from the KV cache and the
    batch) gives every row the tokens plain ``model.generate`` gives that prompt alone with the same sampler,
    greedy and sampled, including rows that keep running after their neighbours ended."""
    from transformers import DynamicCache, GenerationConfig, LogitsProcessorList

    from snakeskills.backends.hf import PerRequestSampler

    batch_sizes = []
    select = DynamicCache.batch_select_indices
    monkeypatch.setattr(
        DynamicCache,
        "batch_select_indices",
        lambda cache, index: (batch_sizes.append(len(index)), select(cache, index)),
    )
    problems = ["1+1", "12+30", "7+85", "640+19", "33+4400", "9+9", "123456+654321", "2+3"]
    requests = requests_for(backend, chat_prompt(), problems)
    assert len({len(request.prompt_token_ids) for request in requests}) > 2, "prompts of different lengths"
    for settings in (GREEDY, SAMPLED):
        sampling = SamplingParams(**{**settings.__dict__, "max_new_tokens": 40})
        results = backend.generate(requests, sampling)
        for request, result in zip(requests, results, strict=True):
            ids = torch.tensor([list(request.prompt_token_ids)])
            alone = backend.model.generate(
                ids,
                generation_config=GenerationConfig(
                    do_sample=False, max_new_tokens=40, eos_token_id=backend.tokenizer.eos_token_id, pad_token_id=0
                ),
                logits_processor=LogitsProcessorList([PerRequestSampler([request.seed], sampling, ids.shape[1])]),
            )[0, ids.shape[1] :].tolist()
            ended = backend.tokenizer.eos_token_id in alone
            if ended:
                alone = alone[: alone.index(backend.tokenizer.eos_token_id) + 1]
            assert result.generation == backend.tokenizer.decode(alone, skip_special_tokens=True), request.seed
            assert result.num_generated_tokens == len(alone)
            assert result.finish_reason == ("stop" if ended else "length")
        lengths = [result.num_generated_tokens for result in results]
        assert len(set(lengths)) > 2 and "stop" in {result.finish_reason for result in results}, lengths
    assert batch_sizes and min(batch_sizes) < backend.batch_size, "finished rows left the batch"


def test_compiled_decoding_step_gives_the_eager_loops_tokens(smollm2, backend):
    """generation.compile: a static KV cache and a torch.compile'd step (inductor on this CPU; CUDA graphs on
    a GPU, not available here) give every row the eager loop's tokens. Finished rows still leave the batch,
    in power-of-two batch shapes, so that a job's batches share a few compiled graphs."""
    compiled = hf_backend(str(smollm2), device="cpu", dtype="float32", batch_size=8, threads=2, compile=True)
    shapes = []
    step = compiled._compiled_step
    compiled._compiled_step = lambda input_ids, *rest: (shapes.append(tuple(input_ids.shape)), step(input_ids, *rest))[
        1
    ]
    problems = ["1+1", "12+30", "7+85", "640+19", "33+4400", "9+9", "123456+654321", "2+3", "5+5", "81+18"]
    requests = requests_for(backend, chat_prompt(), problems)
    for settings in (SAMPLED, GREEDY):
        sampling = SamplingParams(**{**settings.__dict__, "max_new_tokens": 40})
        assert compiled.generate(requests, sampling) == backend.generate(requests, sampling)
    sizes = {batch for batch, _ in shapes}
    assert {8, 2} <= sizes and len(sizes) > 2, sizes  # the two batches (8 and 2 prompts), then smaller ones
    assert all(size & (size - 1) == 0 for size in sizes), "compacted batches are powers of two"


def test_the_chat_templates_opening_goes_through_the_model_once_and_changes_no_row(backend):
    """SmolLM2's chat template opens every prompt with its system message, and the generic-math prompt adds
    its instruction: a batch computes that opening once (generation.share_prefix), and every row's tokens,
    greedy and sampled, equal those of the left-padded batch in float32."""
    requests = requests_for(backend, chat_prompt())
    input_ids, _, prefix = backend.batch_layout([request.prompt_token_ids for request in requests])
    opening = backend.tokenizer.decode(input_ids[0, :prefix])
    assert opening.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert opening.endswith("(and only answer) inside \\boxed{}.\n\n"), opening
    for sampling in (SAMPLED, GREEDY):
        shared = backend.generate(requests, sampling)
        backend.share_prefix = False
        try:
            assert shared == backend.generate(requests, sampling)
        finally:
            backend.share_prefix = True


# ---------------------------------------------------------------- stop strings and the context limit


def test_stop_string_ends_generation_where_it_appears(backend):
    prompt = chat_prompt()
    request = requests_for(backend, prompt)[0]
    ids = torch.tensor([list(request.prompt_token_ids)])
    full = backend.model.generate(ids, do_sample=False, max_new_tokens=24)[0, ids.shape[1] :].tolist()
    text = backend.tokenizer.decode(full, skip_special_tokens=True)
    # a stop string starting mid-generation, first seen there, that need not end on a token boundary
    start = len(text) // 2
    stop = text[start : start + 3]
    assert text.find(stop) == start and len(stop) == 3, text
    stopped = backend.generate([request], SamplingParams(**{**GREEDY.__dict__, "stop": (stop,)}))[0]
    assert stopped.generation == text[:start]
    assert stopped.finish_reason == "stop"
    # counted up to the token that completes the stop string
    completing = next(k for k in range(1, len(full) + 1) if stop in backend.tokenizer.decode(full[:k]))
    assert stopped.num_generated_tokens == completing < len(full)


def test_prompt_longer_than_the_context_is_a_soft_failure_of_its_row(backend):
    assert backend.context_length == 8192
    prompt = chat_prompt()
    short = requests_for(backend, prompt)[:2]
    long = GenerationRequest(seed=9, prompt_token_ids=tuple([1] + [28120] * (8192 - 10)))  # 8183 tokens
    results = backend.generate([short[0], long, short[1]], GREEDY)
    assert results[1].finish_reason == "error" and results[1].generation == ""
    assert "8183 tokens" in results[1].error and "8192" in results[1].error
    assert [results[0], results[2]] == backend.generate(short, GREEDY)


# ---------------------------------------------------------------- full fine-tuning (sft.method full)

# made-up facts the base model cannot know: after training, greedy decoding must give them back
CODE_WORDS = ["amber", "basalt", "cobalt", "dune", "ember", "fjord", "garnet", "heron"]


def test_full_fine_tune_is_a_checkpoint_that_hf_and_an_openai_server_load(smollm2, tmp_path):
    """sft.method full on SmolLM2: all weights train in float32 and are saved in the base checkpoint's
    bfloat16 with its tokenizer and chat template; the hf backend loads the folder as a model (no adapter) and
    `transformers serve` serves it to the openai backend, and both give back what it learned."""
    from safetensors.torch import load_file
    from servers import TransformersServer

    from snakeskills.io import write_jsonl
    from snakeskills.models.loading import cpu_has_native_bf16
    from snakeskills.training.rounds import RoundRun
    from snakeskills.training.sft import train as train_sft

    prompt = chat_prompt(None, user="What is the code word of vault {problem}?", system="Answer with the code word.")
    records = [
        {
            "id": f"vault{number}",
            "messages": [
                *build_messages(prompt, {"problem": str(number)}),
                {"role": "assistant", "content": f"The code word is {word}."},
            ],
        }
        for number, word in enumerate(CODE_WORDS)
    ]
    write_jsonl(tmp_path / "data.jsonl", records)
    output = tmp_path / "sft-round1" / "checkpoint"
    metrics = train_sft(
        RoundRun(
            weights="full",
            base_model_path=str(smollm2),
            data_path=tmp_path / "data.jsonl",
            output_dir=output,
            lora=None,
            training=training_section(num_epochs=12, learning_rate=1e-4, batch_size=8, max_length=128),
            chat_template=True,
            chat_template_kwargs={},
            seed=0,
            threads=2,
            dtype="auto",
            trust_remote_code=False,
        )
    )
    assert metrics["method"] == "full" and metrics["global_step"] == 12 and metrics["saved_dtype"] == "bfloat16"
    assert not list(output.glob("adapter_*")), "a full fine-tune writes a model, not an adapter"
    assert {tensor.dtype for tensor in load_file(str(output / "model.safetensors")).values()} == {torch.bfloat16}
    base_tokenizer = AutoTokenizer.from_pretrained(smollm2)
    tuned_tokenizer = AutoTokenizer.from_pretrained(output)
    assert tuned_tokenizer.chat_template == base_tokenizer.chat_template
    assert tuned_tokenizer.eos_token == "<|im_end|>"

    sampling = SamplingParams(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=12)
    tuned = hf_backend(str(output), device="cpu", dtype="auto", batch_size=8, threads=2)
    # stored in bf16, generated in float32 on a CPU without bf16 instructions (model.dtype auto; models.loading)
    generated_in = torch.bfloat16 if cpu_has_native_bf16() else torch.float32
    assert tuned.model.dtype == generated_in and not hasattr(tuned.model, "peft_config")
    requests = [build_request(tuned, prompt, {"problem": str(number)}, 0) for number in range(len(CODE_WORDS))]
    answers = [result.generation for result in tuned.generate(requests, sampling)]
    learned = sum(answer == f"The code word is {word}." for answer, word in zip(answers, CODE_WORDS, strict=True))
    assert learned >= 6, answers
    base = hf_backend(str(smollm2), device="cpu", dtype="auto", batch_size=8, threads=2)
    base_answers = [result.generation for result in base.generate(requests, sampling)]
    assert not any(word in answer for answer, word in zip(base_answers, CODE_WORDS, strict=True)), base_answers

    server = TransformersServer(output).start()
    try:
        served = openai_backend(base_url=server.base_url, model=str(output), api="chat", max_concurrency=4)
        served_requests = [build_request(served, prompt, {"problem": str(number)}, 0) for number in range(4)]
        served_answers = [result.generation for result in served.generate(served_requests, sampling)]
    finally:
        server.stop()
    assert sum(word in answer for answer, word in zip(served_answers, CODE_WORDS, strict=False)) >= 3, served_answers


def test_the_converted_model_says_it_is_a_dequantised_q4_1_file(smollm2, capsys):
    """The packaged GGUF's tensors are 4-bit (Q4_1, as PackagedModel.quantization says), and the command that
    converts it tells the user the folder holds that file's dequantised values, not the original weights."""
    from snakeskills.models.pretrained import PACKAGED_MODELS, cache_directory, gguf_tensor_types, main

    model = PACKAGED_MODELS["smollm2-135m-instruct"]
    types_of_tensors = gguf_tensor_types(cache_directory() / "downloads" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert next(iter(types_of_tensors)) == model.quantization == "Q4_1"
    main(["smollm2-135m-instruct"])
    printed = capsys.readouterr().out
    assert "quantised to 4 bits (Q4_1)" in printed and "dequantised, not the original bfloat16 weights" in printed
