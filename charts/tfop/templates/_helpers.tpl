{{/*
Every object is named `tfop` and labelled as `tfop manifests` labels it, so `helm template` and
`tfop manifests` render the same objects: the Roles with tfop/tools/deploy/rbac.py LABELS, the
ServiceAccount, ClusterRole(Binding) and Deployment with the operator's component too (the
templates/deploy/*.yaml.j2 `labels`). No Helm labels are added.
*/}}
{{- define "tfop.labels" -}}
app.kubernetes.io/name: tfop
app.kubernetes.io/part-of: tfop
{{- end }}

{{- define "tfop.selector" -}}
app.kubernetes.io/name: tfop
app.kubernetes.io/component: operator
{{- end }}

{{- define "tfop.operatorLabels" -}}
{{ include "tfop.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "tfop.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* "true" when gang scheduling is on: enabled, or a backend named (as `tfop run` reads its flags). */}}
{{- define "tfop.gangEnabled" -}}
{{- if or .Values.gang.enabled .Values.gang.schedulerName }}true{{ end }}
{{- end }}

{{/*
What each gang backend needs beyond the base rules (tfop/gang/backends/*.py rbac_rules and
tfop/tools/deploy/rbac.py crd_rules): the CRD reads at start, and its group objects.
*/}}
{{- define "tfop.backends" -}}
volcano: {crdVerbs: [get, list], groupObjects: {apiGroup: scheduling.volcano.sh, resource: podgroups}, queues: {apiGroup: scheduling.volcano.sh, resource: queues}}
scheduler-plugins: {crdVerbs: [get, list], groupObjects: {apiGroup: scheduling.x-k8s.io, resource: podgroups}}
kube-batch: {crdVerbs: [get, list], groupObjects: {apiGroup: scheduling.incubator.k8s.io, resource: podgroups}}
kube-arbitrator: {crdVerbs: [], groupObjects: {apiGroup: policy, resource: poddisruptionbudgets}}
koordinator: {crdVerbs: [list]}
coscheduling: {crdVerbs: []}
yunikorn: {crdVerbs: []}
kubernetes: {crdVerbs: [], groupObjects: {apiGroup: scheduling.k8s.io, resource: podgroups}}
{{- end }}

{{/* The backend gang.schedulerName selects: volcano when empty, an alias resolved, any other name scheduler-plugins. */}}
{{- define "tfop.backend" -}}
{{- $name := .Values.gang.schedulerName | default "volcano" -}}
{{- if eq $name "auto" -}}
{{- fail "gang.schedulerName=auto picks the backend from the CRDs installed in a cluster, and a template has none to look at: name the backend (one of: coscheduling, koordinator, kube-arbitrator, kube-batch, kubernetes, scheduler-plugins, volcano, yunikorn)" -}}
{{- end -}}
{{- if eq $name "pdb" }}{{ $name = "kube-arbitrator" }}{{ end -}}
{{- if hasKey (include "tfop.backends" . | fromYaml) $name }}{{ $name }}{{ else }}scheduler-plugins{{ end -}}
{{- end }}

{{/*
The operator's rules as YAML {base, group, cluster} (tfop/tools/deploy/rbac.py operator_rules, split by
scope): base and group are namespaced (TFJobs, pods, services, events; the gang's group objects and
Kueue's Workloads and LocalQueues),
cluster is what a Role cannot grant (PriorityClasses, nodes, CRDs, Volcano's queues). All namespaces: one ClusterRole with
base, cluster, group in that order. watchNamespaces: a Role with base and group in each, and a
ClusterRole with cluster only.
*/}}
{{- define "tfop.rules" -}}
base:
- {apiGroups: [kubeflow.org], resources: [tfjobs], verbs: [delete, list, watch]}
- {apiGroups: [kubeflow.org], resources: [tfjobs/status], verbs: [patch]}
- {apiGroups: [kubeflow.org], resources: [tfjobs/finalizers], verbs: [update]}
- {apiGroups: [""], resources: [pods, services], verbs: [create, delete, get, list, patch, watch]}
- {apiGroups: [""], resources: [events], verbs: [create, patch]}
{{- if include "tfop.gangEnabled" . }}
{{- $backend := get (include "tfop.backends" . | fromYaml) (include "tfop.backend" .) }}
group:
{{- with $backend.groupObjects }}
- {apiGroups: [{{ .apiGroup }}], resources: [{{ .resource }}], verbs: [create, delete, get, list, patch, watch]}
{{- end }}
- {apiGroups: [kueue.x-k8s.io], resources: [workloads, localqueues], verbs: [list, watch]}
cluster:
- {apiGroups: [scheduling.k8s.io], resources: [priorityclasses], verbs: [list, watch]}
- {apiGroups: [""], resources: [nodes], verbs: [list, watch]}
{{- with $backend.crdVerbs }}
- {apiGroups: [apiextensions.k8s.io], resources: [customresourcedefinitions], verbs: {{ toJson . }}}
{{- end }}
{{- with $backend.queues }}
- {apiGroups: [{{ .apiGroup }}], resources: [{{ .resource }}], verbs: [list, watch]}
{{- end }}
{{- else }}
group: []
cluster: []
{{- end }}
{{- end }}

{{/* The container args (tfop/tools/deploy/manifests.py operator_args). */}}
{{- define "tfop.args" -}}
{{- $args := list "run" -}}
{{- if include "tfop.gangEnabled" . -}}
{{- $args = append $args "--enable-gang-scheduling" -}}
{{- with .Values.gang.schedulerName }}{{ $args = concat $args (list "--gang-scheduler-name" .) }}{{ end -}}
{{- end -}}
{{- with .Values.schedulerName }}{{ $args = concat $args (list "--scheduler-name" .) }}{{ end -}}
{{- range uniq .Values.watchNamespaces }}{{ $args = concat $args (list "--namespace" .) }}{{ else }}{{ $args = append $args "--all-namespaces" }}{{ end -}}
{{- if .Values.leaderElection.enabled }}{{ $args = append $args "--leader-elect" }}{{ end -}}
{{- if not .Values.metrics.enabled }}{{ $args = concat $args (list "--metrics-bind-address" "0") }}
{{- else if ne (int .Values.metrics.port) 8080 }}{{ $args = concat $args (list "--metrics-bind-address" (printf ":%d" (int .Values.metrics.port))) }}
{{- end -}}
{{- toJson $args -}}
{{- end }}
