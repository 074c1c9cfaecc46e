"""Entry point: a click group whose subcommands are discovered in hybrid.cli.commands.

One error style for every command: user errors (HybridError, and click's own
usage errors such as a missing or malformed flag) print as one line,
`error: ...`, and exit with status 2; `hybrid validate` exits 1 for an invalid
plan, and so does a command that cannot act on its plan or would write an
invalid one (NothingWrittenError: it writes nothing and says why). SIGTERM
behaves like Ctrl-C (`hybrid.signals`, installed before any thread starts):
the first stops a search, which writes its best result; a command interrupted
with nothing to write says so and exits 130 (Ctrl-C) or 143 (SIGTERM); a
second signal stops the process at once.
"""
from __future__ import annotations

import sys

from hybrid.cli import clock  # noqa: F401 - first: the command's clock starts with the program (--time-limit)

_PROGRAM = __name__ == "__main__" or sys.argv[0].rsplit("/", 1)[-1] == "hybrid"
# Run as the program (`hybrid`, `python -m hybrid.cli.main`): handle signals before the commands' imports, which
# take seconds; a signal then exits at once (hybrid.signals). Imported as a library (tests), nothing changes here.
if _PROGRAM:
    from hybrid.signals import install as _install

    _install()

import importlib
import pkgutil
import warnings
from typing import Any, NoReturn

import click

from hybrid.signals import exit_status, handling_stops, install, interrupted_by, received
from hybrid.errors import HybridError
from hybrid.files import forget_written, written
from hybrid.units import listed


def _warning_lines(previous: Any) -> Any:
    """A `warnings.showwarning` printing the library's own warnings (executor's PlanMemoryWarning, capture's
    CaptureWarning) as one `warning: ...` line, like the commands' own; any other as `previous` (the handler in
    place when the command started) would."""
    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        if category.__module__.split(".")[0] in ("hybrid", "executor", "ga", "milp"):
            click.echo(f"warning: {message}", err=True)
        else:
            previous(message, category, filename, lineno, file, line)
    return show


def _fail(message: str, status: int = 2) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(status)


def _click_message(e: click.ClickException) -> str:
    """click's message in this project's style: lower-case start, no final period, and where to look for help."""
    msg = e.format_message().strip().rstrip(".")
    if len(msg) > 1 and msg[0].isupper() and msg[1].islower():
        msg = msg[0].lower() + msg[1:]
    ctx = getattr(e, "ctx", None)
    if isinstance(e, click.UsageError):
        msg += f" (see `{ctx.command_path if ctx is not None else 'hybrid'} --help`)"
    return " ".join(msg.split())


def _interrupted_line() -> str:
    """A command stopped by Ctrl-C or SIGTERM with nothing of its own to say: whether it left any file."""
    return f"interrupted ({interrupted_by()}): {_written_clause()}"


def _written_clause() -> str:
    """'nothing written', or the files this command wrote (three named at most)."""
    done = written()
    return f"wrote {listed(done)} before it" if done else "nothing written"


class _Group(click.Group):
    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:  # noqa: D401 - click API
        """click's main, with its errors (`Error: ...`, exit 1 or 2) printed as `error: ...` and exit 2."""
        forget_written()     # a command's files, not a previous one's in this process (tests): every run starts here
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # `hybrid` alone: the help, as click shows it
                e.show()
                sys.exit(e.exit_code)
            _fail(_click_message(e))
        except click.Abort:
            click.echo(_interrupted_line(), err=True)
            sys.exit(exit_status())
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)  # an int is click's exit status (--help, --version: 0)

    def resolve_command(self, ctx: click.Context, args: list[str]):  # noqa: D401 - click API
        """click's, refusing a flag given no value before the next flag (`--memory --out p.json` read `--out` as
        the memory and then said `--out` was missing)."""
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None:
            takes_value = {o for p in cmd.params if isinstance(p, click.Option) and not p.is_flag and not p.count
                           and not getattr(p, "_flag_needs_value", False) for o in p.opts}   # a value it must have
            flags = {o for p in cmd.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)}
            flags |= set(ctx.help_option_names)
            for tok, nxt in zip(rest, rest[1:]):
                if tok == "--":
                    break
                if tok in takes_value and nxt in flags:
                    raise click.UsageError(f"{tok} needs a value, and the next word is the flag {nxt}; give {tok} "
                                           "one", click.Context(cmd, info_name=name, parent=ctx))
        return name, cmd, rest

    def invoke(self, ctx: click.Context):  # noqa: D401 - click API
        if not _PROGRAM:
            clock.restart()  # one of several commands in this process (tests): its time starts now
        previous = warnings.showwarning
        with handling_stops(), warnings.catch_warnings():
            warnings.showwarning = _warning_lines(previous)
            try:
                return super().invoke(ctx)
            except HybridError as e:
                _fail(str(e), getattr(e, "exit_status", 2))
            except OSError as e:  # a file the command did not check for (a safety net: one line, no traceback)
                where = f"{e.filename}: " if e.filename else ""
                _fail(f"{where}{e.strerror or e}")
            except KeyboardInterrupt:
                click.echo(_interrupted_line(), err=True)
                sys.exit(exit_status())
            except Exception as e:
                if not received():
                    raise
                # the stop's KeyboardInterrupt, changed by native code it passed through (a C extension's module
                # initialisation gives "ImportError: initialization failed"): an interrupt, said with what broke
                click.echo(f"interrupted ({interrupted_by()}; it broke off {type(e).__name__}: {e}): "
                           f"{_written_clause()}", err=True)
                sys.exit(exit_status())


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="hybrid-offload")
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
    global _PROGRAM
    _PROGRAM = True  # `hybrid`, or python -c "from hybrid.cli.main import main; main()": the process's clock
    install()  # SIGINT and SIGTERM handled from here on, whatever threads start later (hybrid.signals)
    for stream in (sys.stdout, sys.stderr):   # a lone surrogate from a file's string: escaped, never a traceback
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        cli(prog_name="hybrid")
    finally:
        # the interpreter's last garbage collections walk every object left (graphs, plans, numba's and
        # OR-Tools' modules): seconds under load, spent after the result was written or the job was told to stop
        import gc

        gc.freeze()


if __name__ == "__main__":
    main()
