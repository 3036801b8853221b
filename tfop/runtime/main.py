"""Start one operator replica: kopf runs the process; tfop's informers watch TFJobs and children.

With leader election one replica reconciles and the others keep warm caches; every vital task is
supervised (tfop/kube/supervisor.py), so the process never stays alive doing nothing.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import socket
import uuid
from pathlib import Path

import aiohttp
import kopf

from tfop import __version__
from tfop.core.settings import DEFAULT_NAMESPACE, LEADER_ELECTION_LEASE, Settings
from tfop.gang.base import GangBackend
from tfop.kube.client import ApiError, KubeClient, check_answers
from tfop.kube.credentials import Credentials
from tfop.kube.health import HttpServer, metrics_routes, parse_bind_address, probe_routes
from tfop.kube.kubeconfig import StartupError
from tfop.kube.leader import LeaderElector
from tfop.kube.lease import LeaseTiming
from tfop.kube.loop_monitor import LoopMonitor
from tfop.kube.supervisor import first_of, stop_all
from tfop.kube.ticks import PACE
from tfop.runtime import discovery, probes
from tfop.runtime.controller import Controller
from tfop.runtime.metrics import Metrics
from tfop.runtime.process import build_registry

IN_CLUSTER_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
# Resolving the gang backend at start-up takes a request or two; longer means no usable apiserver.
STARTUP_TIMEOUT_SECONDS = 30.0
# A stop waits this long for the passes under way to end, their requests answered (a pass cut off
# leaves a dropped request in the apiserver's log and its writes to the next leader); with the held
# statuses' 3 s and the Lease's renew deadline it ends within the 30 s a pod is given to stop.
DRAIN_SECONDS = 5.0
YOUNG_COLLECTION_ALLOCATIONS = 10_000


log = logging.getLogger("tfop")


async def resolve_backend(settings: Settings, client: KubeClient) -> GangBackend | None:
    """The gang backend the flags select (registry.backend_from_flags), None when gang scheduling is off."""
    from tfop.gang.common import group_crd
    from tfop.gang.registry import AUTO, backend_from_flags, flag_warning, served_key, served_keys

    installed = None
    if settings.gang_scheduler_name == AUTO:  # listed up front: the resolver cannot await a callable
        installed = await discovery.served_group_apis(client)
        try:
            installed |= await discovery.crd_names(client)
        except ApiError as err:
            if err.status != 403:
                raise
            # The role of a built-in API's backend (`tfop gang enable` keeps `auto` in the args and
            # grants the rules of the backend it found) has no CRD rule: discovery alone decides.
            log.warning("gang scheduling: --gang-scheduler-name=auto cannot list CRDs (%s), so it looks only "
                        "at the built-in gang APIs discovery lists; a role for a CRD-based scheduler "
                        "(`tfop manifests --gang-scheduler-name <name>`) grants the list", err.message)
    backend, why = backend_from_flags(settings.enable_gang_scheduling, settings.gang_scheduler_name,
                                      settings.scheduler_name, installed_crds=installed)
    log.info("gang scheduling: %s", why)
    warning = flag_warning(settings.gang_scheduler_name, settings.scheduler_name)
    if warning:
        log.warning("gang scheduling: %s", warning)
    if backend is None:
        return None
    key = served_key(type(backend))
    if (key is not None and key not in (installed or ())  # not in the listing: asked for by name
            and not await discovery.served_group_apis(client, {key: served_keys()[key]})):
        log.error("the apiserver does not serve %s: %s gangs cannot be created until it does (Kubernetes "
                  "1.37+ with the GenericWorkload feature gate and that API enabled; see `tfop doctor`)",
                  key, backend.name)
    crd = group_crd(backend)
    if crd is None:
        return backend
    try:
        found = await client.get(*discovery.CRDS, None, crd)
    except ApiError as err:
        if err.status != 403:
            raise
        # A check, not a need: the group objects themselves may still be allowed.
        log.warning("cannot check that CRD %s is installed (%s); see `tfop doctor`", crd, err.message)
        return backend
    if found is None:
        # Upstream refuses to start here; we keep serving and say exactly what is missing.
        log.error("CRD %s is not installed: %s gangs cannot be created until it is (see `tfop doctor`)",
                  crd, backend.name)
    return backend


def replica_identity() -> str:
    """client-go's form: the host (the pod's name in a cluster) and a unique suffix."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:10]}"


def lease_namespace(settings: Settings) -> str:
    """--leader-elect-namespace, else the namespace this pod runs in, else tfop's default."""
    if settings.leader_elect_namespace:
        return settings.leader_elect_namespace
    try:
        return Path(IN_CLUSTER_NAMESPACE_FILE).read_text().strip() or DEFAULT_NAMESPACE
    except OSError:
        return DEFAULT_NAMESPACE


async def start_up(settings: Settings, client: KubeClient) -> GangBackend | None:
    try:
        return await asyncio.wait_for(resolve_backend(settings, client), STARTUP_TIMEOUT_SECONDS)
    except ApiError as err:
        raise StartupError(f"the apiserver refused a start-up request: {err}") from None
    except TimeoutError:
        raise StartupError(f"no answer from the apiserver at {client.credentials.server} within "
                           f"{STARTUP_TIMEOUT_SECONDS:g}s") from None
    except (OSError, aiohttp.ClientError) as err:
        raise StartupError(f"cannot reach the apiserver at {client.credentials.server}: {err}") from None
    except ValueError as err:  # e.g. `--gang-scheduler-name auto` and no scheduler's CRDs installed
        raise StartupError(f"gang scheduling: {err}") from None


