"""The atlas as a picture (``mmharness atlas --picture``, the ``plot`` extra) and the matrix's grid on a
terminal: a row per class (a check and a way of failing), a column per release, one state per cell."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mmharness import atlas, cli
from mmharness.checks.outcome import COULD_NOT_TEST, DIVERGENCE, HAZARD
from mmharness.matrix import ERROR, NOT_RUN, REPLAY, REPLAY_DONE, Cell, Matrix, Seen, grid, render
from mmharness.runner import PASSED, SKIPPED

CHUNK, COUNT, EMBED, QUIET = "chunk.matches_reference", "count.matches_reference", "embed.x", "quiet.x"
TARGETS = ["sglang==0.4.6", "sglang==0.4.7", "sglang==0.5.0", "sglang==0.5.1", "/broken/fork"]
FEWER, MORE, WASTE, GAP = "chunk: fewer rows", "chunk: more rows", "encoder work", "could not test: x"


def _seen(kind: str, signature: str, by: str = "search") -> Seen:
    return Seen(kind, signature, signature, None if by == REPLAY else 3, by=by)


def small_matrix() -> Matrix:
    """Four releases and one that did not load; FEWER on three releases (the third by replay), MORE on
    one, a hazard, a could-not-test, a skip and a check that shows no class."""
    matrix = Matrix(list(TARGETS), [CHUNK, COUNT, EMBED, QUIET], replay=REPLAY_DONE)
    matrix.releases = {t: t.split("==")[1] for t in TARGETS[:4]}
    matrix.target_errors[TARGETS[4]] = "no such release"
    a, b, c, d, broken = TARGETS
    cells = {
        (CHUNK, a): Cell(SKIPPED, "lacks it"),
        (CHUNK, b): Cell(DIVERGENCE, findings=(_seen(DIVERGENCE, FEWER), _seen(DIVERGENCE, MORE))),
        (CHUNK, c): Cell(DIVERGENCE, findings=(_seen(DIVERGENCE, FEWER),)),
        (CHUNK, d): Cell(DIVERGENCE, findings=(_seen(DIVERGENCE, FEWER, REPLAY),), searched=PASSED),
        (COUNT, a): Cell(PASSED),
        (COUNT, b): Cell(HAZARD, findings=(_seen(HAZARD, WASTE),)),
        (COUNT, c): Cell(COULD_NOT_TEST, findings=(_seen(COULD_NOT_TEST, GAP),)),
        (COUNT, d): Cell(NOT_RUN, "interrupted before it began"),
        (EMBED, a): Cell(PASSED),
        (EMBED, b): Cell(PASSED),
        (EMBED, c): Cell(PASSED),
        (EMBED, d): Cell(PASSED),
        (QUIET, a): Cell(PASSED),
        (QUIET, b): Cell(SKIPPED),
        (QUIET, c): Cell(PASSED),
        (QUIET, d): Cell(PASSED),
    }
    cells |= {(check, broken): Cell(ERROR, "no such release") for check in matrix.checks}
    matrix.cells = cells
    return matrix


EXPECTED = [  # (label, states per release, replayed per release)
    (f"{CHUNK}: {FEWER}", (SKIPPED, DIVERGENCE, DIVERGENCE, DIVERGENCE, ERROR), (0, 0, 0, 1, 0)),
    (f"{CHUNK}: {MORE}", (SKIPPED, DIVERGENCE, PASSED, PASSED, ERROR), (0, 0, 0, 0, 0)),
    (f"{COUNT}: {GAP}", (PASSED, PASSED, COULD_NOT_TEST, NOT_RUN, ERROR), (0, 0, 0, 0, 0)),
    (f"{COUNT}: {WASTE}", (PASSED, HAZARD, COULD_NOT_TEST, NOT_RUN, ERROR), (0, 0, 0, 0, 0)),
    (EMBED, (PASSED, PASSED, PASSED, PASSED, ERROR), (0, 0, 0, 0, 0)),
    (QUIET, (PASSED, SKIPPED, PASSED, PASSED, ERROR), (0, 0, 0, 0, 0)),
]


def _rows(rows) -> list[tuple]:
    return [(r.label, r.states, tuple(map(int, r.replayed))) for r in rows]


def test_the_grid_has_a_row_per_class_then_per_quiet_check_and_a_column_per_release():
    assert _rows(grid(small_matrix())) == EXPECTED


def test_the_pictures_rows_are_in_the_documents_order(tmp_path):
    notes = tmp_path / "notes.json"
    entry = {"name": "More first", "function": "f", "what": "w", "why": "y", "match": [[CHUNK, MORE]]}
    notes.write_text(json.dumps({"classes": [entry]}))
    rows = _rows(atlas.classes(small_matrix(), atlas.load_notes(str(notes))))
    assert rows == [EXPECTED[1], EXPECTED[0], *EXPECTED[2:]], "a note's classes first, as the atlas lists"


def _atlas(tmp_path, *extra: str) -> int:
    matrix_file = tmp_path / "matrix.json"
    matrix_file.write_text(json.dumps(small_matrix().as_json()))
    return cli.main(["atlas", str(matrix_file), *extra])


def test_the_picture_gets_one_row_per_class_and_a_column_per_release(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(atlas, "draw", lambda rows, columns, path, **_: drawn.append((rows, columns, path)))
    pytest.importorskip("matplotlib")  # the command refuses --picture without it
    (tmp_path / "docs").mkdir()
    out, picture = tmp_path / "docs" / "atlas.md", tmp_path / "docs" / "atlas.svg"
    assert _atlas(tmp_path, "-o", str(out), "--picture", str(picture)) == 0
    ((rows, columns, path),) = drawn
    assert _rows(rows) == EXPECTED and list(columns) == ["0.4.6", "0.4.7", "0.5.0", "0.5.1", "/broken/fork"]
    assert path == str(picture)
    text = out.read_text()
    assert "![The classes of finding x the releases](atlas.svg)" in text, "linked beside the document"
    assert "--picture" in text, "its command line makes the picture again"


@pytest.mark.parametrize("suffix", ["svg", "png"])
def test_the_picture_is_written_and_the_same_twice(tmp_path, suffix):
    pytest.importorskip("matplotlib")
    first, second = tmp_path / f"one.{suffix}", tmp_path / f"two.{suffix}"
    assert _atlas(tmp_path, "-o", str(tmp_path / "atlas.md"), "--picture", str(first)) == 0
    assert _atlas(tmp_path, "-o", str(tmp_path / "again.md"), "--picture", str(second)) == 0
    assert first.stat().st_size > 1000
    assert first.read_bytes() == second.read_bytes()
    if suffix == "svg":
        text = first.read_text()
        assert "<dc:date>" not in text and "Matplotlib v" not in text
        assert "found by replay only" in text and "could not test" in text  # the legend, in comments


def test_a_picture_from_62_releases_is_drawn(tmp_path):
    pytest.importorskip("matplotlib")
    matrix = small_matrix()
    columns = [f"0.{k // 10}.{k % 10}.post{k}" for k in range(62)]
    rows = [type(r)(r.check, r.signature, r.kind, r.states[:1] * 62, (False,) * 62) for r in grid(matrix)]
    atlas.draw(rows, columns, str(tmp_path / "wide.svg"))
    assert (tmp_path / "wide.svg").read_text().startswith("<?xml")


def _size_pt(svg: Path) -> tuple[float, float]:
    head = svg.read_text()[:1000]
    return tuple(float(re.search(rf'{side}="([0-9.]+)pt"', head)[1]) for side in ("width", "height"))


def test_a_long_target_name_does_not_grow_the_picture(tmp_path):
    """A name of 20,000 characters once drew a figure of gigabytes: labels are cut to a fixed width,
    ending in an ellipsis, so the figure is the size a short name gives."""
    pytest.importorskip("matplotlib")
    rows = grid(small_matrix())
    short, long = tmp_path / "short.svg", tmp_path / "long.svg"
    atlas.draw(rows, ["0.4.6", "x" * atlas.COLUMN_LABEL], str(short))
    atlas.draw(rows, ["0.4.6", "x" * 20_000], str(long))
    (width, height), (short_width, short_height) = _size_pt(long), _size_pt(short)
    assert width <= short_width * 1.05 and height <= short_height * 1.05
    assert height < 12 * 72, "under a foot tall"
    assert atlas.cut("x" * 20_000, atlas.COLUMN_LABEL) == "x" * (atlas.COLUMN_LABEL - 1) + "\u2026"
    assert atlas.cut("0.4.6", atlas.COLUMN_LABEL) == "0.4.6"


def test_without_matplotlib_the_picture_is_a_usage_error_naming_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    out = tmp_path / "atlas.md"
    assert _atlas(tmp_path, "-o", str(out), "--picture", str(tmp_path / "atlas.svg")) == 2
    assert "pip install 'mmharness[plot]'" in capsys.readouterr().err
    assert not out.exists(), "refused before anything is written"


def test_a_picture_of_another_format_is_a_usage_error(tmp_path, capsys):
    assert _atlas(tmp_path, "--picture", str(tmp_path / "atlas.pdf")) == 2
    assert "name a .svg or .png file" in capsys.readouterr().err


def test_the_package_and_help_do_not_import_matplotlib():
    code = (
        "import sys, contextlib, io\n"
        "import mmharness.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    mmharness.cli.main(['atlas', '--help'])\n"
        "assert 'matplotlib' not in sys.modules, 'matplotlib imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_terminal_grid_is_a_character_per_cell_with_a_legend():
    text = render(small_matrix(), grid=True)
    lines = text.splitlines()
    body = dict(line.rsplit("  ", 1) for line in lines if "  " in line)
    body = {label.rstrip(): cells for label, cells in body.items()}
    assert body[f"{CHUNK}: {FEWER}"] == "sDDdE", "lower case: by replay only"
    assert body[f"{CHUNK}: {MORE}"] == "sD..E"
    assert body[f"{COUNT}: {WASTE}"] == ".H?-E"
    assert body[QUIET] == ".s..E"
    assert "D divergence, H hazard, ? could not test" in text
    header = [line for line in lines if line.startswith("class (check: signature)")]
    assert header and header[0].endswith("6701k") and not any(line.startswith("check  ") for line in lines)
    assert f"{CHUNK} [divergence] sglang==0.4.7 .. sglang==0.5.1 (3, 1 by replay): {FEWER}" in text
    painted = render(small_matrix(), grid=True, color=True)
    assert "\033[31mD\033[0m" in painted and "\033[31md\033[0m" in painted


def test_without_the_grid_the_table_stays():
    text = render(small_matrix())
    lines = text.splitlines()
    stopped = [line for line in lines if line.startswith("stopped running: ")]
    assert lines[: len(stopped)] == stopped, "what stopped running comes first"
    assert lines[len(stopped)].split()[:2] == ["check", "sglang==0.4.6"]
    assert "DIVERGEr" in text and "D divergence, H hazard" not in text
    assert "sDDdE" not in text


@pytest.mark.parametrize(("grid", "shown"), [("always", True), ("never", False), ("auto", False)])
def test_matrix_grid_option_picks_the_grid_or_the_table(capsys, grid, shown):
    """``auto`` is the table here: pytest's captured stdout is not a terminal."""
    argv = ["matrix", "--target", "reference", "--checks", "R1", "--max-examples", "5", "--grid", grid]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert ("D divergence, H hazard" in out) is shown
    assert (out.splitlines()[0].split()[:2] == ["check", "reference"]) is not shown
