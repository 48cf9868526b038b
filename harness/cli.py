"""``mmharness``: the console script. Each command is a module of ``mmharness.commands`` (its options
in ``add_parser``, its work in ``run``); here: the argument vector (``--`` and what follows go to
libFuzzer), the parser and command table built from those modules, and the errors every command
answers alike: a ``UsageError`` is exit 2, and so is an output the disk refuses (full, read-only) in one
line; Ctrl-C outside a run's own handling (a target loading) is one line and exit 130, never a
traceback.

Imports stay inside the commands so that ``mmharness --help`` never loads torch.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys

from mmharness.commands import atlas, bench, check, fuzz, listing, matrix, replay
from mmharness.commands.options import EXIT_CODES, USAGE_ERROR, Interrupted, UsageError

COMMANDS = {
    "check": check,
    "replay": replay,
    "matrix": matrix,
    "merge": matrix,
    "atlas": atlas,
    "targets": listing,
    "checks": listing,
    "bench": bench,
    "fuzz": fuzz,
}
"""Each command's module, in the order ``--help`` lists the commands (a module may add two)."""
DISK_REFUSED = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)
"""Write errors that are the machine's, not the harness's: a full disk or quota, a file-size limit, a
read-only file system. Said in one line (what was being written, and why), exit 2."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mmharness",
        description="Property-based tests for the multimodal scheduling rules of LLM serving engines.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in dict.fromkeys(COMMANDS.values()):
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    passthrough: list[str] = []
    if "--" in argv:  # everything after -- goes to libFuzzer untouched
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1 :]
    args = _parser().parse_args(argv)
    args.passthrough = passthrough
    args.argv = argv
    # Hypothesis keeps a little state on disk; the command keeps it in its cache, not in the cwd.
    from mmharness.storage import cache_dir

    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(cache_dir() / "hypothesis"))
    try:
        return COMMANDS[args.command].run(args)
    except UsageError as error:
        print(f"mmharness: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt as stopped:  # where no run caught it: a target loading, before any check
        from mmharness import interrupts

        said = str(stopped) if isinstance(stopped, Interrupted) else "interrupted"
        print(f"\nmmharness: {said}", file=sys.stderr)
        return interrupts.exit_code()
    except BrokenPipeError:  # `mmharness ... | head`: the reader left, which is not an error (an OSError too)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as error:
        if error.errno not in DISK_REFUSED:
            raise
        where = f" {error.filename}" if error.filename else ""
        print(f"mmharness: error: cannot write{where}: {error.strerror}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":
    raise SystemExit(main())
