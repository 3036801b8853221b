// Pinned Volcano scheduler and webhook-manager, built by e2e/build.py.
// volcano's go.mod replaces volcano.sh/apis with a local staging dir; pin the
// published apis module instead. k8s.io/* shares the versions of
// ../kubernetes; the other replaces mirror upstream's own pins.
module tfop.local/e2e/components/volcano

go 1.24.0

godebug default=go1.24

tool volcano.sh/volcano/cmd/scheduler

tool volcano.sh/volcano/cmd/webhook-manager

require (
	cel.dev/expr v0.24.0 // indirect
	github.com/antlr4-go/antlr/v4 v4.13.0 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/blang/semver/v4 v4.0.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/davecgh/go-spew v1.1.2-0.20180830191138-d8f796af33cc // indirect
	github.com/distribution/reference v0.6.0 // indirect
	github.com/elastic/go-elasticsearch/v7 v7.17.7 // indirect
	github.com/emicklei/go-restful/v3 v3.12.2 // indirect
	github.com/fsnotify/fsnotify v1.9.0 // indirect
	github.com/fxamacker/cbor/v2 v2.9.0 // indirect
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/go-openapi/jsonpointer v0.21.1 // indirect
	github.com/go-openapi/jsonreference v0.21.0 // indirect
	github.com/go-openapi/swag v0.23.1 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/google/cadvisor v0.52.1 // indirect
	github.com/google/cel-go v0.26.0 // indirect
	github.com/google/gnostic-models v0.7.0 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/errwrap v1.1.0 // indirect
	github.com/hashicorp/go-multierror v1.1.1 // indirect
	github.com/imdario/mergo v0.3.16 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/josharian/intern v1.0.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/mailru/easyjson v0.9.0 // indirect
	github.com/mitchellh/mapstructure v1.5.0 // indirect
	github.com/moby/sys/mountinfo v0.7.2 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.3-0.20250322232337-35a7c28c31ee // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/selinux v1.11.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/pmezard/go-difflib v1.0.1-0.20181226105442-5d4384ee4fb2 // indirect
	github.com/prometheus/client_golang v1.22.0 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.64.0 // indirect
	github.com/prometheus/procfs v0.16.1 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	github.com/spf13/cobra v1.9.1 // indirect
	github.com/spf13/pflag v1.0.6 // indirect
	github.com/stoewer/go-strcase v1.3.0 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	go.opentelemetry.io/otel v1.41.0 // indirect
	go.opentelemetry.io/otel/trace v1.41.0 // indirect
	go.uber.org/automaxprocs v1.6.0 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	go.yaml.in/yaml/v3 v3.0.4 // indirect
	golang.org/x/crypto v0.39.0 // indirect
	golang.org/x/exp v0.0.0-20240719175910-8a7402abbf56 // indirect
	golang.org/x/net v0.41.0 // indirect
	golang.org/x/oauth2 v0.30.0 // indirect
	golang.org/x/sync v0.15.0 // indirect
	golang.org/x/sys v0.33.0 // indirect
	golang.org/x/term v0.32.0 // indirect
	golang.org/x/text v0.26.0 // indirect
	golang.org/x/time v0.11.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20250303144028-a0af3efb3deb // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250303144028-a0af3efb3deb // indirect
	google.golang.org/grpc v1.72.1 // indirect
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af // indirect
	gopkg.in/evanphx/json-patch.v4 v4.12.0 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	gopkg.in/yaml.v2 v2.4.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
	k8s.io/api v0.34.10 // indirect
	k8s.io/apiextensions-apiserver v0.25.0 // indirect
	k8s.io/apimachinery v0.34.10 // indirect
	k8s.io/apiserver v0.34.10 // indirect
	k8s.io/client-go v0.34.10 // indirect
	k8s.io/cloud-provider v0.0.0 // indirect
	k8s.io/component-base v0.34.10 // indirect
	k8s.io/component-helpers v0.34.10 // indirect
	k8s.io/controller-manager v0.34.10 // indirect
	k8s.io/csi-translation-lib v0.34.1 // indirect
	k8s.io/dynamic-resource-allocation v0.0.0 // indirect
	k8s.io/klog/v2 v2.130.1 // indirect
	k8s.io/kube-openapi v0.0.0-20250710124328-f3f2b991d03b // indirect
	k8s.io/kube-scheduler v0.0.0 // indirect
	k8s.io/kubelet v0.34.10 // indirect
	k8s.io/kubernetes v1.34.1 // indirect
	k8s.io/metrics v0.34.1 // indirect
	k8s.io/mount-utils v0.0.0 // indirect
	k8s.io/utils v0.0.0-20250604170112-4c0f3b243397 // indirect
	sigs.k8s.io/json v0.0.0-20241014173422-cfa47c3a1cc8 // indirect
	sigs.k8s.io/randfill v1.0.0 // indirect
	sigs.k8s.io/structured-merge-diff/v6 v6.3.0 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
	stathat.com/c/consistent v1.0.0 // indirect
	volcano.sh/apis v0.0.0 // indirect
	volcano.sh/volcano v1.14.1 // indirect
)

