"""What a run reached of a target's engine code: ``mmharness check --coverage``.

coverage.py (branch coverage) measures only the files the target loaded
(``describe()["files"]``: the loader compiles each by its real path, so the
code coverage.py sees is the file on disk), and only while checks run: the
load's module-level code is not counted. With ``-n N`` each worker measures
its units and returns the arcs it saw beside the result (``measured_call``);
the parent takes the union (``Reached``), so a parallel run reports what a
serial one does.

The figures are per *rule function*: the functions the target declares
(``target.rule_functions()``), and every function of the loaded files that the
run entered at least once. Each function's lines come from ``ast`` (its body,
less the bodies of functions nested in it, which count on their own); its
branches are coverage.py's (a line with more than one exit; each exit one
branch). Every branch no run took is listed with a reason read from the source
(``REASONS``, with the names the target's engine adds to a reason,
``target.branch_reasons()``): the condition that guards it, or the condition of an enclosing
block that never ran. A reason whose branch cannot be reached on a CPU run
(CUDA, another platform, distributed, IPC) leaves it out of the CPU-reachable
figure.

A target may also name branches its authors verified, by reading the engine's
code, that no run of the rules can take (``target.excluded_branches()``, each
an ``Excluded``): dead code, a case the only caller rules out, or code outside
the rules (work another module does). Those are matched first, by function,
guarding condition and exit, and only in a file that still holds the guard the
claim rests on (``Excluded.needs``); they too leave the CPU-reachable figure,
and the report counts them by kind (``excluded``) so the figure never hides them.

coverage.py is imported only here, and only by a run that measures.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

Arc = tuple[int, int]

REASONS: tuple[tuple[str, str, bool], ...] = (
    # (pattern in the guarding source, reason, reachable on a CPU run); the first match wins
    (r"cuda_ipc|CudaIpc|(?<![A-Za-z])ipc(?![A-Za-z])|_ipc\b", "IPC", False),
    (
        r"\bis_cuda\b|torch\.cuda\b|\.type\s*[!=]=\s*[\"']cuda|[\"']cuda[\"']\s*[!=]=|device\s*[!=]=\s*[\"']cuda"
        r"|\.cuda\(\)|pin_memory|non_blocking",
        "CUDA",
        False,
    ),
    (
        r"\b_?is_(?:hip|npu|xpu|mps|musa|tpu|rocm|hpu|gaudi)\b|current_platform\.is_(?!cuda)\w+"
        r"|\bis_(?:hip|npu|xpu)\(\)",
        "another platform",
        False,
    ),
    (
        r"tp_size\s*>\s*1|\b(?:pp|dp|ep|cp)_size\s*>\s*1|torch\.distributed|\bdist\.|get_tensor_model_parallel"
        r"|get_(?:pp|dp|tp)_group|world_size|is_driver_worker|\brank\b"
        r"|\buse_data_parallel\b",  # a vision tower sharded over data-parallel ranks
        "distributed",
        False,
    ),
    (
        r"^\s*(?:(?:self|cls)\.)?(?:_?logger|logging|log)\.\w+\(|warnings\.warn\(|\bwarning_once\(|\bprint\(",
        "logging only",
        True,
    ),
)
"""How an unreached branch is explained, from the source: a table, so a reason is one row."""
NOT_REACHED = "not reached"
NOT_ENTERED = "function not entered"
DEAD, GUARDED, OUTSIDE = "dead", "guarded by the caller", "outside the rules"
EXCLUSIONS = (DEAD, GUARDED, OUTSIDE)
"""The kinds of ``Excluded`` branch: no run of the rules takes them, whatever it draws."""
Reasons = list[tuple[re.Pattern[str], str, bool]]


def reason_table(extra: Mapping[str, str] = MappingProxyType({})) -> Reasons:
    """``REASONS`` compiled, each reason's pattern widened by ``extra``'s for it (an engine's own names,
    ``Target.branch_reasons``); a reason ``REASONS`` lacks is a ``ValueError``."""
    unknown = sorted(set(extra) - {reason for _, reason, _ in REASONS})
    if unknown:
        raise ValueError(f"branch reasons {unknown} unknown; known: {[reason for _, reason, _ in REASONS]}")
    return [
        (re.compile(pattern + (f"|{extra[reason]}" if reason in extra else ""), re.MULTILINE), reason, cpu)
        for pattern, reason, cpu in REASONS
    ]


_REASONS = reason_table()
_CPU_REACHABLE = (
    {reason: cpu for _, reason, cpu in REASONS}
    | {NOT_REACHED: True, NOT_ENTERED: True}
    | dict.fromkeys(EXCLUSIONS, False)
)
TRUE, FALSE, EITHER = "true", "false", "either"
"""A branch's exit: into the block its condition guards (a loop's body), past it, or both."""


@dataclass(frozen=True)
class Excluded:
    """Branches a target's authors verified no run of the rules can take, read from the engine's code.

    Matched in ``function`` (a qualified name as ``functions_of`` gives it) on the
    branch whose own condition reads ``condition`` (whitespace aside), on its
    ``exit``; with ``block``, every branch inside the block that exit enters too
    (code that only runs there). ``needs``: source the claim rests on (the
    caller's guard, say), whitespace aside; a file without it keeps its branches
    counted, so a release that dropped the guard is measured as any other.
    """

    function: str
    condition: str
    exit: str
    kind: str
    """One of ``EXCLUSIONS``."""
    why: str
    needs: str = ""
    block: bool = False

    def __post_init__(self) -> None:
        if self.kind not in EXCLUSIONS or self.exit not in (TRUE, FALSE, EITHER):
            raise ValueError(f"Excluded({self.function!r}): kind {self.kind!r} or exit {self.exit!r} unknown")
        if self.block and self.exit != TRUE:
            raise ValueError(f"Excluded({self.function!r}): a block is the body its true exit enters")

    def holds_in(self, flat_source: str) -> bool:
        """Whether the file (its source without whitespace) still holds what the claim rests on."""
        return flat(self.needs) in flat_source

    def covers(
        self, line: int, to: int, conditions: Mapping[int, tuple[str, range]], bodies: Mapping[int, range]
    ) -> bool:
        """Whether the branch ``line -> to`` is this one (or, with ``block``, inside its block)."""
        wanted = flat(self.condition)
        if line in conditions and flat(conditions[line][0]) == wanted:
            enters = line in bodies and to == bodies[line].start
            if self.exit == EITHER or (self.exit == TRUE) == enters:
                return True
        return self.block and any(
            line in body and flat(conditions[head][0]) == wanted
            for head, body in bodies.items()
            if head in conditions
        )


def flat(text: str) -> str:
    """Source without its whitespace: how a claim's pinned source is matched, whatever the layout."""
    return "".join(text.split())


def excluded_of(target: Any) -> list[Excluded]:
    """The branches the target says no run of the rules takes (``target.excluded_branches()``)."""
    return list(target.excluded_branches())


class CoverageMissing(Exception):
    """coverage.py is not installed (the ``coverage`` extra)."""


def available() -> None:
    """Raise ``CoverageMissing`` when coverage.py cannot be imported."""
    try:
        import coverage  # noqa: F401
    except ImportError:
        raise CoverageMissing("--coverage needs coverage.py: pip install 'mmharness[coverage]'") from None


def engine_files(target: Any) -> list[str]:
    """The Python files the target loaded (its ``describe()["files"]``), as they are on disk."""
    files = target.describe().get("files") or []
    return sorted({str(Path(f).resolve()) for f in files if str(f).endswith(".py") and Path(f).is_file()})


# Measuring ----------------------------------------------------------------------------------------

_QUIET = ["no-data-collected", "module-not-measured", "module-not-imported", "no-ctracer", "no-sysmon"]


def _coverage(files: Iterable[str]) -> Any:
    import coverage

    measure = coverage.Coverage(data_file=None, branch=True, config_file=False, include=sorted(files))
    measure.set_option("run:disable_warnings", _QUIET)
    return measure


class Recorder:
    """Measures the given files between ``start`` and ``stop``; ``stop`` answers the arcs seen."""

    def __init__(self, files: Iterable[str]) -> None:
        self.files = sorted(files)
        self._measure = _coverage(self.files)
        self._running = False

    def start(self) -> None:
        self._measure.start()
        self._running = True

    def stop(self) -> dict[str, set[Arc]]:
        if self._running:
            self._measure.stop()
            self._running = False
        data = self._measure.get_data()
        return {name: set(data.arcs(name) or ()) for name in data.measured_files()}


@dataclass
class Reached:
    """The union of the arcs every unit saw, per file."""

    arcs: dict[str, set[Arc]] = field(default_factory=dict)

    def add(self, arcs: Mapping[str, Iterable[Arc]] | None) -> None:
        for name, seen in (arcs or {}).items():
            self.arcs.setdefault(name, set()).update(seen)


@dataclass(frozen=True)
class Measured:
    """A worker's answer when it measures: the unit's own answer and the arcs it reached."""

    answer: Any
    arcs: dict[str, set[Arc]]


def measured_call(files: list[str], function: Callable[..., Any], *args: Any, **kwargs: Any) -> Measured:
    """``function(*args, **kwargs)`` measured; interrupted, its partial answer (``stop.result``) is
    wrapped with what it reached, so the parent keeps both."""
    recorder = Recorder(files)
    recorder.start()
    try:
        answer = function(*args, **kwargs)
    except KeyboardInterrupt as stop:
        if hasattr(stop, "result"):
            stop.result = Measured(stop.result, recorder.stop())
        raise
    finally:
        arcs = recorder.stop()  # once stopped, ``stop`` answers the same arcs again
    return Measured(answer, arcs)


def unwrapped(answer: Any) -> tuple[Any, dict[str, set[Arc]] | None]:
    """A worker's answer as ``(answer, arcs)``; an answer that was not measured has no arcs."""
    if isinstance(answer, Measured):
        return answer.answer, answer.arcs
    return answer, None


# Functions ----------------------------------------------------------------------------------------


@dataclass
class Function:
    """One function of a file, by ``ast``: where it starts, and the lines of its own body."""

    qualname: str
    first: int
    """Its first line: the first decorator's, else the ``def``'s (a code object's ``co_firstlineno``)."""
    last: int
    own: set[int]
    """Its body's lines, less those of the functions nested in it."""


def functions_of(source: str) -> dict[str, Function]:
    """Every function and method of a module, by qualified name (``Class.method``, ``outer.inner``); a
    name defined again (a property's setter, a definition per platform) is ``name@LINE`` the next times."""
    tree = ast.parse(source)
    found: dict[str, Function] = {}

    def body(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[int]:
        return set(range(node.body[0].lineno, (node.end_lineno or node.lineno) + 1))

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                name = f"{prefix}{child.name}"
                own = body(child)
                for nested in ast.walk(child):
                    if nested is not child and isinstance(nested, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        own -= body(nested)
                key = name if name not in found else f"{name}@{first}"
                found[key] = Function(key, first, child.end_lineno or child.lineno, own)
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def conditions_of(source: str) -> dict[int, tuple[str, range]]:
    """Line of a block's head -> (its condition's source, the lines it guards), for ``if``/``while``
    (and ``elif``), ``for``, ``with``, ``assert`` and conditional expressions."""
    tree = ast.parse(source)
    lines = source.splitlines()
    found: dict[int, tuple[str, range]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            text = _segment(lines, node.test)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            text = _segment(lines, node.iter)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            text = ", ".join(_segment(lines, item.context_expr) for item in node.items)
        else:
            continue
        end = node.end_lineno or node.lineno
        found.setdefault(node.lineno, (text, range(node.lineno, end + 1)))
    return found


def bodies_of(source: str) -> dict[int, range]:
    """Line of an ``if``/``elif``, ``for`` or ``while`` head -> the lines of the block its true exit
    enters (its body, from its first statement), where ``Excluded`` tells a branch's exits apart."""
    found: dict[int, range] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.If, ast.While, ast.For, ast.AsyncFor)):
            last = node.body[-1]
            found.setdefault(node.lineno, range(node.body[0].lineno, (last.end_lineno or last.lineno) + 1))
    return found


def _segment(lines: list[str], node: ast.expr) -> str:
    """A node's source (``ast.get_source_segment`` splits the whole source on every call)."""
    first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
    start, end = node.col_offset, node.end_col_offset
    if not 0 <= first <= last < len(lines) or end is None:
        return ""
    if first == last:
        return lines[first].encode()[start:end].decode(errors="replace")
    middle = lines[first + 1 : last]
    head = lines[first].encode()[start:].decode(errors="replace")
    tail = lines[last].encode()[:end].decode(errors="replace")
    return "\n".join([head, *middle, tail])


CONDITION, TARGET, ENCLOSING, EXCLUDED = "condition", "branch target", "enclosing condition", "excluded"
"""Where a reason was read: the branch's own condition, the line it goes to, a block around it, or the
target's ``Excluded`` (with its ``why``)."""


def classify(
    line: int,
    target: int,
    lines: list[str],
    conditions: Mapping[int, tuple[str, range]],
    executed: set[int],
    *,
    table: Reasons = _REASONS,
) -> tuple[str, str, str]:
    """``(reason, where it was read, that source)`` for the branch ``line -> target`` no run took.

    Read in turn: the branch's own condition, the line it would have gone to
    (code only one platform runs, or logging only), and, when the branch line
    itself never ran, the conditions of the blocks around it, innermost first; each against ``table``
    (``reason_table``).
    """
    own = conditions.get(line, (_line(lines, line), range(0)))[0]
    texts = [(CONDITION, own)]
    if target > 0:
        texts.append((TARGET, _line(lines, target)))
    if line not in executed:
        around = sorted(
            (head for head, (_, span) in conditions.items() if head != line and line in span), reverse=True
        )
        texts += [(ENCLOSING, conditions[head][0]) for head in around]
    for where, text in texts:
        for pattern, reason, _ in table:
            if reason == "logging only" and where != TARGET:
                continue  # logging is read from where the branch goes, never from a condition
            if pattern.search(text):
                return reason, where, " ".join(text.split())
    return NOT_REACHED, CONDITION, " ".join(own.split())


def _line(lines: list[str], number: int) -> str:
    return lines[number - 1] if 0 < number <= len(lines) else ""


def declared(target: Any) -> dict[str, Any]:
    """Name -> function the target declares as its rules (``target.rule_functions()``)."""
    return dict(target.rule_functions())


def _where(function: Any) -> tuple[str, int, str] | None:
    """``(file, first line, qualified name)`` of a function's code, through wrappers."""
    import inspect

    try:
        function = inspect.unwrap(function)
    except ValueError:
        return None
    function = getattr(function, "__func__", function)
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    qualname = getattr(function, "__qualname__", code.co_name).replace("<locals>.", "")
    return str(Path(code.co_filename).resolve()), code.co_firstlineno, qualname


# Analysis -----------------------------------------------------------------------------------------


def analyse(target: Any, files: list[str], reached: Reached) -> dict[str, Any]:
    """The figures a JSON report keeps under ``coverage`` (see ``render`` for the table)."""
    measure = _coverage(files)
    data = measure.get_data()
    data.add_arcs({name: sorted(arcs) for name, arcs in reached.arcs.items() if name in files})
    wanted: dict[str, set[int]] = {}
    named: dict[tuple[str, int], str] = {}
    for name, function in declared(target).items():
        where = _where(function)
        if where is not None:
            wanted.setdefault(where[0], set()).add(where[1])
            named[(where[0], where[1])] = name
    exclusions = excluded_of(target)
    table = reason_table(target.branch_reasons())
    report: dict[str, Any] = {"files": {}}
    for path in files:
        source = Path(path).read_text(errors="replace")
        analysis = measure._analyze(path)  # coverage.py's Analysis of this file under the data above
        stats = analysis.branch_stats()
        missing = analysis.missing_branch_arcs()
        lines = source.splitlines()
        conditions = conditions_of(source)
        bodies = bodies_of(source)
        holding = [e for e in exclusions if e.holds_in(flat(source))]
        functions = {}
        for qualname, function in functions_of(source).items():
            own_exclusions = [e for e in holding if e.function == qualname]
            statements = function.own & analysis.statements
            executed = statements & analysis.executed
            is_declared = function.first in wanted.get(path, ())
            if not executed and not is_declared:
                continue
            branch_lines = sorted(line for line in stats if line in function.own)
            total = sum(stats[line][0] for line in branch_lines)
            taken = sum(stats[line][1] for line in branch_lines)
            unreached = []
            for line in branch_lines:
                for to in sorted(missing.get(line, ()), key=lambda t: (t < 0, abs(t))):
                    entry: dict[str, Any] = {"line": line, "to": to if to > 0 else "exit"}
                    known = next((e for e in own_exclusions if e.covers(line, to, conditions, bodies)), None)
                    if not executed:
                        entry |= {"reason": NOT_ENTERED, "read_from": CONDITION}
                        entry["source"] = " ".join(_line(lines, line).split())
                    elif known is not None:
                        entry |= {"reason": known.kind, "read_from": EXCLUDED, "source": known.condition}
                        entry["why"] = known.why
                    else:
                        reason, where, text = classify(
                            line, to, lines, conditions, analysis.executed, table=table
                        )
                        entry |= {"reason": reason, "read_from": where, "source": text}
                    unreached.append(entry)
            off_cpu = sum(not _CPU_REACHABLE[u["reason"]] for u in unreached)
            functions[qualname] = {
                "declared_as": named.get((path, function.first)) if is_declared else None,
                "first_line": function.first,
                "last_line": function.last,
                "entered": bool(executed),
                "percent": _percent(taken, total),
                "branches": {"reached": taken, "total": total},
                "cpu_reachable": {"reached": taken, "total": total - off_cpu},
                "cpu_percent": _percent(taken, total - off_cpu),
                "lines": {"reached": len(executed), "total": len(statements)},
                "unreached_lines": sorted(statements - executed),
                "unreached_branches": unreached,
            }
        if functions:
            report["files"][path] = {"functions": functions}
    every = [f for entry in report["files"].values() for f in entry["functions"].values()]
    taken = sum(f["branches"]["reached"] for f in every)
    total = sum(f["branches"]["total"] for f in every)
    reachable = sum(f["cpu_reachable"]["total"] for f in every)
    reasons: dict[str, int] = {}
    for f in every:
        for u in f["unreached_branches"]:
            reasons[u["reason"]] = reasons.get(u["reason"], 0) + 1
    report["total"] = {
        "functions": len(every),
        "percent": _percent(taken, total),
        "branches": {"reached": taken, "total": total},
        "cpu_reachable": {"reached": taken, "total": reachable},
        "cpu_percent": _percent(taken, reachable),
        "lines": {
            "reached": sum(f["lines"]["reached"] for f in every),
            "total": sum(f["lines"]["total"] for f in every),
        },
        "unreached_by_reason": dict(sorted(reasons.items())),
        "excluded": {kind: reasons[kind] for kind in EXCLUSIONS if kind in reasons},
    }
    return report


def _percent(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 1) if whole else None


# Output -------------------------------------------------------------------------------------------


def _shown(percent: float | None) -> str:
    return "-" if percent is None else f"{percent:.1f}%"


def _row(name: str, figures: Mapping[str, Any]) -> tuple[str, ...]:
    """One line of the table: a function's (or the total's) figures."""
    branches, lines = figures["branches"], figures["lines"]
    return (
        name,
        f"{branches['reached']}/{branches['total']}",
        _shown(figures["percent"]),
        _shown(figures["cpu_percent"]),
        f"{lines['reached']}/{lines['total']}",
    )


def render(report: Mapping[str, Any]) -> str:
    """The table (function, branches reached/total, percent, CPU-reachable percent, lines) and the
    total, then every unreached branch with its reason."""
    names = {path: Path(path).name for path in report["files"]}
    rows = [("function", "branches", "percent", "cpu-reachable", "lines")]
    for path, entry in report["files"].items():
        for qualname, f in entry["functions"].items():
            mark = "" if f["entered"] else "  (not entered)"
            rows.append(_row(f"{names[path]}:{qualname}{mark}", f))
    total = report["total"]
    rows.append(_row(f"total ({total['functions']} functions)", total))
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    out = ["branch coverage of the rule functions (what the checks reached):"]
    for k, row in enumerate(rows):
        if k == len(rows) - 1:
            out.append("  " + "  ".join("-" * w for w in widths))
        cells = [
            row[0].ljust(widths[0]),
            *(cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True)),
        ]
        out.append("  " + "  ".join(cells).rstrip())
    unreached = [
        (names[path], qualname, u)
        for path, entry in report["files"].items()
        for qualname, f in entry["functions"].items()
        for u in f["unreached_branches"]
    ]
    excluded = total.get("excluded") or {}
    if excluded:
        kinds = ", ".join(f"{kind} {n}" for kind, n in excluded.items())
        out.append(
            f"excluded from the cpu-reachable figure: {sum(excluded.values())} branches the target verified"
            f" no run of the rules takes ({kinds}); each listed below with why"
        )
    if unreached:
        by_reason = ", ".join(f"{reason} {n}" for reason, n in total["unreached_by_reason"].items())
        out.append(f"unreached branches ({len(unreached)}: {by_reason}):")
        for name, qualname, u in unreached:
            source = u["source"] if len(u["source"]) <= 70 else u["source"][:67] + "..."
            if u["read_from"] == EXCLUDED:
                out.append(
                    f"  {name}:{u['line']}->{u['to']} {qualname}: {u['reason']}: {u['why']}  [{source}]"
                )
                continue
            read = "" if u["read_from"] == CONDITION else f"{u['read_from']} "
            out.append(f"  {name}:{u['line']}->{u['to']} {qualname}: {u['reason']}  [{read}{source}]")
    return "\n".join(out)
