"""The gang flags of `tfop run`, `tfop render` and `tfop manifests`: one definition, one help text.

Their meaning is registry.backend_from_flags(): a --gang-scheduler-name turns
gang scheduling on by itself, and `auto` needs a cluster to look at.
"""
from __future__ import annotations

import click

from tfop.tools.deploy.operator_args import ENABLE, GANG_NAME, SCHEDULER_NAME

ENABLE_HELP = "Make every TFJob a gang (backend: --gang-scheduler-name, else volcano)."
GANG_NAME_HELP = ("Gang backend; implies --enable-gang-scheduling. One of volcano (the default), "
                  "scheduler-plugins, coscheduling, kube-batch, kube-arbitrator (alias pdb), "
                  "koordinator, yunikorn, kubernetes (kube-scheduler's own gangs, 1.37+); auto: "
                  "detected from the cluster's CRDs and APIs (refused where "
                  "there is no cluster: render, manifests); any other name: scheduler-plugins "
                  "with that schedulerName.")
SCHEDULER_NAME_HELP = "schedulerName stamped on pods (overrides the gang backend's own)."


def gang_options(f):
    """Add --enable-gang-scheduling, --gang-scheduler-name and --scheduler-name to a command."""
    f = click.option(SCHEDULER_NAME, default=None, metavar="NAME", help=SCHEDULER_NAME_HELP)(f)
    f = click.option(GANG_NAME, default="", metavar="NAME", help=GANG_NAME_HELP)(f)
    return click.option(ENABLE, is_flag=True, help=ENABLE_HELP)(f)
