"""``mmharness atlas``: a matrix's ``--json`` as a release atlas (Markdown), with a person's notes."""

from __future__ import annotations

import argparse

from mmharness.commands.options import UsageError, command_line, writable


def add_parser(sub) -> None:
    atlas = sub.add_parser("atlas", help="a matrix's --json as a release atlas (Markdown), with notes")
    atlas.add_argument("matrix", metavar="MATRIX.json", help="written by `mmharness matrix --json`")
    atlas.add_argument("--notes", metavar="FILE", help="what each class of finding means (JSON)")
    atlas.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")


def run(args: argparse.Namespace) -> int:
    from mmharness import atlas, report
    from mmharness.jsonfile import JSONFileError, read_json
    from mmharness.matrix import Matrix, NotAMatrix

    writable("--output", args.output)
    try:
        matrix = Matrix.from_json(read_json(args.matrix, "a matrix report"))
        notes = atlas.load_notes(args.notes) if args.notes else []
    except JSONFileError as error:
        raise UsageError(str(error)) from None
    except NotAMatrix as error:
        raise UsageError(
            f"{args.matrix}: not a matrix report (`mmharness matrix --json` writes one): {error}"
        ) from None
    except atlas.NotesError as error:
        raise UsageError(f"--notes {error}") from None
    text = atlas.render(matrix, notes, command=command_line(args.argv))
    if args.output:
        report.write(args.output, text)
    else:
        print(text, end="")
    return 0
