"""kwok Stage definitions for the e2e cluster.

kwok's own "fast" stages (nodes Ready with leases, pods Running at once, pods
deleted once marked for deletion) are read from the kwok module source in
GOMODCACHE at run time. On top of them, one stage of ours lets a test end a
Running pod the way a real container would exit:

    labels:      tfop.test/exit: "true"        # opt in
    annotations: tfop.test/exit-code: "3"      # default "0" -> Succeeded, else Failed
                 tfop.test/exit-delay: "5s"    # optional Go duration (or RFC3339 time)
                 tfop.test/exit-reason: "OOMKilled"  # optional, default Completed/Error

Every container of the pod gets state.terminated with that exit code.
The pod phase becomes terminal whatever its restartPolicy says (kwok runs no
kubelet restart loop), so tests should use restartPolicy Never.
"""

from __future__ import annotations

from pathlib import Path

EXIT_LABEL = "tfop.test/exit"
EXIT_CODE_ANNOTATION = "tfop.test/exit-code"
EXIT_DELAY_ANNOTATION = "tfop.test/exit-delay"
EXIT_REASON_ANNOTATION = "tfop.test/exit-reason"

# Paths inside the kwok module (sigs.k8s.io/kwok) of the fast stage set.
KWOK_FAST_STAGES = [
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
]

# Rendered by kwok with Go templates; the result is patched into pod status.
_EXIT_STAGE = f"""\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: tfop-test-exit
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.labels["{EXIT_LABEL}"]'
      operator: In
      values: ["true"]
    - key: .metadata.deletionTimestamp
      operator: DoesNotExist
    - key: .status.phase
      operator: In
      values: [Running]
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["{EXIT_DELAY_ANNOTATION}"]'
  next:
    statusTemplate: |
      {{{{ $now := Now | Quote }}}}
      {{{{ $started := or .status.startTime Now | Quote }}}}
      {{{{ $ann := or .metadata.annotations dict }}}}
      {{{{ $code := or (index $ann "{EXIT_CODE_ANNOTATION}") "0" }}}}
      {{{{ $phase := "Succeeded" }}}}
      {{{{ $reason := "Completed" }}}}
      {{{{ if ne $code "0" }}}}{{{{ $phase = "Failed" }}}}{{{{ $reason = "Error" }}}}{{{{ end }}}}
      {{{{ $reason = or (index $ann "{EXIT_REASON_ANNOTATION}") $reason }}}}
      phase: {{{{ $phase }}}}
      conditions:
      - type: Ready
        status: "False"
        reason: PodCompleted
        lastTransitionTime: {{{{ $now }}}}
      - type: ContainersReady
        status: "False"
        reason: PodCompleted
        lastTransitionTime: {{{{ $now }}}}
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - name: {{{{ .name | Quote }}}}
        image: {{{{ .image | Quote }}}}
        ready: false
        started: false
        restartCount: 0
        state:
          terminated:
            exitCode: {{{{ $code }}}}
            reason: {{{{ $reason | Quote }}}}
            startedAt: {{{{ $started }}}}
            finishedAt: {{{{ $now }}}}
      {{{{ end }}}}
"""


def stages_yaml(kwok_src: Path) -> str:
    """All stages as one multi-document YAML for `kwok --config`."""
    docs = [(kwok_src / p).read_text() for p in KWOK_FAST_STAGES]
    docs.append(_EXIT_STAGE)
    return "\n---\n".join(d.strip("\n") for d in docs) + "\n"
