"""Click classes behind ``secure-fed``: lazy command groups, readable help, two-line errors.

:class:`LazyGroup` imports the module implementing a command group only when
that group runs, so ``secure-fed --help``, ``keys``, ``budget`` and
``ledger`` start without loading torch, Opacus or TenSEAL (which only the
demo needs). A subclass lists its commands in ``lazy_commands``; the short
help shown by ``secure-fed --help`` is given there, so listing the commands
imports nothing. Its ``invoke`` renders every exception escaping a command as
``error: [CODE] ...`` plus ``hint: ...`` (see :mod:`api.cli.errors`) unless
the global ``--debug`` option asks for the traceback.

:class:`CliCommand` fixes two renderings of the help: arguments read
``FILE`` (not ``{file}``) in the usage line, and flags show no ``<bool>``.
Pass it as ``cls=CliCommand`` to ``@app.command``, and :class:`CliGroup` as
``cls=CliGroup`` to ``typer.Typer`` for a group's own help.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import click
import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from api.cli.errors import UsageInvalid, describe

__all__ = ["CliCommand", "CliGroup", "LazyCommand", "LazyGroup", "lazy_group"]

# Click's own control flow (exit, abort) passes through untouched; its usage errors
# become CLI_USAGE_INVALID (``_usage_error``), except "no arguments: show the help".
_CONTROL = (click.exceptions.Exit, click.exceptions.Abort, click.ClickException)


def _usage_error(exc: click.UsageError) -> typer.Exit:
    """Print a parser error as the two coded lines; return the exit to raise."""
    path = exc.ctx.command_path if exc.ctx is not None else "secure-fed"
    typed = UsageInvalid(exc.format_message(), hint=f"run '{path} --help' for its options")
    typer.echo(f"error: {typed}", err=True)
    typer.echo(f"hint: {typed.hint}", err=True)
    return typer.Exit(typed.exit_code)


def _is_usage_error(exc: BaseException) -> bool:
    no_args = getattr(click.exceptions, "NoArgsIsHelpError", ())
    return isinstance(exc, click.UsageError) and not isinstance(exc, no_args)


def _untyped_flags(params: list[Any]) -> list[Any]:
    """Give flags an empty type column (Typer shows ``<bool>`` for ``--json``)."""
    for param in params:
        if getattr(param, "is_flag", False) and not getattr(param, "count", False):
            param.metavar = ""
    return params


class CliCommand(TyperCommand):
    """A Typer command whose help shows ``FILE`` for arguments and no type for flags."""

    def get_params(self, ctx: Any) -> list[Any]:
        """Return the parameters, flags without a type."""
        return _untyped_flags(super().get_params(ctx))

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        """Render the usage line: ``[OPTIONS] FILE`` instead of ``[OPTIONS] {file}``."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = (param.name or "").upper()
                pieces.append(name if param.required else f"[{name}]")
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


class CliGroup(TyperGroup):
    """A Typer group whose ``--help`` flag shows no ``<bool>`` (``typer.Typer(cls=CliGroup)``)."""

    def get_params(self, ctx: Any) -> list[Any]:
        """Return the parameters, flags without a type."""
        return _untyped_flags(super().get_params(ctx))


@dataclass(frozen=True)
class LazyCommand:
    """A command (group) implemented in another module, imported on first use.

    Attributes
    ----------
    target
        ``"module:attribute"``: a :class:`typer.Typer` (a command group) or a
        function (a single command).
    help
        One-line help shown in the parent's command list without importing ``target``.
    """

    target: str
    help: str

    def load(self, name: str) -> Any:
        """Import ``target`` and return its click command, named ``name``."""
        module_name, _, attribute = self.target.partition(":")
        obj = getattr(importlib.import_module(module_name), attribute)
        command: Any
        if isinstance(obj, typer.Typer):
            command = typer.main.get_group(obj)
        else:
            single = typer.Typer()
            single.command(name, cls=CliCommand)(obj)
            command = typer.main.get_command(single)
        command.name = name
        return command


class LazyGroup(CliGroup):
    """A Typer group with lazily imported sub-commands and two-line error output."""

    lazy_commands: ClassVar[Mapping[str, LazyCommand]] = {}

    def list_commands(self, ctx: Any) -> list[str]:
        """List the lazy commands in table order, then any added eagerly (``add_typer``)."""
        eager = super().list_commands(ctx)
        return [*self.lazy_commands, *(name for name in eager if name not in self.lazy_commands)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """Return the loaded command, or a stub carrying the help of a lazy one."""
        loaded = super().get_command(ctx, cmd_name)
        lazy = self.lazy_commands.get(cmd_name)
        if loaded is not None or lazy is None:
            return loaded
        return TyperCommand(name=cmd_name, help=lazy.help, short_help=lazy.help)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """Import the module of the command about to run, then resolve as usual."""
        lazy = self.lazy_commands.get(args[0]) if args else None
        if lazy is not None and args[0] not in self.commands:
            self.add_command(lazy.load(args[0]), args[0])
        return super().resolve_command(ctx, args)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Parse the root's own options; a parser error is two coded lines, exit 2."""
        try:
            return list(super().parse_args(ctx, args))
        except click.UsageError as exc:
            if not _is_usage_error(exc):
                raise
            raise _usage_error(exc) from None

    def invoke(self, ctx: Any) -> Any:
        """Run the command; print a failure as two lines (traceback with ``--debug``)."""
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            if not _is_usage_error(exc):
                raise
            raise _usage_error(exc) from None
        except _CONTROL:
            raise
        except Exception as exc:
            if ctx.find_root().params.get("debug"):
                raise
            error, hint, status = describe(exc)
            typer.echo(error, err=True)
            typer.echo(hint, err=True)
            raise typer.Exit(status) from None


def lazy_group(commands: Mapping[str, LazyCommand]) -> type[LazyGroup]:
    """Return a :class:`LazyGroup` subclass serving ``commands``."""
    return type("SecureFedGroup", (LazyGroup,), {"lazy_commands": dict(commands)})
