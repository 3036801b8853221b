"""The `tfop` command: run the operator, and look at jobs offline."""
from __future__ import annotations

import logging
import sys

import click

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
            raise click.UsageError(f"--{flag.replace('_', '-')}: {err}") from None
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


def _register_commands() -> None:
    from tfop.tools.deploy.commands import register as deploy
    from tfop.tools.doctor.command import register as doctor
    from tfop.tools.offline.commands import register as offline

    for register in (offline, deploy, doctor):
        register(cli)


_register_commands()


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
