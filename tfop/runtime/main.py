"""Start the operator: kopf watches TFJobs; our controller watches their children and reconciles."""
from __future__ import annotations

import asyncio
import logging
import sys

from tfop.api.constants import FINALIZER, GROUP, PLURAL, STORAGE_VERSION
from tfop.core.settings import Settings
from tfop.gang.base import GangBackend
from tfop.kube.client import Credentials, KubeClient
from tfop.runtime.controller import Controller
from tfop.runtime.loop_monitor import LoopMonitor


def _import_kopf():
    """kopf imports the official kubernetes client, when installed, only to accept its model
    objects, which tfop never passes; that import alone costs ~20 MB of RSS. Hide it meanwhile."""
    if "kubernetes" in sys.modules:
        import kopf
        return kopf
    sys.modules["kubernetes"] = None  # makes `import kubernetes` raise ImportError
    try:
        import kopf
    finally:
        del sys.modules["kubernetes"]
    return kopf


kopf = _import_kopf()


log = logging.getLogger("tfop")


async def resolve_backend(settings: Settings, client: KubeClient) -> GangBackend | None:
    """The gang backend the flags select (registry.backend_from_flags), None when gang scheduling is off."""
    from tfop.gang.registry import AUTO, backend_from_flags

    installed = None
    if settings.gang_scheduler_name == AUTO:  # listed up front: the resolver cannot await a callable
        listing = await client.list("apiextensions.k8s.io/v1", "customresourcedefinitions")
        installed = {item["metadata"]["name"] for item in listing.get("items") or []}
    backend, why = backend_from_flags(settings.enable_gang_scheduling, settings.gang_scheduler_name,
                                      settings.scheduler_name, installed_crds=installed)
    log.info("gang scheduling: %s", why)
    if backend is None:
        return None
    if backend.group_resource is not None:
        resource = backend.group_resource
        crd = f"{resource.plural}.{resource.group}"
        found = await client.get("apiextensions.k8s.io/v1", "customresourcedefinitions", None, crd)
        if found is None:
            # Upstream refuses to start here; we keep serving and say exactly what is missing.
            log.error("CRD %s is not installed: %s gangs cannot be created until it is (see `tfop doctor`)",
                      crd, backend.name)
    return backend


def build_registry(controller_ref: list, credentials: Credentials) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_):
        return credentials.to_kopf()

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_):
        settings.posting.enabled = False  # we post our own, fewer, Events
        # Our namespaces are exact names and the CRD is known: no need to list namespaces or CRDs.
        settings.scanning.disabled = True
        settings.watching.server_timeout = 290
        settings.persistence.finalizer = FINALIZER

    @kopf.on.event(GROUP, STORAGE_VERSION, PLURAL, registry=registry)
    def on_tfjob(event, **_):
        obj = event.get("object")
        if obj and controller_ref:
            controller_ref[0].job_event(event.get("type"), obj)

    return registry


async def run_operator(settings: Settings, kubeconfig: str | None = None,
                       liveness: str | None = "http://0.0.0.0:8080/healthz",
                       stop_flag: asyncio.Event | None = None) -> None:
    LoopMonitor().start()  # logs event-loop stalls (e.g. one job's pass computing too long)
    credentials = Credentials.load(kubeconfig)
    async with KubeClient(credentials, max_connections=settings.max_concurrent_requests) as client:
        backend = await resolve_backend(settings, client)
        controller = Controller(settings, client, backend)
        controller_ref = [controller]
        registry = build_registry(controller_ref, credentials)
        work = asyncio.create_task(controller.run(), name="tfop-controller")

        @kopf.on.cleanup(registry=registry)
        async def stop_controller(**_):
            # kopf waits 5 s for tasks started after it before it exits: stop ours now, not then.
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
            try:
                written = await controller.flush_statuses(timeout=3.0)
                if written:
                    log.info("wrote %d held job statuses before stopping", written)
            except asyncio.TimeoutError:
                log.warning("held job statuses not all written within 3 s of stopping; the next operator "
                            "recomputes them")

        try:
            await kopf.operator(
                registry=registry, standalone=True, liveness_endpoint=liveness,
                clusterwide=settings.all_namespaces, namespaces=list(settings.namespaces),
                stop_flag=stop_flag,
            )
        finally:
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
