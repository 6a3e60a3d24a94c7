"""One rank of a multi-process launch: ``python -m reprise.train._rank SCRIPT [ARGS]``,
what torchrun starts in each process in place of the script itself.

It runs SCRIPT as ``__main__`` (as ``python SCRIPT ARGS`` would: same ``sys.argv``,
the script's folder first on ``sys.path``), runs the ``atexit`` handlers, flushes the
standard streams and leaves with ``os._exit``, skipping the C++ static destructors of
the interpreter's teardown. Why by hand: a rank that used a gloo process group can
abort there ("terminate called without an active exception", SIGABRT) even after
``destroy_process_group()``, when a native thread of the distributed runtime is still
joinable as the process ends; torchrun then reports the rank as failed and stops the
others, although the training ended well (seen in CI on ranks that had finished, a few
runs in a hundred). Nothing of the script's is skipped: its ``finally`` blocks and
``atexit`` handlers (logging's flush among them) have run by then.
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys

__all__ = ["main"]


def _code(exc: SystemExit) -> int:
    """The exit status ``raise SystemExit(exc.code)`` would give."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def main() -> None:
    if len(sys.argv) < 2:
        print("usage: python -m reprise.train._rank SCRIPT [ARGS]", file=sys.stderr)
        os._exit(2)
    script = sys.argv[1]
    sys.argv = [script, *sys.argv[2:]]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = _code(exc)
    except BaseException:  # as the interpreter would: the traceback, then status 1
        sys.excepthook(*sys.exc_info())
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed or broken stream: nothing more to say on it
                pass
        os._exit(code)


if __name__ == "__main__":
    main()
