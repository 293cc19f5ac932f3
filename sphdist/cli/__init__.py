"""The ``sphdist`` command line: thin wrappers over the public API, no maths here.

Errors a user can cause (:class:`sphdist.errors.SphdistError`, and OS errors such as a full or
read-only disk) are printed as one line, ``Error: ...``, with exit status 1 and no traceback
unless ``--debug`` is given; bad option values are usage errors with exit status 2.

Each command lives in a module of this package and is registered on :func:`main` below by
name: its module is imported when the command is run (:data:`COMMANDS`).
"""

from __future__ import annotations

import click

from sphdist.cli._common import Group, setup_logging
from sphdist.cli._remedies import render_for
from sphdist.io import parse_storage_option, set_storage_options

#: Each command's ``"module.attr"``, imported when the command is run (``sphdist neighbors``
#: imports :mod:`sphdist.cli.use` only), or all of them for ``--help``
#: (:class:`~sphdist.cli._common.Group`).
COMMANDS = {
    "ingest": "sphdist.cli.ingest.ingest",
    "synth": "sphdist.cli.ingest.synth",
    "fit": "sphdist.cli.fit.fit",
    "evaluate": "sphdist.cli.fit.evaluate",
    "transform": "sphdist.cli.use.transform",
    "export": "sphdist.cli.use.export",
    "index": "sphdist.cli.use.index",
    "neighbors": "sphdist.cli.use.neighbors",
    "info": "sphdist.cli.inspect.info",
    "plot": "sphdist.cli.plot.plot",
    "layout": "sphdist.cli.map.layout",
    "map": "sphdist.cli.map.map_",
}


@click.group(cls=Group, lazy_subcommands=COMMANDS,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True,
              help="Show full tracebacks on errors (also taken after the command).")
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
    show_default=True, help="Verbosity of the progress lines on stderr.",
)
@click.option("--quiet", "-q", is_flag=True,
              help="Only warnings and errors on stderr (also taken after the command).")
@click.option(
    "--storage-option", "storage_option", multiple=True, metavar="[PROTOCOL.]KEY=VALUE",
    help="An fsspec option for URLs such as s3://bucket/corpus.zarr (protocol s3 if none is "
    "named), e.g. endpoint_url=http://127.0.0.1:9000; repeatable. Credentials and the endpoint "
    "are otherwise read from the AWS_* environment variables and fsspec's configuration.",
)
@click.version_option(package_name="sphdist")
@click.pass_context
def main(
    ctx: click.Context, debug: bool, log_level: str, quiet: bool, storage_option: tuple[str, ...],
) -> None:
    """Distributed Spherical PCA: embed large text collections on the unit sphere."""
    ctx.obj = {"debug": debug}
    setup_logging(log_level, quiet)
    if storage_option:
        options: dict[str, dict[str, object]] = {}
        for text in storage_option:
            try:
                protocol, key, value = parse_storage_option(text)
            except ValueError as exc:
                raise click.BadParameter(render_for(ctx, exc),
                                         param_hint="--storage-option") from None
            options.setdefault(protocol, {})[key] = value
        set_storage_options(options)


if __name__ == "__main__":  # pragma: no cover
    main()
