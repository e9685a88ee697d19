"""The ``digestbot llm`` commands: a language model's part, run by hand (docs/llm.md).
A shell: parses, calls ``bot.llm.model_pass``, prints."""

from __future__ import annotations

import typer

from bot.cli.output import EXIT_INPUT_FAILED, EXIT_USAGE, fail, out
from bot.cli.shell import command_group, ctx_of, now
from bot.domain.text import plural

llm_app = command_group("A language model behind the OpenAI-compatible API ([llm], docs/llm.md).")


@llm_app.command("tldrs")
def llm_tldrs(ctx: typer.Context) -> None:
    """Ask the chat model for the TL;DRs of the last two days' entries that readers will
    get and that have none in their language, most read first, within the day's budget.
    Prints what was written, refused, left for the budget, and each kind of failure."""
    from bot.llm.model_pass import write_tldrs

    c = ctx_of(ctx)
    llm = c.settings.llm
    if not (llm.base_url and llm.chat_model):
        fail("no chat model: set llm.base_url and llm.chat_model (docs/llm.md)", EXIT_USAGE)
    done = write_tldrs(c.sessions(), c.settings, now=now())
    out.print(
        f"TL;DRs: {done.wanted} wanted, {done.written} written, {done.refused} refused"
        f" (nothing of the answer may be shown), {done.over_budget} left for the day's budget,"
        f" {done.skipped} not sent while the model asked for a pause",
        markup=False,
    )
    for kind, count in sorted(done.failures.items()):
        out.print(f"failed: {plural(count, 'request')} {kind}", markup=False)
    if done.failures and not done.written:
        raise typer.Exit(EXIT_INPUT_FAILED)  # every request sent failed: not a success


@llm_app.command("embed")
def llm_embed(ctx: typer.Context) -> None:
    """Embed, with the embedding model, the last two days' entries and every library paper
    that it has not embedded yet (at most 1,024 a run), within the day's budget, then
    train the model of each reader whose papers or ratings changed.  Prints what was
    stored, refused, left for the budget, each kind of failure, and the models trained."""
    from bot.llm.model_pass import embed_and_train

    c = ctx_of(ctx)
    llm = c.settings.llm
    if not (llm.base_url and llm.embedding_model):
        fail("no embedding model: set llm.base_url and llm.embedding_model (docs/llm.md)", EXIT_USAGE)
    done = embed_and_train(c.sessions(), c.settings, now=now())
    out.print(
        f"Embeddings: {done.wanted} wanted, {done.stored} stored, {done.refused} refused (not a vector),"
        f" {done.over_budget} left for the day's budget, {done.skipped} requests not sent while the model"
        " asked for a pause",
        markup=False,
    )
    for kind, count in sorted(done.failures.items()):
        out.print(f"failed: {plural(count, 'request')} {kind}", markup=False)
    if done.models is not None and (done.models.trained or done.models.unfitted):
        out.print(
            f"Readers' models: {done.models.trained} trained, {done.models.unfitted} with too few papers embedded",
            markup=False,
        )
    if done.failures and not done.stored:
        raise typer.Exit(EXIT_INPUT_FAILED)  # every request sent failed: not a success
