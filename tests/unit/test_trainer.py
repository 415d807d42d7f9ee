"""What every trainer shares (snakeskills.training.trainer): saving in the checkpoint's dtype."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize(
    ("keys", "expected"),
    [({}, {"dtype"}), ({"torch_dtype": "float32"}, {"torch_dtype"}), ({"dtype": "a", "torch_dtype": "b"}, None)],
    ids=["neither", "older-name", "both"],
)
def test_cast_saved_weights_names_the_dtype_under_every_key_the_config_uses(tmp_path, keys, expected):
    import torch
    from safetensors.torch import load_file, save_file

    from snakeskills.training.trainer import cast_saved_weights

    save_file({"weight": torch.ones(2), "steps": torch.arange(2)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", **keys}))
    cast_saved_weights(tmp_path, torch.bfloat16)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    assert tensors["weight"].dtype == torch.bfloat16 and tensors["steps"].dtype == torch.int64
    config = json.loads((tmp_path / "config.json").read_text())
    written = {key for key in ("dtype", "torch_dtype") if key in config}
    assert written == (expected or {"dtype", "torch_dtype"})
    assert {config[key] for key in written} == {"bfloat16"}
