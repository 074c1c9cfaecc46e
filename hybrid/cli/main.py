"""Entry point: a click group whose subcommands are discovered in hybrid.cli.commands.

User errors (HybridError) print as one line, `error: ...`, and exit with status 2;
`hybrid validate` exits 1 for an invalid plan.
"""
from __future__ import annotations

import importlib
import pkgutil
import sys

import click

from hybrid.errors import HybridError


class _Group(click.Group):
    def invoke(self, ctx: click.Context):  # noqa: D401 - click API
        try:
            return super().invoke(ctx)
        except HybridError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="hybrid")
def cli() -> None:
    """Plan and run deep-learning iterations whose tensors do not fit in GPU memory.

    A graph file (hybrid-graph/1) describes one iteration; planners write plan
    files (hybrid-plan/1) that say the operator order, the memory pool, and when
    each tensor is copied to host memory and back. See docs/formats.md.
    """


def _register() -> None:
    import hybrid.cli.commands as pkg

    for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if mod.name.startswith("_"):
            continue
        module = importlib.import_module(f"{pkg.__name__}.{mod.name}")
        for cmd in getattr(module, "commands", [getattr(module, "command", None)]):
            if cmd is not None:
                cli.add_command(cmd)


_register()


def main() -> None:
    cli(prog_name="hybrid")


if __name__ == "__main__":
    main()
