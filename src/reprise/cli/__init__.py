"""Layer 7: the ``reprise`` command line (Typer + rich)."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``reprise`` console script.

    User errors print one line and exit 2; bugs show a traceback and exit 1.
    """
    from reprise.core.errors import UserError

    args = sys.argv[1:] if argv is None else argv
    try:
        from reprise.cli import _help

        if _help.wants_top_help(args):  # pre-rendered: Typer's import costs more
            sys.stdout.write(_help.render(_help.program_name()))
            sys.exit(0)
        from reprise.cli._fast import dispatch

        code: Any = dispatch(args)
        if code is None:
            from reprise.cli._app import app

            code = app(args=args, standalone_mode=False)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except SystemExit:
        raise
    except OSError as exc:
        message = _unwritable(exc)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
    except Exception as exc:  # click's own usage errors (typer vendors click)
        click: Any
        try:
            import typer._click as click
        except ImportError:
            import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        abort = getattr(click.exceptions, "Abort", None)
        if abort is not None and isinstance(exc, abort):
            print("aborted", file=sys.stderr)
            sys.exit(1)
        raise
    sys.exit(code if isinstance(code, int) else 0)


def _unwritable(exc: OSError) -> str | None:
    """One line for a folder that cannot be written (read-only, full, forbidden), else None.

    The artifact store raises ``WorkspaceWriteError`` itself; this catches the same
    conditions anywhere else in a workspace (journals, cache, exports)."""
    import errno
    import os

    if exc.errno not in (errno.EROFS, errno.ENOSPC, errno.EACCES, errno.EDQUOT):
        return None
    where = exc.filename if exc.filename is not None else exc.filename2
    reason = exc.strerror or os.strerror(exc.errno)
    if where is None:
        return f"{reason} in a workspace folder. Free space or fix its permissions, then retry."
    path = os.path.abspath(os.fsdecode(where))
    return (f"{reason}: {path} (folder {os.path.dirname(path)}). Make the folder writable "
            "(or the file readable) and free space on its disk, then run the command again.")
