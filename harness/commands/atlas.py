"""``mmharness atlas``: a matrix's ``--json`` as a release atlas (Markdown), with a person's notes;
``--picture``: the atlas as a heatmap too (matplotlib, the ``plot`` extra: imported only then)."""

from __future__ import annotations

import argparse
import os

from mmharness.commands.options import UsageError, command_line, distinct, writable, write_output


def add_parser(sub) -> None:
    atlas = sub.add_parser("atlas", help="a matrix's --json as a release atlas (Markdown), with notes")
    atlas.add_argument("matrix", metavar="MATRIX.json", help="written by `mmharness matrix --json`")
    atlas.add_argument("--notes", metavar="FILE", help="what each class of finding means (JSON)")
    atlas.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
    atlas.add_argument(
        "--picture",
        metavar="FILE",
        help="also draw the atlas as a heatmap of classes x releases to FILE (.svg or .png), linked from the"
        " document; needs matplotlib: pip install 'mmharness[plot]'",
    )


def run(args: argparse.Namespace) -> int:
    from mmharness import atlas
    from mmharness.jsonfile import JSONFileError, read_json
    from mmharness.matrix import Matrix, NotAMatrix

    distinct({"--output": args.output, "--picture": args.picture})
    writable("--output", args.output)
    if args.picture:
        _can_draw(args.picture)
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
    picture = None
    if args.picture:
        short = [matrix.releases.get(t, t) for t in matrix.targets]
        atlas.draw(
            atlas.classes(matrix, notes), short, args.picture, title="Release atlas: classes x releases"
        )
        beside = os.path.dirname(os.path.abspath(args.output)) if args.output else os.getcwd()
        picture = os.path.relpath(os.path.abspath(args.picture), beside).replace(os.sep, "/")
    text = atlas.render(matrix, notes, command=command_line(args.argv), picture=picture)
    if args.output:
        write_output("--output", args.output, text)
    else:
        print(text, end="")
    return 0


def _can_draw(path: str) -> None:
    """Refuse ``--picture`` before reading anything: a format it cannot write, no matplotlib, no place."""
    from mmharness.atlas import PICTURE_FORMATS, PLOT_EXTRA

    if not path.lower().endswith(tuple(f".{f}" for f in PICTURE_FORMATS)):
        formats = " or ".join(f".{f}" for f in PICTURE_FORMATS)
        raise UsageError(f"--picture {path}: name a {formats} file")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(f"--picture needs matplotlib, the plot extra: {PLOT_EXTRA}") from None
    writable("--picture", path)
