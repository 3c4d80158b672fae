// Command goreconciler is the Go baseline for bench/reconciler_burst.py: the
// design's controller (../shared design card) as controller-runtime's
// scaffolding builds one, with its defaults — one worker, the Pod informer's
// cache for pods, an uncached Node GET per reconcile (mgr.GetAPIReader), the
// three writes originals -> pods/resize -> applied as separate PATCHes, one
// Event per pod through client-go's EventRecorder, the ConfigMap re-read on an
// interval. It exists so that CPU per aligned pod can be measured for Go and
// Python in the same runs on the same cluster; it is not part of the product.
//
// Like the public Go original of this design it trusts annotations as written
// (no HMAC), has no namespace filter and no leader election.
//
// It also counts its own API requests by method and resource
// (bench_rest_client_requests_total), so the bench can print requests per pod
// for both controllers; controller-runtime's own rest_client_requests_total
// has no resource label.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/yaml"
)

const (
	prefix         = "workload-resizer.io/"
	appliedType    = prefix + "applied-instance-type"
	appliedAt      = prefix + "applied-at"
	originalCPU    = prefix + "original-cpu."
	originalMemory = prefix + "original-memory."
)

// ------------------------------------------------------------------ config

type familyPerf struct {
	CPUPerf float64 `json:"cpuPerf"`
	MemPerf float64 `json:"memPerf"`
}

type limits struct {
	Min resource.Quantity `json:"min"`
	Max resource.Quantity `json:"max"`
}

type sizingConfig struct {
	BaselineNodeType string                `json:"baselineNodeType"`
	NodeTypes        map[string]familyPerf `json:"nodeTypes"`
	Bounds           struct {
		CPU    limits `json:"cpu"`
		Memory limits `json:"memory"`
	} `json:"bounds"`
}

// configPoller re-reads the ConfigMap every interval and keeps the last good config.
type configPoller struct {
	reader          client.Reader
	namespace, name string
	interval        time.Duration
	current         atomic.Pointer[sizingConfig]
}

func (p *configPoller) load(ctx context.Context) error {
	var cm corev1.ConfigMap
	if err := p.reader.Get(ctx, types.NamespacedName{Namespace: p.namespace, Name: p.name}, &cm); err != nil {
		return err
	}
	var cfg sizingConfig
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		return err
	}
	if _, ok := cfg.NodeTypes[cfg.BaselineNodeType]; !ok {
		return fmt.Errorf("baseline %q is not among nodeTypes", cfg.BaselineNodeType)
	}
	p.current.Store(&cfg)
	return nil
}

func (p *configPoller) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("config")
	for {
		if err := p.load(ctx); err != nil {
			log.Error(err, "config not loaded, keeping the last good one")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(p.interval):
		}
	}
}

// ------------------------------------------------------------------ sizing

// resourcePlan is one resource (cpu or memory) of one container.
type resourcePlan struct {
	resource   corev1.ResourceName
	annotation string            // where its original is kept
	original   resource.Quantity // the annotation if present, else the spec's request
	want       resource.Quantity // original x ratio, within bounds
	mirror     bool              // a limit was set: keep it equal (QoS must not change)
}

type containerPlan struct {
	name      string
	resources []resourcePlan
}

func scaled(q resource.Quantity, ratio float64, milli bool, b limits) resource.Quantity {
	var out *resource.Quantity
	if milli {
		out = resource.NewMilliQuantity(int64(math.Round(float64(q.MilliValue())*ratio)), resource.DecimalSI)
	} else {
		out = resource.NewQuantity(int64(math.Round(float64(q.Value())*ratio)), resource.BinarySI)
	}
	if !b.Min.IsZero() && out.Cmp(b.Min) < 0 {
		return b.Min.DeepCopy()
	}
	if !b.Max.IsZero() && out.Cmp(b.Max) > 0 {
		return b.Max.DeepCopy()
	}
	return *out
}

// baselineOf is the container's original request: the annotation if present, else the spec.
func baselineOf(pod *corev1.Pod, key string, spec corev1.ResourceList, name corev1.ResourceName) *resource.Quantity {
	if raw, ok := pod.Annotations[key]; ok {
		if q, err := resource.ParseQuantity(raw); err == nil {
			return &q
		}
	}
	if q, ok := spec[name]; ok {
		return &q
	}
	return nil
}

