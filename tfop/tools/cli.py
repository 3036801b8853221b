"""The `tfop` command: run the operator, and look at jobs offline."""
from __future__ import annotations

import asyncio
import functools
import json
import logging
import sys

import click
import yaml

from tfop import __version__
from tfop.api.rules import MAX_JOB_REPLICAS
from tfop.core.settings import DEFAULT_MAX_DISRUPTIONS_PER_JOB, DEFAULT_MAX_PODS_PER_JOB, Settings
from tfop.gang.registry import backend_from_flags, gang_enabled
from tfop.tools.gang_flags import gang_options  # shared with `tfop manifests`: one meaning, one help


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="tfop", message="%(prog)s %(version)s")
def cli() -> None:
    """tfop: a Kubernetes operator for Kubeflow TFJobs, with gang scheduling."""


@cli.command()
@gang_options
@click.option("--namespace", "namespaces", multiple=True, help="watch only this namespace (repeatable).")
@click.option("--all-namespaces", is_flag=True, help="watch every namespace (the default).")
@click.option("--cluster-domain", default="", help="suffix for TF_CONFIG hosts, e.g. cluster.local.")
@click.option("--gang-restart/--no-gang-restart", default=True,
              help="restart a running gang as a whole when a member fails or disappears.")
@click.option("--pods-before-admission", type=click.Choice(["auto", "always", "never"]), default="auto",
              show_default=True,
              help="create a gang's pods before Volcano admits its PodGroup; auto: when a dry-run pod shows "
                   "no Volcano admission webhook would refuse them.")
@click.option("--max-concurrent-requests", default=64, show_default=True, type=click.IntRange(1, 1024))
@click.option("--max-pods-per-job", default=DEFAULT_MAX_PODS_PER_JOB, show_default=True,
              type=click.IntRange(1, MAX_JOB_REPLICAS),
              help="fail a job asking for more pods before building any (admission allows at most "
                   f"{MAX_JOB_REPLICAS}).")
@click.option("--force-delete-lost-pods-after", default=0.0, show_default=True, type=click.FloatRange(min=0),
              metavar="SECONDS",
              help="force-delete a job's pod stuck terminating on a lost node this many seconds after the later of "
                   "the node's loss and the end of the pod's grace period (0: never). "
                   "RISK: where the node is only cut off from the network, not down, its containers keep running, "
                   "and the new pod of the same name runs beside them: two copies of one TF task. By default tfop "
                   "waits for Kubernetes to release the pod (the node tainted node.kubernetes.io/out-of-service, "
                   "or deleted).")
@click.option("--max-disruptions-per-job", default=DEFAULT_MAX_DISRUPTIONS_PER_JOB, show_default=True,
              type=click.IntRange(0, 10000),
              help="restarts a job's disruptions (preemption, eviction, lost nodes; never counted against "
                   "backoffLimit) may cause before the job fails with DisruptionLimitExceeded.")
@click.option("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster).")
@click.option("--health-probe-bind-address", default=":8081", show_default=True,
              help="address of /healthz and /readyz; 0 turns them off.")
@click.option("--leader-elect/--no-leader-elect", default=False,
              help="reconcile only while holding the Lease; run two replicas (the deployed manifests do).")
@click.option("--leader-elect-lease-duration", default=15.0, show_default=True, type=click.FloatRange(min=1),
              help="seconds a standby waits after the leader's last renewal before taking over.")
@click.option("--leader-elect-renew-deadline", default=10.0, show_default=True, type=click.FloatRange(min=1),
              help="seconds the leader keeps trying to renew before it stops writing and exits.")
@click.option("--leader-elect-retry-period", default=2.0, show_default=True, type=click.FloatRange(min=0.1),
              help="seconds between tries to acquire or renew.")
@click.option("--leader-elect-namespace", default="",
              help="namespace of the Lease (default: the operator's own, else kubeflow).")
