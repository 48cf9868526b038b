"""Runs a plan's checks (in process or in workers) and appends what each found to the ledger.

One loop for both: the units go to ``workers.ordered``, which answers in
submission order, so a parallel run records what a serial one would. Each
answer becomes records as it arrives (``records_of``); a way of failing is on
disk even sooner, as first met (``Found``, appended by whichever process met
it). Interrupted, what had started is recorded (a check stopped part-way as
``Unfinished``), and so is every unit never begun: a report always says what
did not run.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mmharness import records
from mmharness.ledger import Ledger

if TYPE_CHECKING:
    from mmharness.plan import Plan
    from mmharness.runner import Result


@dataclass
class Execution:
    """What running a plan left besides its records: the coverage reached, and how the run stopped."""

    reached: Any = None
    interrupted: bool = False
    failed_fast: bool = False


def execute(plan: Plan, ledger: Ledger) -> Execution:
    """Run every unit of ``plan``; the records go to ``ledger`` as each unit ends."""
    from mmharness import interrupts, reach
    from mmharness.progress import Progress
    from mmharness.views import console, rows

    done = Execution(reached=reach.Reached() if plan.coverage else None)
    recorder = reach.Recorder(plan.coverage) if plan.coverage and plan.workers == 1 else None
    session = plan.session()
    color = console.use_color(sys.stdout)
    produced = None
    with interrupts.handled():
        try:
            if recorder is not None:
                recorder.start()
            with Progress(len(plan.units), "checks") as progress:
                produced = _answers(plan, session, progress)
                for check, _ in plan.units:
                    progress.start(check.id)
                    result = next(produced)
                    if done.reached is not None:  # a worker's answer carries the arcs it reached
                        result, arcs = reach.unwrapped(result)
                        done.reached.add(arcs)
                    recorded = records.of_result(session.keep(result))
                    ledger.extend(recorded)
                    if result.interrupted:  # stopped part-way: its findings are in the report
                        continue
                    progress.line(console.line(rows(recorded)[0], color=color))
                    stopping = interrupts.requested() is not None  # a signal outranks --fail-fast
                    if plan.fail_fast and not stopping and plan.fails(result):
                        done.failed_fast = True
                        break
                else:
                    next(produced, None)  # the end, or the interruption after the last partial result
        except KeyboardInterrupt:  # report what ran, and what the checks in progress found
            done.interrupted = True
        finally:
            if produced is not None:
                produced.close()  # stops the workers
            if recorder is not None:
                done.reached.add(recorder.stop())
    ledger.extend(_not_started(plan, ledger))
    return done


def _answers(plan: Plan, session: Any, progress: Any) -> Iterator[Result]:
    """Each unit's result, in order; interrupted, those that had started, then ``Stop``."""
    from mmharness.workers import ordered

    if plan.workers == 1:
        return ordered(lambda c, d: session.run(c, d, on_example=progress.tick), plan.units, 1)
    work = [plan.worker_unit(check, device) for check, device in plan.units]
    return ordered(run_in_worker, work, min(plan.workers, len(plan.units)))


def run_in_worker(spec: str, check_id: str, device: str, options: dict, measured: list | None = None):
    """One check in a worker process: the target (and the one compared with) loaded once per process,
    the database opened there. ``measured``: the engine files to measure (``--coverage``); the answer
    then carries the arcs reached."""
    from mmharness.checks import all_checks
    from mmharness.plan import open_database
    from mmharness.session import Session
    from mmharness.targets.specs import loaded as loaded_target

    options = dict(options)
    database = open_database(options.pop("database"), options["profile"])
    against_spec = options.get("against_spec")
    other = loaded_target(against_spec) if against_spec else None
    session = Session(loaded_target(spec), spec, database=database, against=other, **options)
    check = all_checks()[check_id]
    if measured:
        from mmharness import reach

        return reach.measured_call(measured, session.run, check, device)
    return session.run(check, device)


def _not_started(plan: Plan, ledger: Ledger) -> list[records.Unfinished]:
    """A record for each planned unit that no record accounts for: it never began."""
    accounted = {r.unit for r in ledger.records if isinstance(r, (records.Ended, records.Skipped))}
    accounted |= {r.unit for r in ledger.of(records.Unfinished)}
    return [
        records.Unfinished(check.id, device, records.NOT_STARTED)
        for check, device in plan.units
        if (check.id, device) not in accounted
    ]
