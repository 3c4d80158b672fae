# jq (gojq) definitions for the resize-capable fake kubelet's feasibility check,
# evaluated by KWOK on a Pod. hack/cluster appends a call such as
#   resize_feasible({"node-a": {"cpu": "8", "memory": "32Gi"}})
# with the allocatable of every resize-capable KWOK node baked in.
#
# Like the 1.35 kubelet (allocation manager canResizePod), a resize is infeasible
# when the pod's requests, computed as k8s.io/component-helpers resource.PodRequests
# does, exceed the node's allocatable cpu or memory.

# A quantity as the API server serialises it (canonical: integer mantissa and a
# suffix; never a decimal point) -> exact integer number of nano-units.
def quantity:
  capture("^(?<n>[0-9]+)(?<s>[numkMGTPE]?|[KMGTPE]i|[eE][+-]?[0-9]+)$") as $m
  | ($m.n | tonumber) as $n
  | if ($m.s | test("^[eE][+-]?[0-9]")) then
      ($m.s[1:] | ltrimstr("+") | tonumber + 9) as $e
      | if $e < 0 then error("quantity below 1n") else $n * (reduce range($e) as $_ (1; . * 10)) end
    else
      $n * {"": 1000000000, n: 1, u: 1000, m: 1000000, k: 1000000000000, M: 1000000000000000,
            G: 1000000000000000000, T: 1000000000000000000000, P: 1000000000000000000000000,
            E: 1000000000000000000000000000, Ki: 1024000000000, Mi: 1048576000000000,
            Gi: 1073741824000000000, Ti: 1099511627776000000000,
            Pi: 1125899906842624000000000, Ei: 1152921504606846976000000000}[$m.s]
    end;

def container_request($r): (.resources.requests // {})[$r] // "0" | quantity;

# Pod-level requests if set; else max(sum of containers + sidecars, each init
# container + the sidecars started before it); plus the pod overhead.
def pod_request($r):
  if (.spec.resources.requests // {})[$r] then .spec.resources.requests[$r] | quantity
  else
    (reduce (.spec.initContainers // [])[] as $c ({sidecars: 0, init: 0};
       ($c | container_request($r)) as $q
       | if $c.restartPolicy == "Always" then .sidecars += $q
         else .init = ([.init, .sidecars + $q] | max) end)) as $i
    | [([.spec.containers[] | container_request($r)] | add // 0) + $i.sidecars, $i.init] | max
  end
  + ((.spec.overhead // {})[$r] // "0" | quantity);

def fits($allocatable):
  pod_request("cpu") <= ($allocatable.cpu | quantity)
  and pod_request("memory") <= ($allocatable.memory | quantity);

# true when the pod's node is not in the table (nothing known: never infeasible).
def resize_feasible($allocatable_by_node):
  $allocatable_by_node[.spec.nodeName] as $a | $a == null or fits($a);

# ---------------------------------------------------------------- fake kubelets that say no
# What the fake kubelet does with a resize (spec resources != running resources), by the
# value of its node's label fake-kubelet.workload-resizer.io/resize-outcome (hack/cluster
# appends the {node: value} table), modelled on the 1.35+ kubelet (allocation manager
# canResizePod, kuberuntime resize):
#   (no label)          "actuate", or "infeasible-capacity" beyond the node's allocatable
#   cpu-manager-static  Guaranteed pods: "infeasible-static" ("Resize is infeasible for
#                       Guaranteed Pods alongside CPU Manager static policy"); others actuate
#   deferred            "deferred" (PodResizePending Deferred: the node is full right now)
#   error               "error" (allocated, but the runtime fails: PodResizeInProgress Error)
# A deferred or failing resize is released ("actuate") once the pod carries the annotation
# fake-kubelet.workload-resizer.io/resize-unblocked: the trigger a test uses for "capacity
# was freed" or "usage dropped", which is when a real kubelet's retry succeeds.

def guaranteed:
  [.spec.containers[] | (.resources.limits // {}) as $l | (.resources.requests // $l) as $r
   | $l.cpu != null and $l.memory != null and ($r.cpu // $l.cpu) == $l.cpu and ($r.memory // $l.memory) == $l.memory]
  | all;

def released: (.metadata.annotations // {})["fake-kubelet.workload-resizer.io/resize-unblocked"] != null;

def resize_outcome($allocatable_by_node; $outcome_by_node):
  ($outcome_by_node[.spec.nodeName] // "") as $mode
  | if (resize_feasible($allocatable_by_node) | not) then "infeasible-capacity"
    elif $mode == "cpu-manager-static" and guaranteed then "infeasible-static"
    elif $mode == "deferred" and (released | not) then "deferred"
    elif $mode == "error" and (released | not) then "error"
    else "actuate" end;
