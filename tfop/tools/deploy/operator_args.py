"""The operator's command line as its Deployment carries it: build it, read the gang flags back.

`tfop manifests` writes the args with run_args(); `tfop gang enable|disable`
and `tfop doctor` read them with gang_flags() and flag_value(), so all three
agree with `tfop run` on what the flags mean (registry.gang_enabled).
Upstream's Go-style spellings (`--flag=value`) are read too.
"""
from __future__ import annotations

from tfop.gang.registry import gang_enabled

ENABLE = "--enable-gang-scheduling"
GANG_NAME = "--gang-scheduler-name"
SCHEDULER_NAME = "--scheduler-name"
_FALSE = {"false", "0", "no", "off"}


def run_args(enable: bool, gang_scheduler_name: str | None, scheduler_name: str | None) -> list[str]:
    """The container args of the operator's Deployment for these flags.

    The enable flag is written whenever gang scheduling is on, even when a name
    alone would imply it, so a reader of the Deployment need not know the rule.
    """
    args = ["run"]
    if gang_enabled(enable, gang_scheduler_name):
        args.append(ENABLE)
        if gang_scheduler_name:
            args += [GANG_NAME, gang_scheduler_name]
    if scheduler_name:
        args += [SCHEDULER_NAME, scheduler_name]
    return args + ["--all-namespaces", "--leader-elect"]


def flag_units(args: list[str]) -> list[tuple[str, ...]]:
    """The args grouped so that --gang-scheduler-name and a separate value stay together."""
    units: list[tuple[str, ...]] = []
    i = 0
    while i < len(args):
        if args[i] == GANG_NAME and i + 1 < len(args):
            units.append((GANG_NAME, args[i + 1]))
            i += 2
        else:
            units.append((args[i],))
            i += 1
    return units


def is_gang_flag(unit: tuple[str, ...]) -> bool:
    head = unit[0]
    return head in (ENABLE, GANG_NAME) or head.startswith((ENABLE + "=", GANG_NAME + "="))


def flag_value(args: list[str], flag: str) -> str | None:
    """The value of `flag` (`--flag value` or `--flag=value`), or None when absent."""
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def gang_flags(args: list[str]) -> tuple[bool, str | None]:
    """(gang scheduling on?, --gang-scheduler-name or None) as the operator reads these args."""
    enable, name = False, None
    for unit in flag_units(args):
        head = unit[0]
        if head == ENABLE:
            enable = True
        elif head.startswith(ENABLE + "="):
            enable = head.split("=", 1)[1].lower() not in _FALSE
        elif head == GANG_NAME:
            name = unit[1]
        elif head.startswith(GANG_NAME + "="):
            name = head.split("=", 1)[1]
    return gang_enabled(enable, name), name


def leader_election(args: list[str]) -> bool:
    """Whether these args run `tfop run` with --leader-elect (the last of it and --no-leader-elect wins)."""
    on = False
    for arg in args:
        if arg in ("--leader-elect", "--no-leader-elect"):
            on = arg == "--leader-elect"
    return on


def operator_container_index(containers: list[str], namespace: str, name: str,
                             container: str | None = None) -> int:
    """Which of the Deployment's containers (their names, in order) runs the operator.

    `container` when given; else the one named like the Deployment (as `tfop
    manifests` names it), else the first. ValueError when `container` is absent.
    """
    wanted = container or name
    if wanted in containers:
        return containers.index(wanted)
    if container:
        raise ValueError(f"Deployment {namespace}/{name} has no container {container!r}")
    return 0
