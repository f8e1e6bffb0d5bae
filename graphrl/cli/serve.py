"""`graphrl serve` and `graphrl serve-retrieval`: the embedded services over HTTP.

`serve`: a model name or path -> an SGLang-protocol HTTP server on host:port.

Input: `--model` (a built-in name such as `tiny` / `smollm2`, or a Hugging Face model directory),
optional `--tokenizer`, `--host`, `--port`, `--device`. Output: a running server; the URL is printed
on stdout once `/health` answers 200, and nothing else is printed there.

Invariants: the HTTP port opens before the model loads (so `/health` says 503 while loading, as
SGLang does); load failures exit non-zero with the loader's message; Ctrl-C stops cleanly.

`serve-retrieval`: a JSONL corpus -> the BM25 retrieval service (`graphrl.tools.retrieval_server`).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal

import click

from ..app.endpoints import load_local_engine
from ..engines.server import SERVER_KEY, make_app, serving
from ..engines.sglang import SGLangEngine
from ..errors import MissingDependency
from ..models.errors import UnknownModel
from ..tools.retrieval_server import BM25Index, CorpusError, read_corpus
from ..tools.retrieval_server import make_app as retrieval_app


async def _serve(model: str, tokenizer: str | None, host: str, port: int, device: str, weight_version: str) -> None:
    app = make_app(None, None, model_path=model, tokenizer_path=tokenizer, weight_version=weight_version)
    main = asyncio.current_task()
    with contextlib.suppress(NotImplementedError, RuntimeError, AttributeError):
        # SIGTERM stops like Ctrl-C: in-flight requests end as aborts, the engine is closed
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)  # type: ignore[union-attr]
    async with contextlib.AsyncExitStack() as stack:
        try:
            url = await stack.enter_async_context(serving(app, host, port))
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        click.echo(f"graphrl serve: loading {model} (/health answers 503 until it is ready)", err=True)
        try:
            engine, tok = await asyncio.to_thread(load_local_engine, model, tokenizer, device)
        except UnknownModel as exc:
            raise click.BadParameter(str(exc), param_hint="--model") from None
        stack.push_async_callback(engine.close)
        app[SERVER_KEY].attach(engine, tok)
        probe = SGLangEngine(url.replace("0.0.0.0", "127.0.0.1").replace("[::]", "[::1]"))
        try:
            await probe.wait_until_healthy(timeout_s=30)
        finally:
            await probe.close()
        click.echo(url)
        click.echo(f"graphrl serve: {model} ready at {url} (Ctrl-C to stop)", err=True)
        await asyncio.Event().wait()


@click.command(
    "serve",
    epilog="""\b
Examples:
  graphrl serve --model tiny --port 30000
  graphrl serve --model smollm2 --host 0.0.0.0
  curl -s localhost:30000/generate \\
    -d '{"text": "Hello", "sampling_params": {"max_new_tokens": 8}, "return_logprob": true}'
""",
)
@click.option(
    "--model",
    required=True,
    metavar="NAME|PATH",
    help="Built-in model name (tiny, smollm2) or a Hugging Face model directory.",
)
@click.option(
    "--tokenizer", default=None, metavar="NAME|PATH", help="Tokenizer to use instead of the model's own (e.g. qwen)."
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option(
    "--port",
    default=30000,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="TCP port (0: any free port; the URL is printed).",
)
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:1, ...")
@click.option("--weight-version", default="default", show_default=True, help="Reported as meta_info.weight_version.")
def serve_command(model: str, tokenizer: str | None, host: str, port: int, device: str, weight_version: str) -> None:
    """Serve a local model over SGLang's native HTTP API.

    Endpoints: POST /generate, POST /abort_request, GET /health, GET /get_model_info.
    Point SGLangEngine, slime or `curl` at the printed URL as at a real SGLang server.
    """
    try:
        asyncio.run(_serve(model, tokenizer, host, port, device, weight_version))
    except (KeyboardInterrupt, asyncio.CancelledError):
        click.echo("graphrl serve: stopped", err=True)


@click.command(name="serve-retrieval")
@click.option(
    "--corpus",
    required=True,
    type=click.Path(dir_okay=False, exists=True),
    help="JSONL documents: contents (or text), optional title and id.",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="0: any free port.")
def serve_retrieval_command(corpus: str, host: str, port: int) -> None:
    """Serve a corpus with BM25 over `POST /retrieve {queries, topk}` (and `GET /health`).

    The URL is printed on stdout once the index is built and the port is open.

    \b
    Example:
      graphrl serve-retrieval --corpus data/corpus.jsonl --port 8000
      curl -s localhost:8000/retrieve -d '{"queries": ["who wrote Dune"], "topk": 3}'
    """
    try:
        docs = read_corpus(corpus)
    except CorpusError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        import bm25s  # noqa: F401
    except ImportError:
        raise MissingDependency("bm25s", "BM25 retrieval") from None
    index = BM25Index(docs)

    async def main() -> None:
        async with serving(retrieval_app(index), host, port) as url:
            click.echo(url)
            click.echo(f"serving {len(docs)} documents from {corpus}", err=True)
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