func plan(pod *corev1.Pod, cfg *sizingConfig, family familyPerf) []containerPlan {
	base := cfg.NodeTypes[cfg.BaselineNodeType]
	kinds := []struct {
		name       corev1.ResourceName
		annotation string
		ratio      float64
		milli      bool
		bounds     limits
	}{
		{corev1.ResourceCPU, originalCPU, base.CPUPerf / family.CPUPerf, true, cfg.Bounds.CPU},
		{corev1.ResourceMemory, originalMemory, base.MemPerf / family.MemPerf, false, cfg.Bounds.Memory},
	}
	var plans []containerPlan
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		p := containerPlan{name: c.Name}
		for _, k := range kinds {
			original := baselineOf(pod, k.annotation+c.Name, c.Resources.Requests, k.name)
			if original == nil {
				continue
			}
			_, mirror := c.Resources.Limits[k.name]
			p.resources = append(p.resources, resourcePlan{resource: k.name, annotation: k.annotation + c.Name,
				original: *original, want: scaled(*original, k.ratio, k.milli, k.bounds), mirror: mirror})
		}
		if len(p.resources) > 0 {
			plans = append(plans, p)
		}
	}
	return plans
}

// ------------------------------------------------------------------ controller

type podResizer struct {
	client.Client
	apiReader client.Reader
	recorder  record.EventRecorder
	config    *configPoller
	label     string
}

// controllerOwned: the pod has a controller of a kind the design sizes.
func controllerOwned(pod *corev1.Pod) bool {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return false
	}
	switch ref.Kind {
	case "ReplicaSet", "StatefulSet", "DaemonSet", "Job":
		return true
	}
	return false
}

func mergePatch(annotations map[string]string) client.Patch {
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	return client.RawPatch(types.MergePatchType, body)
}

func (r *podResizer) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pod corev1.Pod
	if err := r.Get(ctx, req.NamespacedName, &pod); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pod.Spec.NodeName == "" || !controllerOwned(&pod) {
		return ctrl.Result{}, nil
	}
	cfg := r.config.current.Load()
	if cfg == nil {
		return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
	}
	var node corev1.Node
	if err := r.apiReader.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, &node); err != nil {
		return ctrl.Result{}, fmt.Errorf("node %s: %w", pod.Spec.NodeName, err)
	}
	family := node.Labels[r.label]
	if family == "" || pod.Annotations[appliedType] == family {
		return ctrl.Result{}, nil
	}
	perf, known := cfg.NodeTypes[family]
	if !known {
		r.recorder.Eventf(&pod, corev1.EventTypeWarning, "UnknownNodeType", "machine family %q is not configured", family)
		return ctrl.Result{}, nil
	}
	plans := plan(&pod, cfg, perf)
	if len(plans) == 0 {
		return ctrl.Result{}, nil
	}

	// 1. originals first, so a crash before step 3 re-derives the same target.
	missing := map[string]string{}
	for _, p := range plans {
		for _, r := range p.resources {
			if _, ok := pod.Annotations[r.annotation]; !ok {
				missing[r.annotation] = r.original.String()
			}
		}
	}
	if len(missing) > 0 {
		if err := r.Patch(ctx, &pod, mergePatch(missing)); err != nil {
			return ctrl.Result{}, fmt.Errorf("originals: %w", err)
		}
	}

	// 2. the resize, if any container differs.
	if body := resizeBody(&pod, plans); body != nil {
		patch := client.RawPatch(types.StrategicMergePatchType, body)
		if err := r.SubResource("resize").Patch(ctx, &pod, patch); err != nil {
			r.recorder.Eventf(&pod, corev1.EventTypeWarning, "ResizeFailed", "in-place resize failed: %v", err)
			if strings.Contains(err.Error(), "without support for resize") {
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, err
		}
		r.recorder.Eventf(&pod, corev1.EventTypeNormal, "Resized", "resized for machine family %q (baseline %q)",
			family, cfg.BaselineNodeType)
	} else {
		r.recorder.Eventf(&pod, corev1.EventTypeNormal, "AlreadyAligned", "requests already fit machine family %q", family)
	}

	// 3. what the pod is sized for.
	err := r.Patch(ctx, &pod, mergePatch(map[string]string{
		appliedType: family, appliedAt: time.Now().UTC().Format(time.RFC3339)}))
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("applied: %w", err)
	}
	ctrllog.FromContext(ctx).V(1).Info("reconciled", "family", family)
	return ctrl.Result{}, nil
}

