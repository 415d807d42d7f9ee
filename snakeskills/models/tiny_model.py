"""The embedded default's model: a tiny Llama with a character-level tokenizer, built locally, and a random Llama
of a real vocabulary's size (benchmarks, GPU tests); ``training.tiny_bootstrap`` gives the tiny one its first skill.

Nothing is downloaded: the tokenizer is built with ``tokenizers``, the model from a
``LlamaConfig``; both are written with ``save_pretrained`` so every later stage loads them with
``from_pretrained``, exactly as it loads a real checkpoint.
"""

from __future__ import annotations

import string

SPECIAL_TOKENS = {"pad": "<pad>", "bos": "<s>", "eos": "</s>", "unk": "<unk>"}
CHARACTERS = string.digits + string.ascii_letters + string.punctuation + " \n"
# a minimal chat format ("<s>U: ...\nA: "), so prompt.chat_template: true works with the tiny model too; like
# Llama-3's, the template writes BOS and the tokenizer adds one to plain text (prompts.encode_messages)
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}{{ message['role'][0] | upper }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}A: {% endif %}"
)


def build_char_tokenizer():
    """A ``PreTrainedTokenizerFast`` mapping every printable ASCII character to its own token."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocabulary = {token: index for index, token in enumerate(SPECIAL_TOKENS.values())}
    for character in CHARACTERS:
        vocabulary.setdefault(character, len(vocabulary))
    tokenizer = Tokenizer(models.WordLevel(vocab=vocabulary, unk_token=SPECIAL_TOKENS["unk"]))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    bos = SPECIAL_TOKENS["bos"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, vocabulary[bos])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        chat_template=CHAT_TEMPLATE,
        bos_token=bos,
        eos_token=SPECIAL_TOKENS["eos"],
        pad_token=SPECIAL_TOKENS["pad"],
        unk_token=SPECIAL_TOKENS["unk"],
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )


def build_tiny_llama(tokenizer, *, hidden_size: int, num_layers: int, num_heads: int, seed: int, max_positions: int):
    """A freshly initialised ``LlamaForCausalLM`` sized by the arguments (a few 100k parameters)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return LlamaForCausalLM(config)


def save_random_llama(folder, model: dict, *, kv_heads: int, dtype: str, vocabulary: int) -> None:
    """A Llama with random weights (``model``: LlamaConfig sizes) and a word-level tokenizer of ``vocabulary``
    tokens (``<pad>``, ``<eos>``, then ``t2`` ...), saved to ``folder``: a real vocabulary's size without a
    download (bench/generation.py, tests/gpu)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = {"<pad>": 0, "<eos>": 1, **{f"t{i}": i for i in range(2, vocabulary)}}
    word_level = Tokenizer(models.WordLevel(words, unk_token="<eos>"))
    word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=word_level, pad_token="<pad>", eos_token="<eos>")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocabulary,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
        tie_word_embeddings=True,
        **model,
    )
    LlamaForCausalLM(config).to(getattr(torch, dtype)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
