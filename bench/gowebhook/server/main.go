// Command server is the Go baseline for bench/webhook_bench.py: a minimal
// net/http TLS webhook doing the same work as the Python one on the same
// AdmissionReview — decode the review, decide eligibility (controller owner of
// a supported kind, no skip annotation, not a mirror pod), compute the
// workload-resizer.io/original-* annotations from the containers' requests and
// limits, build a JSONPatch (create the map if absent, remove stale
// controller-owned keys, add changed ones), base64 it and echo the uid. One
// JSON log line per decision (log/slog), like the Python webhook, unless
// -log=false. No metrics. HTTP/1.1 only (as the Python server).
package main

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"flag"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"
)

const prefix = "workload-resizer.io/"

type gvk struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Kind     string `json:"kind"`
	Resource string `json:"resource"`
}

type ownerRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Controller *bool  `json:"controller"`
}

type pod struct {
	Metadata struct {
		Name            string             `json:"name"`
		GenerateName    string             `json:"generateName"`
		Namespace       string             `json:"namespace"`
		Annotations     map[string]*string `json:"annotations"`
		OwnerReferences []ownerRef         `json:"ownerReferences"`
	} `json:"metadata"`
	Spec struct {
		Containers []struct {
			Name      string `json:"name"`
			Resources struct {
				Requests map[string]string `json:"requests"`
				Limits   map[string]string `json:"limits"`
			} `json:"resources"`
		} `json:"containers"`
	} `json:"spec"`
}

type review struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID         string `json:"uid"`
		Kind        gvk    `json:"kind"`
		Resource    gvk    `json:"resource"`
		SubResource string `json:"subResource"`
		Namespace   string `json:"namespace"`
		Operation   string `json:"operation"`
		Object      *pod   `json:"object"` // decoded in the same pass as the review
	} `json:"request"`
}

type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

type response struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Response   struct {
		UID       string `json:"uid"`
		Allowed   bool   `json:"allowed"`
		PatchType string `json:"patchType,omitempty"`
		Patch     string `json:"patch,omitempty"`
	} `json:"response"`
}

var supported = map[string]string{"ReplicaSet": "apps", "StatefulSet": "apps", "DaemonSet": "apps", "Job": "batch"}

var escaper = strings.NewReplacer("~", "~0", "/", "~1")

func originals(p *pod) map[string]string {
	out := make(map[string]string, 4*len(p.Spec.Containers))
	for _, c := range p.Spec.Containers {
		for _, r := range [...]string{"cpu", "memory"} {
			if v, ok := c.Resources.Requests[r]; ok {
				out[prefix+"original-"+r+"."+c.Name] = v
			}
			if v, ok := c.Resources.Limits[r]; ok {
				out[prefix+"original-"+r+"-limit."+c.Name] = v
			}
		}
	}
	return out
}

func owned(k string) bool {
	return strings.HasPrefix(k, prefix+"original-") || strings.HasPrefix(k, prefix+"applied-")
}

// decide returns the patch (nil for none), the owner and the reason.
func decide(p *pod) ([]patchOp, string, string, map[string]string) {
	var owner *ownerRef
	for i := range p.Metadata.OwnerReferences {
		if c := p.Metadata.OwnerReferences[i].Controller; c != nil && *c {
			owner = &p.Metadata.OwnerReferences[i]
			break
		}
	}
	ownerStr := ""
	if owner != nil {
		ownerStr = owner.Kind + "/" + owner.Name
	}
	ann := p.Metadata.Annotations
	if _, ok := ann["kubernetes.io/config.mirror"]; ok || (owner != nil && owner.Kind == "Node") {
		return nil, ownerStr, "MirrorPod", nil
	}
	if v := ann[prefix+"skip"]; v != nil && strings.EqualFold(*v, "true") {
		return nil, ownerStr, "SkipAnnotation", nil
	}
	if owner == nil {
		return nil, ownerStr, "NoController", nil
	}
	g, ok := supported[owner.Kind]
	if i := strings.LastIndexByte(owner.APIVersion, '/'); !ok || i < 0 || owner.APIVersion[:i] != g {
		return nil, ownerStr, "UnsupportedOwnerKind", nil
	}
	orig := originals(p)
	var ops []patchOp
	if ann == nil {
		if len(orig) > 0 {
			ops = append(ops, patchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{}})
		}
	} else {
		for k := range ann {
			if _, keep := orig[k]; !keep && owned(k) {
				ops = append(ops, patchOp{Op: "remove", Path: "/metadata/annotations/" + escaper.Replace(k)})
			}
		}
	}
	for k, v := range orig {
		if cur, ok := ann[k]; !ok || cur == nil || *cur != v {
			ops = append(ops, patchOp{Op: "add", Path: "/metadata/annotations/" + escaper.Replace(k), Value: v})
		}
	}
	return ops, ownerStr, "Eligible", orig
}

