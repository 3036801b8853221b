"""`tfop render` and `tfop validate`: a job's objects and problems, without a cluster."""
from __future__ import annotations

import functools
import json
import sys

import click
import yaml

from tfop.core.settings import Settings
from tfop.gang.registry import backend_from_flags
from tfop.tools.gang_flags import gang_options


def _load(files) -> list[tuple[str, dict]]:
    from tfop.tools.offline.render import documents, tfjobs_in

    out: list[tuple[str, dict]] = []
    for handle in files:
        name = "-" if handle.name == "<stdin>" else handle.name
        try:
            docs = documents(handle)
        except ValueError as err:  # not YAML, or beyond the bounds a TFJob stays in
            raise click.ClickException(f"{name}: {err}") from None
        jobs = tfjobs_in(docs)
        if not jobs:
            raise click.ClickException(f"{name}: no kubeflow.org TFJob in it")
        out.extend((name, job) for job in jobs)
    return out


@functools.lru_cache(maxsize=1)
def _templates():
    """The children's templates, compiled once a process (~8 ms): the files never change meanwhile."""
    from tfop.children.templates import Templates

    return Templates()


def _context(enable, gang_name, scheduler_name):
    from tfop.core.context import Context
    from tfop.gang.registry import flag_warning

    try:  # offline: no CRDs to read, so `auto` is refused with the reason
        backend, _why = backend_from_flags(enable, gang_name, scheduler_name)
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    warning = flag_warning(gang_name, scheduler_name)
    if warning:
        click.echo(f"WARNING: {warning}", err=True)
    settings = Settings(enable_gang_scheduling=backend is not None, gang_scheduler_name=gang_name or "",
                        scheduler_name=scheduler_name)
    return Context(settings=settings, templates=_templates(), backend=backend)


def _problem_line(file: str, job: dict, problem) -> str:
    """FILE: JOB: FIELD: [warning: ]message, on one line whatever the file's names hold."""
    from tfop.tools.offline.render import job_label, printable

    label = "" if problem.blocking else f"{problem.severity}: "
    return printable(f"{file}: {job_label(job)}: {problem.field}: {label}{problem.message}")


def _one_line_errors(command):
    """The last resort of an offline command: an exception tfop did not foresee is one line and exit
    code 1, never a traceback (tests/test_cli_fuzz.py makes sure none is left to reach it)."""
    @functools.wraps(command)
    def guarded(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as err:  # noqa: BLE001 - the last resort: one line, never a traceback
            from tfop.api.validation import SHOWN_MAX
            from tfop.tools.offline.render import printable

            text = printable(" ".join(str(err).split()))[:SHOWN_MAX]
            raise click.ClickException(f"internal error, please report it with the input: {type(err).__name__}: "
                                       f"{text}") from None
    return guarded


@click.command()
@click.option("-f", "--filename", "files", type=click.File("r"), multiple=True, required=True,
              help="TFJob YAML (any served version); - for stdin. Repeatable.")
@gang_options
@click.option("--namespace", default=None, help="namespace for jobs that name none (default: default).")
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@_one_line_errors
def render(files, enable_gang_scheduling, gang_scheduler_name, scheduler_name, namespace, output) -> None:
    """Print every object the operator creates for the jobs, without a cluster."""
    from tfop.tools.offline.render import first_start_objects, spec_problems, with_namespace

    ctx = _context(enable_gang_scheduling, gang_scheduler_name, scheduler_name)
    objects, bad = [], 0
    for name, job in _load(files):
        job = with_namespace(job, namespace)
        # The apiserver refuses the job, or the operator creates nothing but a Failed condition: say why.
        problems = spec_problems(job)
        if problems:
            bad += len(problems)
            for problem in problems:
                click.echo(_problem_line(name, job, problem), err=True)
            continue
        objects.extend(first_start_objects(job, ctx))
    if bad:
        sys.exit(1)
    if output == "json":
        click.echo(json.dumps(objects, indent=2))
    else:
        click.echo(yaml.safe_dump_all(objects, sort_keys=False), nl=False)


@click.command()
@click.option("-f", "--filename", "files", type=click.File("r"), multiple=True, required=True,
              help="TFJob YAML (any served version); - for stdin. Repeatable.")
@gang_options
@_one_line_errors
def validate(files, enable_gang_scheduling, gang_scheduler_name, scheduler_name) -> None:
    """Check TFJobs without a cluster: exit 1 on any problem, 0 when there are only warnings or none.

    Prints FILE: JOB: FIELD: problem, or FILE: JOB: FIELD: warning: message. With the gang flags the
    job is checked as a gang too, as the operator started with them would. Checks needing the
    cluster (do the PriorityClasses exist?) are skipped.
    """
    from tfop.tools.offline.render import job_problems, with_namespace

    ctx = _context(enable_gang_scheduling, gang_scheduler_name, scheduler_name)
    bad = 0
    for name, job in _load(files):
        for problem in job_problems(with_namespace(job, None), ctx):
            bad += problem.blocking
            click.echo(_problem_line(name, job, problem))
    sys.exit(1 if bad else 0)


def register(group: click.Group) -> None:
    for command in (render, validate):
        group.add_command(command)
