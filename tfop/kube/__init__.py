"""tfop's Kubernetes client library: generic and asyncio; nothing here knows tfop's own resources.

What to use (each piece is tested alone; tfop.runtime wires them to the training jobs):

- ``client.KubeClient``, ``client.ApiError``, ``client.NotLeading``: the verbs (create, replace,
  delete, merge_patch, get, list, watch, post_event), paginated LISTs, 429 and 401 handled.
- ``credentials``: how a client finds its apiserver and credentials (``Credentials.load``), the
  one loader every tfop command uses; ``ConfigError`` and ``StartupError`` say why not, in one line.
- ``informer.Informer``: list and watch one kind, keep trimmed copies that only move forward, tell
  changes by an owner key; ``versions`` compares resourceVersions.
- ``workqueue.WorkQueue``: one handler call per key at a time, coalesced, retried with backoff;
  ``drain`` on stop lets the calls running end and starts no other.
- ``leader.LeaderElector`` on a ``coordination.k8s.io`` Lease, with ``lease``'s pure rules.
- ``events.EventRecorder``: Events posted as client-go posts them, repeats counted, floods dropped.
- ``health.HttpServer``: /healthz, /readyz and /metrics from named checks.
- ``supervisor.first_of`` and ``VitalTaskDied``: a process that is never alive and idle.
- ``loop_monitor.LoopMonitor``: how long the event loop was held, ticking on ``ticks.PACE``, the points a
  client's ``watch_pace`` reads each watch's socket on (``client.let_gather``) and a
  ``WorkQueue(grid=...)``'s delayed adds end on, so they share wake-ups.
"""