func resizeBody(pod *corev1.Pod, plans []containerPlan) []byte {
	var containers []map[string]any
	changed := false
	for _, p := range plans {
		var current corev1.ResourceList
		for i := range pod.Spec.Containers {
			if pod.Spec.Containers[i].Name == p.name {
				current = pod.Spec.Containers[i].Resources.Requests
			}
		}
		requests, lims := map[string]string{}, map[string]string{}
		for _, r := range p.resources {
			if cur, ok := current[r.resource]; !ok || cur.Cmp(r.want) != 0 {
				changed = true
			}
			requests[string(r.resource)] = r.want.String()
			if r.mirror {
				lims[string(r.resource)] = r.want.String()
			}
		}
		res := map[string]any{"requests": requests}
		if len(lims) > 0 {
			res["limits"] = lims
		}
		containers = append(containers, map[string]any{"name": p.name, "resources": res})
	}
	if !changed {
		return nil
	}
	body, _ := json.Marshal(map[string]any{"spec": map[string]any{"containers": containers}})
	return body
}

func needsWork(pod *corev1.Pod) bool {
	return pod != nil && pod.Spec.NodeName != "" && controllerOwned(pod) && pod.Annotations[appliedType] == ""
}

func podFilter() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { p, _ := e.Object.(*corev1.Pod); return needsWork(p) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			before, _ := e.ObjectOld.(*corev1.Pod)
			after, _ := e.ObjectNew.(*corev1.Pod)
			if needsWork(after) {
				return true
			}
			return before != nil && after != nil && after.Spec.NodeName != "" &&
				before.Spec.NodeName != after.Spec.NodeName && controllerOwned(after)
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// ------------------------------------------------------------------ request counting

var requestsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "bench_rest_client_requests_total",
	Help: "API requests sent, by method and resource (pods, pods/resize, nodes, events, ...).",
}, []string{"method", "resource"})

// resourceOf maps /api/v1/namespaces/ns/pods/name/resize to "pods/resize".
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "other"
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return "namespaces"
	case 1, 2:
		return parts[0]
	default:
		return parts[0] + "/" + parts[2]
	}
}

type countingTransport struct{ next http.RoundTripper }

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	requestsTotal.WithLabelValues(req.Method, resourceOf(req.URL.Path)).Inc()
	return t.next.RoundTrip(req)
}

// ------------------------------------------------------------------ main

func main() {
	var metricsAddr, probeAddr, configNamespace, configName, label string
	var interval time.Duration
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "metrics address (HTTP), 0 to disable")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "health probe address")
	flag.StringVar(&configNamespace, "config-namespace", "workload-resizer-system", "namespace of the ConfigMap")
	flag.StringVar(&configName, "config-name", "workload-resizer-config", "name of the ConfigMap")
	flag.DurationVar(&interval, "config-refresh-interval", 30*time.Second, "how often to re-read the ConfigMap")
	flag.StringVar(&label, "node-type-label", "cloud.google.com/machine-family", "node label naming the machine family")
	opts := zap.Options{Development: true}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	restConfig, err := ctrl.GetConfig() // --kubeconfig is controller-runtime's own flag
	if err != nil {
		log.Error(err, "no kubeconfig")
		os.Exit(1)
	}
	restConfig.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt} })
	crmetrics.Registry.MustRegister(requestsTotal)

	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
	})
	if err != nil {
		log.Error(err, "manager")
		os.Exit(1)
	}
	poller := &configPoller{reader: mgr.GetAPIReader(), namespace: configNamespace, name: configName, interval: interval}
	if err := mgr.Add(poller); err != nil {
		log.Error(err, "config poller")
		os.Exit(1)
	}
	r := &podResizer{Client: mgr.GetClient(), apiReader: mgr.GetAPIReader(), config: poller, label: label,
		recorder: mgr.GetEventRecorderFor("workload-resizer")} //nolint:staticcheck
	err = ctrl.NewControllerManagedBy(mgr).Named("pod-resizer").
		For(&corev1.Pod{}, builder.WithPredicates(podFilter())).Complete(r)
	if err != nil {
		log.Error(err, "controller")
		os.Exit(1)
	}
	_ = mgr.AddHealthzCheck("healthz", healthz.Ping)
	_ = mgr.AddReadyzCheck("readyz", healthz.Ping)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