class Operator:
    """One replica: the controller, its leader election and probes, under kopf and a supervisor."""

    def __init__(self, settings: Settings, client: KubeClient, controller: Controller,
                 elector: LeaderElector | None):
        self.settings, self.client, self.controller, self.elector = settings, client, controller, elector
        self.stopping = asyncio.Event()
        self.vital: dict[str, asyncio.Task] = {}

    def start_tasks(self) -> None:
        leading = self.elector.leading if self.elector else None
        self.vital["controller"] = asyncio.create_task(self.controller.run(leading), name="tfop-controller")
        if self.elector is not None:
            self.vital["leader election"] = asyncio.create_task(self.elector.run(), name="tfop-leader-election")
        self.vital["event-loop monitor"] = asyncio.create_task(LoopMonitor().run(), name="tfop-loop-monitor")

    async def stop(self) -> None:
        """A clean stop: no more reconciling, held statuses written, the Lease handed over."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        if not await self.controller.queue.drain(DRAIN_SECONDS):
            log.warning("passes still under way %g s after stopping were cut off; the next leader redoes them",
                        DRAIN_SECONDS)
        await stop_all([self.vital.get("controller")])
        try:
            written = await self.controller.flush_statuses(timeout=3.0)
            if written:
                log.info("wrote %d held job statuses before stopping", written)
        except TimeoutError:
            log.warning("held job statuses not all written within 3 s of stopping; the next leader recomputes them")
        electing = self.vital.get("leader election")
        if self.elector is not None and electing is not None:
            self.elector.stop()  # lets a Lease request under way finish; each is bounded by the renew deadline
            await asyncio.wait([electing], timeout=self.elector.timing.renew_deadline)
            await stop_all([electing])
            await self.elector.release()
        await stop_all(self.vital.values())


async def run_operator(settings: Settings, credentials: Credentials,
                       stop_flag: asyncio.Event | None = None) -> None:
    """Run until stopped (SIGTERM/SIGINT, or `stop_flag`); raise StartupError or VitalTaskDied otherwise."""
    identity = replica_identity()
    # Watch events read at most 0.1 s late (PACE): a child's event waits 0.2 s for its burst anyway
    # (controller.CHILD_BATCH_SECONDS), and a burst is read in a few wake-ups, not one each.
    async with KubeClient(credentials, max_connections=settings.max_concurrent_requests,
                          user_agent=f"tfop/{__version__} ({identity})", watch_pace=PACE) as client:
        await check_answers(client)
        elector = None
        if settings.leader_elect:
            timing = LeaseTiming(settings.leader_elect_lease_duration, settings.leader_elect_renew_deadline,
                                 settings.leader_elect_retry_period)
            elector = LeaderElector(client, lease_namespace(settings), LEADER_ELECTION_LEASE, identity, timing)
            client.write_gate = elector.may_write  # only the leader writes, from start to end
        metrics = Metrics()
        client.on_response = metrics.api_response
        metrics.watch_traffic(client.watch_received)
        backend = await start_up(settings, client)
        log.info("event loop: %s", type(asyncio.get_running_loop()).__module__.split(".")[0])
        operator = Operator(settings, client, Controller(settings, client, backend, metrics=metrics), elector)
        registry = build_registry(credentials, operator.stop)
        servers = [await serve(settings.health_probe_bind_address, "the probes", probe_checks(operator)),
                   await serve(settings.metrics_bind_address, "the metrics", metrics_routes(metrics.registry))]
        tune_garbage_collector()
        operator.start_tasks()
        try:
            await first_of(kopf.operator(registry=registry, standalone=True, liveness_endpoint=None,
                                         clusterwide=settings.all_namespaces, namespaces=list(settings.namespaces),
                                         stop_flag=stop_flag),
                           operator.vital, operator.stopping)
        finally:
            await operator.stop()
            for server in servers:
                if server is not None:
                    await server.stop()


def tune_garbage_collector() -> None:
    """What start-up built (modules, templates, the client) lives as long as the process: frozen out of
    the collector's full passes, which would hold the event loop up to 0.7 s in a J=1000 burst. Young
    collections every YOUNG_COLLECTION_ALLOCATIONS net allocations, not 700: a pass or a watch event
    allocates hundreds, nearly all freed by their reference counts anyway."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_ALLOCATIONS, *gc.get_threshold()[1:])


async def serve(address_flag: str, what: str, routes: dict) -> HttpServer | None:
    address = parse_bind_address(address_flag)
    if address is None:
        return None
    server = HttpServer(address, routes)
    try:
        await server.start()
    except OSError as err:
        raise StartupError(f"cannot serve {what} on {address_flag}: {err}") from None
    return server


def probe_checks(operator: Operator) -> dict:
    def vital() -> str | None:
        ended = [name for name, task in operator.vital.items() if task.done()]
        return f"stopped: {', '.join(ended)}" if ended and not operator.stopping.is_set() else None
    return probe_routes({"tasks": vital, **probes.liveness_checks(operator.controller)},
                        probes.readiness_checks(operator.controller))
