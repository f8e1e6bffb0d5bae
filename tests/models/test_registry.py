"""Model registry: the tiny Qwen2 (deterministic, cached), export round-trip through plain
transformers, the `models` CLI, and MissingDependency when optional packages are absent."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from graphrl.models import MissingDependency, UnknownModel
from graphrl.models.errors import require

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from graphrl.cli.models import models_command
from graphrl.models import registry


@pytest.fixture(scope="module")
def tiny():
    return registry.load_model("tiny")


def test_tiny_is_a_seeded_qwen2_with_the_real_tokenizer(tiny):
    model, tok = tiny
    assert model.config.model_type == "qwen2" and model.config.vocab_size == 151936
    assert model.config.num_hidden_layers == 2 and not model.training
    assert tok.encode("Hello world") == [9707, 1879] and tok.eos_token_id == 151645
    state = torch.get_rng_state()
    fresh = registry.build_tiny_model()
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is untouched
    for (name, a), (_, b) in zip(sorted(model.state_dict().items()), sorted(fresh.state_dict().items())):
        assert torch.equal(a, b), name
    assert registry.tiny_dir() == registry.model_dir("tiny")


def test_resolve_tokenizer_names(tiny):
    _, tok = tiny
    for name in ("qwen", "qwen2.5", "qwen3", "tiny"):
        assert registry.resolve_tokenizer(name) is tok
    with pytest.raises(UnknownModel):
        registry.resolve_tokenizer("no-such-model")
    with pytest.raises(UnknownModel):
        registry.load_model("/definitely/not/here")


def test_export_round_trip(tiny, tmp_path):
    model, tok = tiny
    out = registry.export("tiny", tmp_path / "ckpt")
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    config = json.loads((out / "config.json").read_text())
    assert config["torch_dtype"] == "float32" and "rope_theta" in config  # readable by transformers 4
    tok_config = json.loads((out / "tokenizer_config.json").read_text())
    assert tok_config["tokenizer_class"] == "Qwen2Tokenizer"
    assert tok_config["chat_template"] == tok.chat_template
    assert tok_config["eos_token"] == "<|im_end|>" and "extra_special_tokens" not in tok_config

    again = transformers.AutoModelForCausalLM.from_pretrained(str(out))
    again_tok = transformers.AutoTokenizer.from_pretrained(str(out))
    text = "<|im_start|>user\n你好 world<|im_end|>\n<think>x</think>"
    assert again_tok.encode(text) == tok.encode(text)
    assert again_tok.eos_token_id == 151645 and again_tok.pad_token_id == 151643
    messages = [{"role": "user", "content": "hi"}]
    assert again_tok.apply_chat_template(messages, tokenize=False) == tok.apply_chat_template(messages, tokenize=False)
    ids = torch.tensor([tok.encode(text)])
    with torch.inference_mode():
        assert torch.allclose(model(ids).logits, again(ids).logits, atol=1e-5)

    with pytest.raises(FileExistsError):
        registry.export("tiny", out)
    assert registry.export("tiny", out, overwrite=True) == out
    via_path = registry.load_model(out)  # a HF directory is a model name too
    assert via_path[1].encode("Hello world") == [9707, 1879]


def test_models_cli(tmp_path):
    runner = CliRunner()
    listed = runner.invoke(models_command, ["list"])
    assert listed.exit_code == 0 and "tiny" in listed.output and "smollm2" in listed.output
    target = tmp_path / "out"
    ok = runner.invoke(models_command, ["export", "tiny", str(target)])
    assert ok.exit_code == 0, ok.output
    assert f"exported tiny to {target}" in ok.output and (target / "config.json").is_file()
    refused = runner.invoke(models_command, ["export", "tiny", str(target)])
    assert refused.exit_code == 2 and "not empty" in refused.output  # a usage error
    assert runner.invoke(models_command, ["export", "tiny", str(target), "--force"]).exit_code == 0
    unknown = runner.invoke(models_command, ["export", "gpt-17", str(tmp_path / "x")])
    assert unknown.exit_code == 2 and "unknown model" in unknown.output


def test_require_raises_missing_dependency_with_the_install_command(monkeypatch):
    with pytest.raises(MissingDependency) as info:
        require("graphrl_no_such_module_xyz", "a test")
    assert info.value.install == "pip install graphrl_no_such_module_xyz"
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    with pytest.raises(MissingDependency) as info:
        registry.load_model("tiny")
    assert info.value.module == "torch" and "pip install" in str(info.value)
    assert isinstance(info.value, ImportError)


def test_core_modules_import_without_torch_or_transformers():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "import graphrl.models, graphrl.models.registry, graphrl.cli.models, graphrl.models.tokenizer\n"
        "import graphrl.engines.scripted, graphrl.engines.sampling, graphrl.engines.prefix_cache\n"
        "from graphrl.engines.sampling import SamplingParams; SamplingParams.from_mapping({'top_k': 5})\n"
        "from graphrl.models.registry import load_model\n"
        "try:\n    load_model('tiny')\nexcept ImportError as e:\n    print(type(e).__name__, e.install)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("MissingDependency pip install torch")
