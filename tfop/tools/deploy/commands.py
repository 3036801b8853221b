"""Deploy-side commands: `tfop manifests`, `tfop gang enable|disable`.

tfop/tools/cli.py calls register(cli). Cluster commands load credentials as `tfop run` does
(tfop.kube.credentials.load_credentials) and send every request through the same client
(tfop.kube.blocking.BlockingClient): a few calls, one at a time, then exit.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import click

from tfop.core.settings import DEFAULT_DEPLOYMENT, DEFAULT_IMAGE, DEFAULT_NAMESPACE
from tfop.tools.gang_flags import gang_options


@contextlib.contextmanager
def cluster_client(kubeconfig: str | None, context: str | None) -> Iterator[Any]:
    """A BlockingClient whose apiserver answered; every failure one line, never a traceback."""
    import aiohttp

    from tfop.kube.blocking import BlockingClient
    from tfop.kube.client import ApiError
    from tfop.kube.credentials import load_credentials, one_line
    from tfop.kube.kubeconfig import StartupError

    try:
        api = BlockingClient(load_credentials(kubeconfig, context)).__enter__()
    except StartupError as err:
        raise click.ClickException(str(err)) from None
    try:
        yield api
    except ApiError as err:  # e.g. this kubeconfig's user may not list CRDs
        if err.status == 422:  # a JSON-patch `test` failed: someone edited it meanwhile
            raise click.ClickException("the Deployment or ClusterRole changed while patching; "
                                       "run the command again") from None
        raise click.ClickException(f"{err.status} {err.message}: {err.request}") from None
    except LookupError as err:
        raise click.ClickException(str(err)) from None
    except (TimeoutError, aiohttp.ClientError, OSError) as err:
        # The apiserver went away mid-command (requests are not retried): one line.
        raise click.ClickException(f"the apiserver stopped answering: {one_line(err)}") from None
    finally:
        api.close()


def kube_options(f):
    f = click.option("--context", default=None, help="kubeconfig context (default: current).")(f)
    return click.option("--kubeconfig", default=None, envvar="KUBECONFIG",
                        help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")(f)


@click.command("manifests")
@gang_options
@click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True,
              help="Namespace of the operator (its Deployment, ServiceAccount and Lease); it must exist "
                   "unless --create-namespace.")
@click.option("--create-namespace", is_flag=True,
              help="Also print the Namespace object. Off by default: `kubeflow` is usually shared by all of "
                   "Kubeflow, and `kubectl delete -f` of this output would delete it with everything in it.")
@click.option("--watch-namespace", "watch_namespaces", multiple=True, metavar="NS",
              help="Watch only this namespace (repeatable), with a Role there instead of cluster-wide "
                   "rights; the ClusterRole keeps only the gang backend's cluster-scoped reads. "
                   "Default: every namespace.")
@click.option("--image", default=DEFAULT_IMAGE, show_default=True)
@click.option("--pod-monitor", is_flag=True,
              help="add a Prometheus Operator PodMonitor scraping the operator's /metrics (port 8080).")
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
def manifests_cmd(enable_gang_scheduling, gang_scheduler_name, scheduler_name, namespace, create_namespace,
                  watch_namespaces, image, pod_monitor, output):
    """Print everything the operator needs (CRD, RBAC, Deployment) in apply order.

    With gang scheduling, the ClusterRole also grants the backend's rules.

    \b
    Apply server-side: the TFJob CRD is too big for client-side apply's
    last-applied annotation (256 KiB):
      kubectl create namespace kubeflow
      tfop manifests | kubectl apply --server-side -f -
    """
    from tfop.tools.deploy.manifests import deploy_objects, dump

    try:
        objs = deploy_objects(enable_gang_scheduling, gang_scheduler_name, scheduler_name, namespace, image,
                              create_namespace=create_namespace, watch_namespaces=watch_namespaces,
                              pod_monitor=pod_monitor)
    except ValueError as err:
        raise click.UsageError(str(err)) from err
    click.echo(dump(objs, output), nl=False)


def _target_options(f):
    f = click.option("--cluster-role", default=DEFAULT_DEPLOYMENT, show_default=True)(f)
    f = click.option("--deployment", default=DEFAULT_DEPLOYMENT, show_default=True)(f)
    f = click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True)(f)
    f = click.option("--dry-run", is_flag=True, help="Print what would change; change nothing.")(f)
    return kube_options(f)


def _toggle(enable, name, namespace, deployment, cluster_role, dry_run, kubeconfig, context):
    from tfop.tools.deploy.gang_toggle import Target, apply_gang

    target = Target(namespace=namespace, deployment=deployment, cluster_role=cluster_role)
    with cluster_client(kubeconfig, context) as api:
        try:
            lines = apply_gang(api, enable, name, target, dry_run=dry_run)
        except ValueError as err:
            raise click.UsageError(str(err)) from err
    for line in lines:
        click.echo(line)


@click.group("gang")
def gang_group():
    """Turn gang scheduling on or off in a running operator (Deployment args + ClusterRole)."""


def _gang_command(enable: bool, name_help: str, doc: str) -> click.Command:
    """`tfop gang enable` or `disable`: the same options, one direction each."""
    def command(gang_scheduler_name, **kw):
        _toggle(enable, gang_scheduler_name, **kw)
    command.__doc__ = doc
    command = click.option("--gang-scheduler-name", default=None, metavar="NAME", help=name_help)(
        _target_options(command))
    return gang_group.command("enable" if enable else "disable")(command)


gang_enable = _gang_command(
    True, "Backend to enable (volcano when omitted; `auto` detects it from the CRDs).",
    "Add --enable-gang-scheduling (and the backend's RBAC rules).")
gang_disable = _gang_command(
    False, "Backend whose rules to remove if the args no longer name one.",
    "Remove exactly what `gang enable` added.")


def register(group: click.Group) -> None:
    for command in (manifests_cmd, gang_group):
        group.add_command(command)
