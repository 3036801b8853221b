"""Map the gang flags to a backend, and say why: the one resolver every command uses.

backend_from_flags() is the single policy for --enable-gang-scheduling,
--gang-scheduler-name and --scheduler-name; load_backend() maps one name and
detect_backend() reads installed CRDs for `auto`; flag_warning() says when the
flags are valid but probably not what was meant (every command shows it).

Backends come from the `tfop.gang_backends` entry-point group (third parties
add theirs there) plus the built-in table below, so a source checkout works
without `pip install`. Installed entry points win over the table.
"""
from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import entry_points
from typing import Any

from tfop.gang.base import GangBackend

GROUP = "tfop.gang_backends"
BUILTIN = {
    "kube-arbitrator": "tfop.gang.backends.pdb:PdbBackend",
    "kube-batch": "tfop.gang.backends.kube_batch:KubeBatchBackend",
    "volcano": "tfop.gang.backends.volcano:VolcanoBackend",
    "scheduler-plugins": "tfop.gang.backends.scheduler_plugins:SchedulerPluginsBackend",
    "coscheduling": "tfop.gang.backends.coscheduling:CoschedulingLabelsBackend",
    "koordinator": "tfop.gang.backends.koordinator:KoordinatorBackend",
    "yunikorn": "tfop.gang.backends.yunikorn:YunikornBackend",
    "kubernetes": "tfop.gang.backends.kubernetes:KubernetesBackend",
}
ALIASES = {"pdb": "kube-arbitrator"}
DEFAULT = "volcano"  # upstream's --gang-scheduler-name default
FALLBACK = "scheduler-plugins"  # upstream v1.7+: any other name selects it
AUTO = "auto"
# `auto` prefers, among installed schedulers: Volcano (upstream's default), then
# scheduler-plugins (upstream's other one), then kube-batch (Volcano's ancestor;
# its CRD lingers after upgrades, hence below the two), then Koordinator (its
# CRDs are installed for colocation too, so it is the weakest signal), then any
# third-party backend that names CRDs, alphabetically, and last Kubernetes' own (the
# kubernetes backend), whose API is served by the apiserver itself once enabled: a cluster
# that also runs a batch scheduler installed it on purpose. Label-only backends (coscheduling,
# yunikorn) and the PDB one leave no trace and are never picked.
AUTO_ORDER = ("volcano", "scheduler-plugins", "kube-batch", "koordinator")
# What `auto` reads: the installed CRD names, plus each built-in group API that discovery lists
# (served_key), or a callable giving them (called only for `auto`, so other names never need the
# right to list CRDs); None where there is no cluster.
InstalledCrds = Iterable[str] | Callable[[], Iterable[str]] | None
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def _targets() -> dict[str, str]:
    table = dict(BUILTIN)
    for ep in entry_points(group=GROUP):
        table[ep.name] = ep.value
    return table


def backend_names() -> list[str]:
    return sorted(_targets())


def backend_class(name: str) -> type[GangBackend]:
    """The class registered under `name` (or an alias); ValueError if it cannot load."""
    canonical = ALIASES.get(name, name)
    target = _targets().get(canonical)
    if target is None:
        raise ValueError(f"no gang backend named {name!r}; known: {', '.join(backend_names())}")
    module_name, _, attr = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"gang backend {name!r} ({target}) cannot be loaded: {err}") from err
    if not (isinstance(cls, type) and issubclass(cls, GangBackend)):
        raise ValueError(f"gang backend {name!r} ({target}) is not a GangBackend subclass")
    return cls


def served_key(backend: type[GangBackend]) -> str | None:
    """How `auto` names a built-in group API that discovery lists: "podgroups.scheduling.k8s.io/v1beta1"."""
    resource = backend.group_resource
    if not backend.builtin_api or resource is None:
        return None
    return f"{resource.plural}.{resource.group}/{resource.version}"


def lists_resource(discovery: Mapping[str, Any] | None, plural: str) -> bool:
    """Does an API version's discovery document (GET /apis/<group>/<version>) list `plural`?"""
    return any(r.get("name") == plural for r in (discovery or {}).get("resources") or [])


def served_keys() -> dict[str, tuple[str, str]]:
    """served_key -> (api_version, plural) of every backend whose group API is built in: what `auto`
    looks up in discovery."""
    keys = {}
    for name in backend_names():
        try:
            cls = backend_class(name)
        except ValueError:
            continue
        key = served_key(cls)
        if key is not None and cls.group_resource is not None:
            keys[key] = (cls.group_resource.api_version, cls.group_resource.plural)
    return keys


def detect_backend(installed: set[str]) -> tuple[str, str]:
    """(name, why) of the preferred backend whose CRDs are all installed, else of one whose built-in
    API is served (`installed` holds both: CRD names and served_key names)."""
    others = sorted(n for n in backend_names() if n not in AUTO_ORDER)
    looked_for: list[str] = []
    built_in: list[tuple[str, str]] = []
    for name in (*AUTO_ORDER, *others):
        try:
            cls = backend_class(name)
        except ValueError:
            continue  # a broken third-party plugin must not stop detection
        key = served_key(cls)
        if key:
            built_in.append((name, key))
        if not cls.crds:
            continue
        looked_for.extend(cls.crds)
        if set(cls.crds) <= set(installed):
            return name, f"--gang-scheduler-name=auto: found {', '.join(cls.crds)}, so {name}"
    for name, key in built_in:
        looked_for.append(key)
        if key in installed:
            return name, (f"--gang-scheduler-name=auto: no batch scheduler's CRDs, and the apiserver serves {key}, "
                          f"so {name}")
    raise ValueError("--gang-scheduler-name=auto: no gang scheduler's CRDs are installed, nor is a built-in "
                     f"gang API served; looked for {', '.join(looked_for)}")


