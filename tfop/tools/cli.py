"""The `tfop` command: run the operator, and look at jobs offline."""
from __future__ import annotations

import asyncio
import json
import logging
import sys

import click
import yaml

from tfop.api.rules import MAX_JOB_REPLICAS
from tfop.core.settings import DEFAULT_MAX_PODS_PER_JOB, Settings
from tfop.gang.registry import backend_from_flags, gang_enabled
from tfop.tools.gang_flags import gang_options  # shared with `tfop manifests`: one meaning, one help


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
@click.option("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster).")
@click.option("--liveness", default="http://0.0.0.0:8080/healthz", show_default=True,
              help="liveness endpoint URL; empty to disable.")
@click.option("-v", "--verbose", is_flag=True)
def run(enable_gang_scheduling, gang_scheduler_name, scheduler_name, namespaces, all_namespaces, cluster_domain,
        gang_restart, pods_before_admission, max_concurrent_requests, max_pods_per_job, kubeconfig, liveness,
        verbose) -> None:
    """Run the operator against the current cluster."""
    from tfop.runtime.main import run_operator

    if all_namespaces and namespaces:
        raise click.UsageError("--namespace and --all-namespaces exclude each other")
    settings = Settings(
        enable_gang_scheduling=gang_enabled(enable_gang_scheduling, gang_scheduler_name),
        gang_scheduler_name=gang_scheduler_name, scheduler_name=scheduler_name,
        namespaces=tuple(namespaces), cluster_domain=cluster_domain, gang_restart=gang_restart,
        max_concurrent_requests=max_concurrent_requests, pods_before_admission_mode=pods_before_admission,
        max_pods_per_job=max_pods_per_job,
    )
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not verbose:
        logging.getLogger("kopf").setLevel(logging.WARNING)
    asyncio.run(run_operator(settings, kubeconfig=kubeconfig, liveness=liveness or None))


def _load(files) -> list[tuple[str, dict]]:
    from tfop.tools.offline import tfjobs_in

    out = []
    for handle in files:
        name = "-" if handle.name == "<stdin>" else handle.name
        try:
            docs = list(yaml.safe_load_all(handle))
        except yaml.YAMLError as err:
            raise click.ClickException(f"{name}: not YAML: {err}")
        jobs = tfjobs_in(docs)
        if not jobs:
            raise click.ClickException(f"{name}: no kubeflow.org TFJob in it")
        out.extend((name, job) for job in jobs)
    return out


def _context(enable, gang_name, scheduler_name):
    from tfop.children.templates import Templates
    from tfop.core.context import Context

    try:  # offline: no CRDs to read, so `auto` is refused with the reason
        backend, _why = backend_from_flags(enable, gang_name, scheduler_name)
    except ValueError as err:
        raise click.UsageError(str(err))
    settings = Settings(enable_gang_scheduling=backend is not None, gang_scheduler_name=gang_name or "",
                        scheduler_name=scheduler_name)
    return Context(settings=settings, templates=Templates(), backend=backend)


@cli.command()
@click.option("-f", "--filename", "files", type=click.File("r"), multiple=True, required=True,
              help="TFJob YAML (any served version); - for stdin. Repeatable.")
@gang_options
@click.option("--namespace", default=None, help="namespace for jobs that name none (default: default).")
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
def render(files, enable_gang_scheduling, gang_scheduler_name, scheduler_name, namespace, output) -> None:
    """Print every object the operator creates for the jobs, without a cluster."""
    from tfop.api.normalize import normalize
    from tfop.tools.offline import first_start_objects, with_namespace

    ctx = _context(enable_gang_scheduling, gang_scheduler_name, scheduler_name)
    objects, bad = [], 0
    for name, job in _load(files):
        job = with_namespace(job, namespace)
        problems = normalize(job).problems
        if problems:  # the operator would create nothing but a Failed condition: say why instead
            bad += len(problems)
            for problem in problems:
                click.echo(f"{name}: {job['metadata'].get('name', '?')}: {problem.field}: {problem.message}", err=True)
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
def validate(files, enable_gang_scheduling, gang_scheduler_name, scheduler_name) -> None:
    """Check TFJobs without a cluster: exit 1 on any problem, 0 when there are only warnings or none.

    Prints FILE: JOB: FIELD: problem, or FILE: JOB: FIELD: warning: message. With the gang flags the
    job is checked as a gang too, as the operator started with them would. Checks needing the
    cluster (do the PriorityClasses exist?) are skipped.
    """
    from tfop.tools.offline import job_problems, with_namespace

    ctx = _context(enable_gang_scheduling, gang_scheduler_name, scheduler_name)
    bad = 0
    for name, job in _load(files):
        for problem in job_problems(with_namespace(job, None), ctx):
            bad += problem.blocking
            label = "" if problem.blocking else f"{problem.severity}: "
            click.echo(f"{name}: {(job.get('metadata') or {}).get('name', '?')}: {problem.field}: "
                       f"{label}{problem.message}")
    sys.exit(1 if bad else 0)


def _register_deploy_commands() -> None:
    from tfop.tools.deploy_cli import register

    register(cli)


_register_deploy_commands()


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