replace (
	cloud.google.com/go => cloud.google.com/go v0.100.2
	go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc => go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc v1.19.0
	google.golang.org/grpc => google.golang.org/grpc v1.64.0
	k8s.io/api => k8s.io/api v0.34.10
	k8s.io/apiextensions-apiserver => k8s.io/apiextensions-apiserver v0.34.10
	k8s.io/apimachinery => k8s.io/apimachinery v0.34.10
	k8s.io/apiserver => k8s.io/apiserver v0.34.10
	k8s.io/cli-runtime => k8s.io/cli-runtime v0.34.10
	k8s.io/client-go => k8s.io/client-go v0.34.10
	k8s.io/cloud-provider => k8s.io/cloud-provider v0.34.10
	k8s.io/cluster-bootstrap => k8s.io/cluster-bootstrap v0.34.10
	k8s.io/code-generator => k8s.io/code-generator v0.34.10
	k8s.io/component-base => k8s.io/component-base v0.34.10
	k8s.io/component-helpers => k8s.io/component-helpers v0.34.10
	k8s.io/controller-manager => k8s.io/controller-manager v0.34.10
	k8s.io/cri-api => k8s.io/cri-api v0.34.10
	k8s.io/cri-client => k8s.io/cri-client v0.34.10
	k8s.io/csi-translation-lib => k8s.io/csi-translation-lib v0.34.10
	k8s.io/dynamic-resource-allocation => k8s.io/dynamic-resource-allocation v0.34.10
	k8s.io/endpointslice => k8s.io/endpointslice v0.34.10
	k8s.io/externaljwt => k8s.io/externaljwt v0.34.10
	k8s.io/kms => k8s.io/kms v0.34.10
	k8s.io/kube-aggregator => k8s.io/kube-aggregator v0.34.10
	k8s.io/kube-controller-manager => k8s.io/kube-controller-manager v0.34.10
	k8s.io/kube-proxy => k8s.io/kube-proxy v0.34.10
	k8s.io/kube-scheduler => k8s.io/kube-scheduler v0.34.10
	k8s.io/kubectl => k8s.io/kubectl v0.34.10
	k8s.io/kubelet => k8s.io/kubelet v0.34.10
	k8s.io/kubernetes => k8s.io/kubernetes v1.34.10
	k8s.io/metrics => k8s.io/metrics v0.34.10
	k8s.io/mount-utils => k8s.io/mount-utils v0.34.10
	k8s.io/pod-security-admission => k8s.io/pod-security-admission v0.34.10
	k8s.io/sample-apiserver => k8s.io/sample-apiserver v0.34.10
	k8s.io/sample-cli-plugin => k8s.io/sample-cli-plugin v0.34.10
	k8s.io/sample-controller => k8s.io/sample-controller v0.34.10
	volcano.sh/apis => volcano.sh/apis v1.14.0
)