def load_backend(name: str | None, scheduler_name: str | None = None, *,
                 installed_crds: set[str] | None = None) -> tuple[GangBackend, str]:
    """The backend for a --gang-scheduler-name value, and a sentence saying why.

    `scheduler_name` (--scheduler-name) overrides the backend's default
    schedulerName. `auto` needs `installed_crds` (plural.group names).
    """
    if not name:
        why = f"no --gang-scheduler-name given, so {DEFAULT} (upstream's default)"
        name = DEFAULT
    elif name == AUTO:
        if installed_crds is None:
            raise ValueError("--gang-scheduler-name=auto needs the list of installed CRDs")
        name, why = detect_backend(installed_crds)
    elif ALIASES.get(name, name) in _targets():
        canonical = ALIASES.get(name, name)
        why = (f"--gang-scheduler-name={name} selects {canonical}" if canonical != name
               else f"--gang-scheduler-name={name}")
        name = canonical
    else:
        if not _DNS_SUBDOMAIN.fullmatch(name):
            raise ValueError(f"--gang-scheduler-name={name!r} is neither a known backend "
                             f"({', '.join(backend_names())}) nor a valid schedulerName")
        backend = backend_class(FALLBACK)(scheduler_name or name)
        why = (f"{name!r} is not a known backend, so {FALLBACK} with pods' schedulerName "
               f"{backend.scheduler_name!r}, as upstream v1.7+ does")
        return backend, why
    backend = backend_class(name)(scheduler_name)
    where = (f"schedulerName {backend.scheduler_name!r}" if backend.scheduler_name
             else "the cluster's default scheduler")
    if scheduler_name:
        where += " (from --scheduler-name)"
    return backend, f"{why}; pods use {where}"


def flag_warning(gang_scheduler_name: str | None, scheduler_name: str | None = None) -> str | None:
    """A warning when --gang-scheduler-name names no known backend, else None.

    Such a name keeps upstream's meaning (v1.7+: scheduler-plugins, with the
    name as the pods' schedulerName), which a misspelt backend also gets: its
    pods then wait for a scheduler that does not exist. So it is said loudly.
    """
    name = gang_scheduler_name
    if not name or name in (AUTO, *BUILTIN, *ALIASES) or not _DNS_SUBDOMAIN.fullmatch(name):
        return None  # unset, auto, built in, or refused by load_backend with its own error
    if name in _targets():  # a third party's backend (looked up only now: listing entry points takes ms)
        return None
    close = [known for known in backend_names() if _similar(name, known)]
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    pods = scheduler_name or name
    return (f"--gang-scheduler-name={name!r} is not a known backend ({', '.join(backend_names())}): "
            f"using {FALLBACK} with pods' schedulerName {pods!r}, as upstream v1.7+ does; its pods wait "
            f"unless a scheduler named {pods!r} runs{hint}")


def _similar(name: str, known: str) -> bool:
    """A likely misspelling: one is a prefix of the other, or they differ in at most two letters."""
    if name.startswith(known) or known.startswith(name):
        return True
    return _edit_distance(name, known) <= 2


def _edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def gang_enabled(enable: bool, gang_scheduler_name: str | None) -> bool:
    """Is gang scheduling on? Naming a backend turns it on, in every command that takes both flags."""
    return bool(enable or gang_scheduler_name)


def backend_from_flags(enable: bool, gang_scheduler_name: str | None, scheduler_name: str | None = None,
                       installed_crds: InstalledCrds = None) -> tuple[GangBackend | None, str]:
    """(backend, why) for the gang flags; backend None when gang scheduling is off.

    `auto` picks from `installed_crds`. With None (no cluster: `tfop render`,
    `tfop manifests`) it is a ValueError rather than a guess, because a guess
    would render the wrong objects or grant every backend's rules.
    ValueError too for a name that selects no backend.
    """
    if not gang_enabled(enable, gang_scheduler_name):
        pods = f"schedulerName {scheduler_name!r}" if scheduler_name else "the cluster's default scheduler"
        return None, ("gang scheduling is off (neither --enable-gang-scheduling nor "
                      f"--gang-scheduler-name given); pods use {pods}")
    installed = None
    if gang_scheduler_name == AUTO:
        if installed_crds is None:
            raise ValueError("--gang-scheduler-name=auto picks the backend from the CRDs installed in "
                             "a cluster, and there is no cluster here: name the backend (one of: "
                             f"{', '.join(backend_names())})")
        installed = set(installed_crds() if callable(installed_crds) else installed_crds)
    return load_backend(gang_scheduler_name, scheduler_name, installed_crds=installed)