func badRequest(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	b, _ := json.Marshal(map[string]any{"error": msg, "code": code})
	w.Write(b)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8444", "listen address")
	certFile := flag.String("cert", "tls.crt", "PEM certificate")
	keyFile := flag.String("key", "tls.key", "PEM key")
	maxBytes := flag.Int64("max-request-bytes", 4<<20, "largest body accepted")
	logOn := flag.Bool("log", true, "log one JSON line per decision to stderr")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile here (stopped on SIGTERM/SIGINT)")
	flag.Parse()

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
		go func() {
			<-sig
			pprof.StopCPUProfile()
			f.Close()
			os.Exit(0)
		}()
	}

	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	http.HandleFunc("/mutate", func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if r.Method != http.MethodPost {
			badRequest(w, http.StatusMethodNotAllowed, "use POST")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, *maxBytes))
		if err != nil {
			badRequest(w, http.StatusRequestEntityTooLarge, err.Error())
			return
		}
		var rv review
		if err := json.Unmarshal(body, &rv); err != nil {
			badRequest(w, http.StatusBadRequest, "body is not a valid AdmissionReview: "+err.Error())
			return
		}
		if rv.APIVersion != "admission.k8s.io/v1" || rv.Kind != "AdmissionReview" || rv.Request == nil || rv.Request.UID == "" {
			badRequest(w, http.StatusBadRequest, "not an admission.k8s.io/v1 AdmissionReview with a request uid")
			return
		}
		req := rv.Request
		var out response
		out.APIVersion, out.Kind = "admission.k8s.io/v1", "AdmissionReview"
		out.Response.UID, out.Response.Allowed = req.UID, true
		decision, reason, owner, name := "skipped", "NotPodCreate", "", ""
		var orig map[string]string
		if req.Operation == "CREATE" && req.Resource.Resource == "pods" && req.Resource.Group == "" && req.SubResource == "" {
			if req.Object == nil {
				badRequest(w, http.StatusBadRequest, "CREATE request has no object")
				return
			}
			p := req.Object
			name = p.Metadata.Name
			if name == "" {
				name = p.Metadata.GenerateName
			}
			var ops []patchOp
			ops, owner, reason, orig = decide(p)
			if len(ops) > 0 {
				patch, _ := json.Marshal(ops)
				out.Response.PatchType = "JSONPatch"
				out.Response.Patch = base64.StdEncoding.EncodeToString(patch)
				decision = "patched"
			} else if reason == "Eligible" {
				reason = "AlreadyStamped"
			}
		}
		b, _ := json.Marshal(&out)
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
		if *logOn {
			logger.Info("admission decision", "pod", name, "namespace", req.Namespace, "owner", owner,
				"decision", decision, "reason", reason, "originals", orig, "uid", req.UID,
				"duration_ms", float64(time.Since(start).Microseconds())/1000)
		}
	})
	srv := &http.Server{
		Addr:         *addr,
		TLSConfig:    &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}},
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}, // HTTP/1.1 only
		IdleTimeout:  120 * time.Second,
		ErrorLog:     log.New(io.Discard, "", 0),
	}
	log.Printf("listening on https://%s", *addr)
	log.Fatal(srv.ListenAndServeTLS(*certFile, *keyFile))
}