@click.option("--metrics-bind-address", default=":8080", show_default=True,
              help="address of /metrics (Prometheus); 0 turns it off.")
@click.option("--event-loop", type=click.Choice(["auto", "uvloop", "asyncio"]), default="auto", show_default=True,
              help="auto: uvloop where installed (a quarter of the memory a TLS connection), else asyncio's own.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one JSON object per line, with the job's namespace and name, the outcome and duration.")
@click.option("-v", "--verbose", is_flag=True)
def run(kubeconfig, log_format, verbose, **options) -> None:
    """Run the operator against the current cluster."""
    from tfop.runtime.logs import configure

    settings = _run_settings(**options)
    configure(log_format, verbose)
    _run_operator(settings, kubeconfig)


def _run_settings(enable_gang_scheduling, gang_scheduler_name, namespaces, all_namespaces, **options) -> Settings:
    """`tfop run`'s options, checked, as the one Settings object."""
    from tfop.kube.health import parse_bind_address
    from tfop.kube.lease import LeaseTiming

    if all_namespaces and namespaces:
        raise click.UsageError("--namespace and --all-namespaces exclude each other")
    problem = LeaseTiming(options["leader_elect_lease_duration"], options["leader_elect_renew_deadline"],
                          options["leader_elect_retry_period"]).problem()
    if problem:
        raise click.UsageError(problem)
    for flag in ("health_probe_bind_address", "metrics_bind_address"):
        try:
            parse_bind_address(options[flag])
        except ValueError as err:
            raise click.UsageError(f"--{flag.replace('_', '-')}: {err}")
    return Settings(enable_gang_scheduling=gang_enabled(enable_gang_scheduling, gang_scheduler_name),
                    gang_scheduler_name=gang_scheduler_name, namespaces=tuple(namespaces),
                    pods_before_admission_mode=options.pop("pods_before_admission"), **options)


def _run_operator(settings: Settings, kubeconfig: str | None) -> None:
    """Run until stopped; a start-up failure or a vital task's death is one line and exit code 1."""
    from tfop.kube.credentials import load_credentials
    from tfop.kube.kubeconfig import StartupError
    from tfop.kube.leader import LeadershipLost
    from tfop.kube.supervisor import VitalTaskDied
    from tfop.runtime.event_loop import event_loop_runner
    from tfop.runtime.main import run_operator

    _check_gang_flags(settings)
    try:
        run_loop = event_loop_runner(settings.event_loop)
    except ImportError as err:
        raise click.UsageError(f"--event-loop {settings.event_loop}: {err}") from None
    try:
        run_loop(run_operator(settings, load_credentials(kubeconfig)))
    except (StartupError, VitalTaskDied, LeadershipLost) as err:
        logging.getLogger("tfop").error("%s", err)
        sys.exit(1)


def _check_gang_flags(settings: Settings) -> None:
    """Refuse gang flags that select no backend before connecting (`auto` needs the cluster)."""
    from tfop.gang.registry import AUTO

    if settings.gang_scheduler_name == AUTO:
        return
    try:
        backend_from_flags(settings.enable_gang_scheduling, settings.gang_scheduler_name, settings.scheduler_name)
    except ValueError as err:
        raise click.UsageError(str(err)) from None


def _load(files) -> list[tuple[str, dict]]:
    from tfop.tools.offline.render import documents, tfjobs_in

    out = []
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
        raise click.UsageError(str(err))
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
        except Exception as err:
            from tfop.api.validation import SHOWN_MAX
            from tfop.tools.offline.render import printable

            text = printable(" ".join(str(err).split()))[:SHOWN_MAX]
            raise click.ClickException(f"internal error, please report it with the input: {type(err).__name__}: "
                                       f"{text}") from None
    return guarded


@cli.command()
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


@cli.command()
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


def _register_deploy_commands() -> None:
    from tfop.tools.deploy.commands import register

    register(cli)


_register_deploy_commands()


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
