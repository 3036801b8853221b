"""`tfop doctor`: the checks of tfop/tools/doctor/checks.py against the cluster the kubeconfig names."""
from __future__ import annotations

import click

from tfop.core.settings import DEFAULT_DEPLOYMENT, DEFAULT_NAMESPACE
from tfop.tools.deploy.commands import cluster_client, kube_options


def _sa(value: str | None) -> tuple[str, str] | None:
    if value is None:
        return None
    ns, sep, name = value.partition(":")
    if not sep or not ns or not name:
        raise click.BadParameter("expected NAMESPACE:NAME")
    return ns, name


@click.command("doctor")
@click.option("--gang-scheduler-name", default=None, metavar="NAME",
              help="Check with gang scheduling and this backend (`auto`: detected from the CRDs); "
                   "default: whatever the running operator's args select.")
@click.option("--scheduler-name", default=None, metavar="NAME",
              help="schedulerName pods use, if not the backend's own.")
@click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True,
              help="Namespace of the operator and its ServiceAccount.")
@click.option("--service-account", default=DEFAULT_DEPLOYMENT, show_default=True)
@click.option("--deployment", default=DEFAULT_DEPLOYMENT, show_default=True)
@click.option("--scheduler-service-account", default=None, metavar="NS:NAME",
              help="The scheduler's ServiceAccount, when it does not run as a findable pod.")
@kube_options
def doctor_cmd(gang_scheduler_name, scheduler_name, namespace, service_account, deployment,
               scheduler_service_account, kubeconfig, context):
    """Check CRDs, the operator's RBAC, the installed operator and the gang scheduler; exit 1 on any failure."""
    from tfop.tools.doctor import checks as doctor
    from tfop.tools.doctor.cluster import Cluster

    with cluster_client(kubeconfig, context) as api:
        cluster = Cluster(api)
        try:
            target = doctor.backend_to_check(cluster, gang_scheduler_name, scheduler_name, namespace, deployment)
        except ValueError as err:
            click.echo(doctor.format_report([doctor.Check("gang backend resolves", False, str(err))]))
            raise SystemExit(1) from None
        click.echo(f"checking: {target.why}")
        if target.warning:
            click.echo(f"WARNING: {target.warning}")
        checks = doctor.run_checks(cluster, target.backend, namespace, service_account, target.scheduler_name,
                                   _sa(scheduler_service_account), deployment=deployment)
    click.echo(doctor.format_report(checks))
    raise SystemExit(doctor.exit_code(checks))


def register(group: click.Group) -> None:
    group.add_command(doctor_cmd)
