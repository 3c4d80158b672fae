"""The Helm chart (chart/): lint, render, schema, the real apiserver, and its RBAC for real.

helm is the pinned one from `hack/tools build helm` (built once, minutes the first time,
then cached in ~/.cache/workload-resizer). Nothing here installs a webhook configuration
or a workload into the shared cluster: the rendered objects are checked with server-side
dry-run (?dryRun=All&fieldValidation=Strict); only the RBAC objects (ServiceAccounts,
Roles, bindings) and the ConfigMap are created, in a test namespace, and then exercised
as the reconciler's and the webhook's ServiceAccounts with TokenRequest tokens.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from app.__main__ import build_parser as webhook_parser
from commands.cli import parse as commands_parse
from devkit.chart import CERT_MANAGER_KINDS, ensure_helm, find, find_all, lint, render, template
from devkit.chart_variants import CUSTOM, VARIANTS, provided_certs, values_for
from devkit.kube import ApiError, Kube, collection_path, wait_for
from devkit.processes import Webhook
from devkit.progress import run_visible
from devkit.rbac import chart_names, install_rbac, kubeconfig_for_token, uninstall_rbac
from reconciler.options import build_parser as reconciler_parser
from reconciler.options import parse as reconciler_parse
from reconciler.settings import SelftestSettings
from resizer.config import load_config

REPO = Path(__file__).resolve().parents[2]
NS = "workload-resizer-system"
CERT_MANAGER_RUN = REPO / "hack" / "certmanager" / "run"

# The first test of a fresh machine builds helm (a few minutes on 2 cores).
pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="session")
def helm() -> str:
    return ensure_helm()


def container(doc: dict[str, Any]) -> dict[str, Any]:
    (c,) = doc["spec"]["template"]["spec"]["containers"]
    return c


def flags(args: list[str]) -> set[str]:
    return {a.split("=", 1)[0] for a in args if a.startswith("--")}


def parser_flags(parser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings if o.startswith("--")} - {"--help"}


# --------------------------------------------------------------------------- lint and render


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_helm_lint(helm: str, variant: str) -> None:
    proc = lint(helm, values=values_for(variant))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[ERROR]" not in proc.stdout and "[WARNING]" not in proc.stdout, proc.stdout


def test_default_render(helm: str) -> None:
    docs = render(helm, namespace=NS)
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    assert kinds == sorted(
        [
            ("ServiceAccount", "workload-resizer-webhook"),
            ("ServiceAccount", "workload-resizer-reconciler"),
            ("ConfigMap", "workload-resizer-config"),
            ("ClusterRole", "workload-resizer-reconciler"),
            ("ClusterRoleBinding", "workload-resizer-reconciler"),
            ("Role", "workload-resizer-reconciler"),
            ("RoleBinding", "workload-resizer-reconciler"),
            # Sizing at admission (webhook.sizeAtAdmission): read node labels, LimitRanges, the config.
            ("ClusterRole", "workload-resizer-webhook"),
            ("ClusterRoleBinding", "workload-resizer-webhook"),
            ("Role", "workload-resizer-webhook"),
            ("RoleBinding", "workload-resizer-webhook"),
            ("Service", "workload-resizer-webhook"),
            ("Deployment", "workload-resizer-webhook"),
            ("Deployment", "workload-resizer-reconciler"),
            ("PodDisruptionBudget", "workload-resizer-webhook"),
            ("PodDisruptionBudget", "workload-resizer-reconciler"),
            ("MutatingWebhookConfiguration", "workload-resizer"),
            ("Issuer", "workload-resizer-selfsigned"),
            ("Certificate", "workload-resizer-ca"),
            ("Issuer", "workload-resizer-ca"),
            ("Certificate", "workload-resizer-webhook"),
            ("ValidatingAdmissionPolicy", "workload-resizer-reconciler-confined"),
            ("ValidatingAdmissionPolicyBinding", "workload-resizer-reconciler-confined"),
            ("ValidatingAdmissionPolicy", "workload-resizer-annotations-protected"),
            ("ValidatingAdmissionPolicyBinding", "workload-resizer-annotations-protected"),
            ("NetworkPolicy", "workload-resizer-webhook"),
            ("NetworkPolicy", "workload-resizer-reconciler"),
        ]
    )
    for doc in docs:
        if doc["kind"] not in (
            "ClusterRole",
            "ClusterRoleBinding",
            "MutatingWebhookConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ):
            assert doc["metadata"]["namespace"] == NS, doc["metadata"]

    # The config: the design's sample, accepted by the reconciler's own parser.
    cm = find(docs, "ConfigMap")
    config = load_config(cm["data"]["config.yaml"])
    assert yaml.safe_load(cm["data"]["config.yaml"]) == {
        "baselineNodeType": "n2d",
        "nodeTypes": {
            "n2d": {"cpuPerf": 1, "memPerf": 1},
            "n4": {"cpuPerf": 1.25, "memPerf": 1},
            "c3": {"cpuPerf": 1.3, "memPerf": 1},
        },
        "bounds": {"cpu": {"min": "50m", "max": "16"}, "memory": {"min": "64Mi", "max": "32Gi"}},
        "memoryLimitDecrease": "Never",
    }
    assert config.baseline_node_type == "n2d"

    # The webhook: 2 replicas, PDB minAvailable 1, preferred anti-affinity on hostname, Service 443 -> 8443.
    webhook = find(docs, "Deployment", "workload-resizer-webhook")
    assert webhook["spec"]["replicas"] == 2
    assert find(docs, "PodDisruptionBudget", "workload-resizer-webhook")["spec"]["minAvailable"] == 1
    pod = webhook["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == webhook["spec"]["selector"]["matchLabels"]
    # The token is mounted for sizing at admission only (nodes, LimitRanges, VPAs and the config ConfigMap,
    # read only).
    assert pod["automountServiceAccountToken"] is True
    assert {"--size-at-admission=true", "--skip-vpa-managed=true"} <= set(container(webhook)["args"])
    assert find(docs, "ServiceAccount", "workload-resizer-webhook")["automountServiceAccountToken"] is False
    assert find(docs, "ClusterRole", "workload-resizer-webhook")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes", "limitranges"], "verbs": ["list", "watch"]},
        {"apiGroups": ["autoscaling.k8s.io"], "resources": ["verticalpodautoscalers"], "verbs": ["list", "watch"]},
    ]
    service = find(docs, "Service")
    (port,) = service["spec"]["ports"]
    assert port["port"] == 443 and port["targetPort"] == "https"
    assert service["spec"]["selector"] == webhook["spec"]["selector"]["matchLabels"]
    (cport,) = container(webhook)["ports"]
    assert cport == {"name": "https", "containerPort": 8443, "protocol": "TCP"}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container(webhook)[probe]["httpGet"] == {"path": path, "port": "https", "scheme": "HTTPS"}
    mounts = {m["mountPath"]: m for m in container(webhook)["volumeMounts"]}
    tls_volume = next(v for v in pod["volumes"] if v["name"] == mounts["/etc/workload-resizer/tls"]["name"])
    assert tls_volume["secret"]["secretName"] == "workload-resizer-webhook-tls"
    # No key in any render: the reconciler creates the Secret, the webhook mounts it optional.
    keys_volume = next(v for v in pod["volumes"] if v["name"] == mounts["/etc/workload-resizer/originals-keys"]["name"])
    assert keys_volume["secret"]["secretName"] == "workload-resizer-originals-keys"
    assert keys_volume["secret"]["optional"] is True
    assert "--originals-keys-optional" in container(webhook)["args"]

    # The reconciler: 2 replicas, leader election, probes on the probe port.
    reconciler = find(docs, "Deployment", "workload-resizer-reconciler")
    assert reconciler["spec"]["replicas"] == 2
    args = container(reconciler)["args"]
    assert args[0] == "reconciler" and "--leader-elect" in args
    assert "--config-name=workload-resizer-config" in args and f"--config-namespace={NS}" in args
    assert f"--originals-keys-secret={NS}/workload-resizer-originals-keys" in args
    assert not [a for a in args if a.startswith("--originals-key-dir")]
    assert "volumeMounts" not in container(reconciler) or all(
        "originals" not in m["mountPath"] for m in container(reconciler)["volumeMounts"]
    )
    ports = {p["name"]: p["containerPort"] for p in container(reconciler)["ports"]}
    assert ports == {"http-metrics": 8080, "http-probes": 8081}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container(reconciler)[probe]["httpGet"] == {"path": path, "port": "http-probes"}
    assert reconciler["spec"]["template"]["spec"]["serviceAccountName"] == "workload-resizer-reconciler"

    # Hardened pods, skipped by the resizer, with resources.
    for deployment in (webhook, reconciler):
        spec = deployment["spec"]["template"]["spec"]
        assert deployment["spec"]["template"]["metadata"]["annotations"]["workload-resizer.io/skip"] == "true"
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 65532
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        sc = container(deployment)["securityContext"]
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532
        assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        resources = container(deployment)["resources"]
        assert resources["requests"]["cpu"] and resources["requests"]["memory"] and resources["limits"]["memory"]
        assert container(deployment)["image"] == "workload-resizer:0.1.0"
        assert "priorityClassName" not in spec


def test_webhook_configuration_matches_webhook_config_dir(helm: str) -> None:
    """Default values in workload-resizer-system render the same webhook as
    webhook-config/cert-manager.yaml (the chart's labels aside)."""
    docs = render(helm, namespace=NS)
    chart_mwc = find(docs, "MutatingWebhookConfiguration")
    reference = yaml.safe_load((REPO / "webhook-config" / "cert-manager.yaml").read_text())
    assert chart_mwc["metadata"]["name"] == reference["metadata"]["name"] == "workload-resizer"
    assert chart_mwc["metadata"]["annotations"] == reference["metadata"]["annotations"]
    assert chart_mwc["webhooks"] == reference["webhooks"]
    (webhook,) = chart_mwc["webhooks"]
    assert webhook["failurePolicy"] == "Ignore" and webhook["timeoutSeconds"] == 3


# What the chart sets differently from a program's default, on purpose: where it mounts and
# names things in the pod, and that it runs the reconciler as two replicas with a leader.
DEPLOYMENT_SPECIFIC = {
    "webhook": {
        "tls_cert_file",
        "tls_key_file",
        "originals_key_dir",
        "originals_keys_optional",
        "namespace",
        "exclude_namespaces",
    },
    "reconciler": {
        "originals_keys_secret",
        "namespace",
        "exclude_namespaces",
        "leader_elect",
        "leader_election_namespace",
    },
}


def defaults_that_differ(parser, rendered: list[str], required: list[str], program: str) -> dict[str, tuple]:
    """dest -> (chart's value, program's default) for every flag the default render sets
    otherwise than the program would by itself, but the deployment-specific ones."""
    chart, own = vars(parser.parse_args(rendered)), vars(parser.parse_args(required))
    return {
        dest: (chart[dest], own[dest])
        for dest in chart
        if chart[dest] != own[dest] and dest not in DEPLOYMENT_SPECIFIC[program]
    }


def test_every_program_flag_is_settable_and_valid(helm: str) -> None:
    """The rendered args parse with the programs' own parsers, every flag is rendered from
    the structured values (except those that make no sense in a pod), and the chart's
    defaults are the programs' own (one default, whichever way a program is started)."""
    not_from_values = {"--kubeconfig", "--leader-election-identity"}
    # The reconciler's keys: --originals-keys-secret (the default) or, with
    # originalsKeys.existingSecret, --originals-key-dir (the mounted Secret); never both.
    alternative = {"--originals-key-dir"}
    for values in ({}, CUSTOM):
        docs = render(helm, namespace=NS, values=values)
        webhook = [d for d in find_all(docs, "Deployment") if d["metadata"]["name"].endswith("-webhook")][0]
        reconciler = [d for d in find_all(docs, "Deployment") if d["metadata"]["name"].endswith("-reconciler")][0]
        wargs, rargs = container(webhook)["args"], container(reconciler)["args"]
        assert wargs[0] == "app" and rargs[0] == "reconciler"
        mine = render(helm, namespace=NS, values={**values, "originalsKeys": {"existingSecret": "mine"}})
        mine_args = container(
            next(d for d in find_all(mine, "Deployment") if d["metadata"]["name"] == reconciler["metadata"]["name"])
        )["args"]
        assert reconciler_parse(mine_args[1:]).originals_key_dir and "--originals-keys-secret" not in flags(mine_args)
        webhook_parser().parse_args(wargs[1:])
        parsed = reconciler_parse(rargs[1:])
        if values is CUSTOM:
            assert parsed.controller.dry_run and parsed.controller.resize_restart_containers
            assert parsed.api.burst == 1000000
            assert parsed.config_name == "sizing" and parsed.leader_election.name == "resizer-lock"
            assert parsed.api.kubeconfig == "/etc/kube/config"  # extraArgs come last
            assert wargs[-1] == "--log-level=warning"
            assert parser_flags(reconciler_parser()) - flags(rargs) == {"--leader-election-identity"} | alternative
            assert parser_flags(webhook_parser()) - flags(wargs) == {"--kubeconfig"}
        else:
            assert (
                parser_flags(reconciler_parser()) - flags(rargs)
                == not_from_values | {"--dry-run", "--resize-restart-containers"} | alternative
            )
            assert parser_flags(webhook_parser()) - flags(wargs) == {"--kubeconfig", "--dry-run"}
            assert (
                defaults_that_differ(webhook_parser(), wargs[1:], ["--tls-cert-file=c", "--tls-key-file=k"], "webhook")
                == {}
            )
            assert defaults_that_differ(reconciler_parser(), rargs[1:], [], "reconciler") == {}


def test_the_webhook_follows_the_reconcilers_vpa_setting(helm: str) -> None:
    """One value, reconciler.skipVPAManaged, sets both programs' --skip-vpa-managed, whose own
    defaults agree: a pod the reconciler leaves to a VPA is never sized at admission."""
    webhook_default = webhook_parser().parse_args(["--tls-cert-file=c", "--tls-key-file=k"]).skip_vpa_managed
    assert webhook_default is reconciler_parse([]).preflight.skip_vpa_managed is True
    for skip in (True, False):
        docs = render(helm, namespace=NS, values={"reconciler": {"skipVPAManaged": skip}})
        wargs = container(find(docs, "Deployment", "workload-resizer-webhook"))["args"]
        rargs = container(find(docs, "Deployment", "workload-resizer-reconciler"))["args"]
        assert webhook_parser().parse_args(wargs[1:]).skip_vpa_managed is skip
        assert reconciler_parse(rargs[1:]).preflight.skip_vpa_managed is skip


def test_custom_values(helm: str) -> None:
    docs = render(helm, namespace="other", values=CUSTOM)
    webhook = find(docs, "Deployment", "resizer-webhook")
    reconciler = find(docs, "Deployment", "resizer-reconciler")
    assert webhook["spec"]["replicas"] == 3 and reconciler["spec"]["replicas"] == 1
    assert container(webhook)["image"] == "registry.example/workload-resizer:1.2.3"
    assert container(webhook)["imagePullPolicy"] == "Always"
    assert container(webhook)["ports"][0]["containerPort"] == 9443
    assert {
        "--large-review-workers=0",
        "--large-review-timeout=1500ms",
        "--http-read-timeout=750ms",
        "--max-connections=300",
    } <= set(container(webhook)["args"])
    spec = webhook["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert spec["tolerations"][0]["key"] == "dedicated"
    assert webhook["spec"]["template"]["metadata"]["annotations"] == {
        "workload-resizer.io/skip": "true",
        "prometheus.io/scrape": "true",
    }
    assert reconciler["spec"]["template"]["spec"]["affinity"] == CUSTOM["reconciler"]["affinity"]
    assert find(docs, "PodDisruptionBudget", "resizer-webhook")["spec"]["minAvailable"] == "50%"
    assert not [d for d in find_all(docs, "PodDisruptionBudget") if d["metadata"]["name"] == "resizer-reconciler"]
    cm = find(docs, "ConfigMap", "sizing")
    config = load_config(cm["data"]["config.yaml"])
    assert [o.name for o in config.document.overrides] == ["batch"]
    assert set(config.node_types) == {"n4", "e2"}  # replaces the sample, no leftovers
    assert yaml.safe_load(cm["data"]["config.yaml"])["bounds"] == CUSTOM["config"]["bounds"]
    role = find(docs, "Role", "resizer-reconciler")
    assert role["rules"][0]["resourceNames"] == ["sizing"]
    assert role["rules"][-1]["resourceNames"] == ["resizer-lock"]
    mwc = find(docs, "MutatingWebhookConfiguration", "resizer")
    (hook,) = mwc["webhooks"]
    assert hook["failurePolicy"] == "Fail" and hook["timeoutSeconds"] == 5
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "other", "batch", "monitoring"]
    assert hook["clientConfig"]["service"] == {
        "name": "resizer-webhook",
        "namespace": "other",
        "path": "/mutate",
        "port": 443,
    }


def test_webhook_network_policy_admits_any_source_unless_restricted(helm: str) -> None:
    """Default: the webhook's port from anywhere (as before). With apiserverCIDRs (and extra
    peers): only from those, on that port. Egress: open to reach the apiserver while it sizes at
    admission (the default), closed without."""
    policy = find(render(helm, namespace=NS), "NetworkPolicy", "workload-resizer-webhook")
    assert policy["spec"]["ingress"] == [{"ports": [{"port": 8443, "protocol": "TCP"}]}]
    assert policy["spec"]["policyTypes"] == ["Ingress"] and "egress" not in policy["spec"]
    closed = find(
        render(helm, namespace=NS, values={"webhook": {"sizeAtAdmission": False}}),
        "NetworkPolicy",
        "workload-resizer-webhook",
    )
    assert closed["spec"]["policyTypes"] == ["Ingress", "Egress"] and closed["spec"]["egress"] == []
    prometheus = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    docs = render(
        helm,
        namespace=NS,
        values={
            "networkPolicy": {"apiserverCIDRs": ["10.0.0.10/32", "fd00::/64"], "webhookExtraIngressFrom": [prometheus]},
            "webhook": {"port": 9443},
        },
    )
    policy = find(docs, "NetworkPolicy", "workload-resizer-webhook")
    assert policy["spec"]["ingress"] == [
        {
            "ports": [{"port": 9443, "protocol": "TCP"}],
            "from": [{"ipBlock": {"cidr": "10.0.0.10/32"}}, {"ipBlock": {"cidr": "fd00::/64"}}, prometheus],
        }
    ]
    only_peers = render(helm, namespace=NS, values={"networkPolicy": {"webhookExtraIngressFrom": [prometheus]}})
    assert find(only_peers, "NetworkPolicy", "workload-resizer-webhook")["spec"]["ingress"][0]["from"] == [prometheus]


def test_scope_is_set_once_for_both_programs_and_the_webhook_configuration(helm: str) -> None:
    """scope.* renders the same flags into both Deployments, and the webhook configuration's
    namespaceSelector selects exactly the namespaces those flags put in scope."""
    from resizer.scope import namespace_scope

    docs = render(helm, namespace="other", values=CUSTOM)
    deployments = {d["metadata"]["name"].rsplit("-", 1)[1]: container(d)["args"] for d in find_all(docs, "Deployment")}
    scope_flags = {
        name: [a for a in args if a.split("=", 1)[0] in ("--namespace", "--exclude-namespaces", "--namespace-selector")]
        for name, args in deployments.items()
    }
    assert (
        scope_flags["webhook"]
        == scope_flags["reconciler"]
        == [
            "--namespace=other",
            "--exclude-namespaces=kube-system,other,batch,monitoring",
            "--namespace-selector=resize=yes,!workload-resizer.io/exclude,env notin (dev,qa)",
        ]
    )
    parsed = reconciler_parse(deployments["reconciler"][1:])
    scope = parsed.scope
    assert scope == namespace_scope(
        "other", ["batch", "monitoring"], "resize=yes,!workload-resizer.io/exclude,env notin (dev,qa)"
    )
    (hook,) = find(docs, "MutatingWebhookConfiguration")["webhooks"]
    selector = hook["namespaceSelector"]
    for name in ("kube-system", "other", "batch", "monitoring", "shop"):
        for labels in (
            {},
            {"resize": "yes"},
            {"resize": "yes", "env": "dev"},
            {"resize": "yes", "env": "prod"},
            {"resize": "yes", "workload-resizer.io/exclude": "true"},
        ):
            assert scope.includes(name, labels) == apiserver_selects(selector, name, labels), (name, labels)
    assert scope.includes("shop", {"resize": "yes", "env": "prod"})


def apiserver_selects(selector: dict[str, Any], name: str, labels: dict[str, str]) -> bool:
    """A namespaceSelector as the apiserver evaluates it (the name label is always present)."""
    full = {**labels, "kubernetes.io/metadata.name": name}
    if any(full.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, values = e["key"], e.get("values") or []
        ok = {
            "In": full.get(key) in values and key in full,
            "NotIn": not (key in full and full[key] in values),
            "Exists": key in full,
            "DoesNotExist": key not in full,
        }[e["operator"]]
        if not ok:
            return False
    return True


def test_config_values(helm: str) -> None:
    """Bounds are overlaid on the defaults side by side; nodeTypes replace the sample;
    a baseline outside nodeTypes fails the render."""
    docs = render(
        helm,
        set_values=[
            "config.bounds.cpu.max=8",
            "config.baselineNodeType=x",
            "config.nodeTypes.x.cpuPerf=2",
            "config.nodeTypes.x.memPerf=1",
        ],
    )
    text = find(docs, "ConfigMap")["data"]["config.yaml"]
    assert yaml.safe_load(text) == {
        "baselineNodeType": "x",
        "nodeTypes": {"x": {"cpuPerf": 2, "memPerf": 1}},
        "bounds": {"cpu": {"min": "50m", "max": 8}, "memory": {"min": "64Mi", "max": "32Gi"}},
        "memoryLimitDecrease": "Never",
    }
    load_config(text)
    proc = template(helm, set_values=["config.nodeTypes.x.cpuPerf=2", "config.nodeTypes.x.memPerf=1"], check=False)
    assert proc.returncode != 0 and 'config.baselineNodeType "n2d" is not one of config.nodeTypes (x)' in proc.stderr
    sidecars = yaml.safe_load(
        find(render(helm, set_values=["config.sidecars=true"]), "ConfigMap")["data"]["config.yaml"]
    )
    assert sidecars["sidecars"] is True and load_config(yaml.safe_dump(sidecars)).policies.default.sidecars
    docs = render(helm, set_values=["config.create=false"])
    assert not find_all(docs, "ConfigMap")
    assert (
        "--config-name=workload-resizer-config"
        in container(find(docs, "Deployment", "workload-resizer-reconciler"))["args"]
    )


def test_release_namespace(helm: str) -> None:
    docs = render(helm, namespace="platform-addons", release="wr")
    for doc in docs:
        if doc["kind"] not in (
            "ClusterRole",
            "ClusterRoleBinding",
            "MutatingWebhookConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ):
            assert doc["metadata"]["namespace"] == "platform-addons"
    policy = find(docs, "ValidatingAdmissionPolicy", "workload-resizer-reconciler-confined")
    assert (
        "system:serviceaccount:platform-addons:workload-resizer-reconciler"
        in policy["spec"]["matchConditions"][0]["expression"]
    )
    mwc = find(docs, "MutatingWebhookConfiguration")
    assert (
        mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "platform-addons/workload-resizer-webhook"
    )
    (hook,) = mwc["webhooks"]
    assert hook["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "platform-addons"]}
    ]
    assert hook["clientConfig"]["service"]["namespace"] == "platform-addons"
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for component in ("reconciler", "webhook"):
            (subject,) = find(docs, kind, f"workload-resizer-{component}")["subjects"]
            assert subject == {
                "kind": "ServiceAccount",
                "name": f"workload-resizer-{component}",
                "namespace": "platform-addons",
            }
    cert = find(docs, "Certificate", "workload-resizer-webhook")
    assert "workload-resizer-webhook.platform-addons.svc" in cert["spec"]["dnsNames"]
    args = container(find(docs, "Deployment", "workload-resizer-reconciler"))["args"]
    assert "--config-namespace=platform-addons" in args and "--leader-election-namespace=platform-addons" in args


def test_cert_manager_objects(helm: str) -> None:
    docs = render(helm, namespace=NS)
    selfsigned = find(docs, "Issuer", "workload-resizer-selfsigned")
    assert selfsigned["spec"] == {"selfSigned": {}}
    ca = find(docs, "Certificate", "workload-resizer-ca")
    assert ca["spec"]["isCA"] is True and ca["spec"]["issuerRef"]["name"] == "workload-resizer-selfsigned"
    ca_issuer = find(docs, "Issuer", "workload-resizer-ca")
    assert ca_issuer["spec"] == {"ca": {"secretName": ca["spec"]["secretName"]}}
    serving = find(docs, "Certificate", "workload-resizer-webhook")
    assert serving["spec"]["issuerRef"] == {"name": "workload-resizer-ca", "kind": "Issuer", "group": "cert-manager.io"}
    assert serving["spec"]["secretName"] == "workload-resizer-webhook-tls"
    assert set(serving["spec"]["dnsNames"]) == {
        "workload-resizer-webhook",
        f"workload-resizer-webhook.{NS}",
        f"workload-resizer-webhook.{NS}.svc",
        f"workload-resizer-webhook.{NS}.svc.cluster.local",
    }
    assert "server auth" in serving["spec"]["usages"]
    for doc in docs:
        if doc["kind"] in CERT_MANAGER_KINDS:
            assert doc["apiVersion"] == "cert-manager.io/v1"
    assert find_all(docs, "Secret") == [], "the TLS Secret is cert-manager's, the keys the reconciler's"
    # An existing issuer replaces the chart's own CA chain.
    docs = render(helm, namespace=NS, values=VARIANTS["existing-issuer"])
    assert [d["metadata"]["name"] for d in docs if d["kind"] in CERT_MANAGER_KINDS] == ["workload-resizer-webhook"]
    assert find(docs, "Certificate")["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "corp-ca"}


def test_tls_mode_provided(helm: str) -> None:
    certs = provided_certs(NS)
    docs = render(helm, namespace=NS, values={"tls": {"mode": "provided", "provided": certs}})
    assert not [d for d in docs if d["kind"] in CERT_MANAGER_KINDS]
    secret = find(docs, "Secret", "workload-resizer-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert base64.b64decode(secret["data"]["tls.crt"]).decode() == certs["cert"]
    assert base64.b64decode(secret["data"]["tls.key"]).decode() == certs["key"]
    mwc = find(docs, "MutatingWebhookConfiguration")
    assert "annotations" not in mwc["metadata"]
    assert base64.b64decode(mwc["webhooks"][0]["clientConfig"]["caBundle"]).decode() == certs["caBundle"]


def test_tls_mode_helm_serves_with_the_real_webhook(helm: str) -> None:
    """The certificate Helm generates is valid for the Service's DNS name under the caBundle
    the chart puts into the webhook configuration, and the real webhook serves with it."""
    docs = render(helm, namespace="other", values={"tls": {"mode": "helm"}})
    assert not [d for d in docs if d["kind"] in CERT_MANAGER_KINDS]
    secret = find(docs, "Secret", "workload-resizer-webhook-tls")
    mwc = find(docs, "MutatingWebhookConfiguration")
    ca_bundle = base64.b64decode(mwc["webhooks"][0]["clientConfig"]["caBundle"])
    assert ca_bundle == base64.b64decode(secret["data"]["ca.crt"])
    certs = _certs_from_secret(secret, "chart-helm-tls-")
    webhook = Webhook(certs=certs)  # type: ignore[arg-type]
    try:
        context = ssl.create_default_context(cafile=certs.ca_file)
        for name in ("workload-resizer-webhook.other.svc", "workload-resizer-webhook.other.svc.cluster.local"):
            # Connect to 127.0.0.1, verify the certificate for the Service's DNS name.
            wait_for(f"webhook /readyz over TLS as {name}", lambda name=name: _readyz_over_tls(webhook, context, name))
    finally:
        webhook.close()


def _certs_from_secret(secret: dict[str, Any], prefix: str) -> SimpleNamespace:
    """The serving certificate of a kubernetes.io/tls Secret (plus its ca.crt) as files for Webhook."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    for key in ("tls.crt", "tls.key", "ca.crt"):
        (directory / key).write_bytes(base64.b64decode(secret["data"][key]))
    return SimpleNamespace(
        ca_file=str(directory / "ca.crt"), cert_file=str(directory / "tls.crt"), key_file=str(directory / "tls.key")
    )


def _readyz_over_tls(webhook: Webhook, context: ssl.SSLContext, server_name: str) -> bool:
    if not webhook.alive:
        raise AssertionError(f"webhook exited:\n{webhook.logs()[-3000:]}")
    try:
        with (
            socket.create_connection(("127.0.0.1", webhook.port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname=server_name) as tls,
        ):
            tls.sendall(f"GET /readyz HTTP/1.1\r\nHost: {server_name}\r\nConnection: close\r\n\r\n".encode())
            return tls.recv(64).startswith(b"HTTP/1.1 200")
    except ssl.SSLCertVerificationError as err:
        raise AssertionError(f"the chart's certificate does not verify as {server_name}: {err}") from None
    except OSError:  # not listening yet
        return False


def test_tls_mode_helm_keeps_the_certificate_on_upgrade(cluster, helm: str, namespace: str) -> None:
    """On upgrade (lookup against the live cluster) the chart reuses the Secret it made at
    install instead of minting a new CA, so the caBundle and the serving certificate agree."""
    pem = provided_certs(namespace)
    data = {"ca.crt": pem["caBundle"], "tls.crt": pem["cert"], "tls.key": pem["key"]}
    cluster.kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": "workload-resizer-webhook-tls"},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        },
    )
    docs = render(
        helm,
        namespace=namespace,
        values={"tls": {"mode": "helm"}},
        extra=["--dry-run=server", "--kubeconfig", cluster.kubeconfig],
    )
    secret = find(docs, "Secret", "workload-resizer-webhook-tls")
    assert {k: base64.b64decode(v).decode() for k, v in secret["data"].items()} == data
    ca_bundle = find(docs, "MutatingWebhookConfiguration")["webhooks"][0]["clientConfig"]["caBundle"]
    assert base64.b64decode(ca_bundle).decode() == pem["caBundle"]


@pytest.mark.parametrize(
    "bad, where",
    [
        (["webhook.replica=3"], "additional properties 'replica'"),  # typo'd key
        (["reconciler.concurency=3"], "additional properties 'concurency'"),
        (["tls.mod=helm"], "additional properties 'mod'"),
        (["unknownTopLevel=1"], "additional properties 'unknownTopLevel'"),
        (["config.nodeTypes.n4.cpuPref=1"], "additional properties 'cpuPref'"),
        (["reconciler.concurrency=lots"], "/reconciler/concurrency"),  # wrong type
        (["webhook.replicas=two"], "/webhook/replicas"),
        (["reconciler.dryRun=maybe"], "/reconciler/dryRun"),
        (["reconciler.leaderElection.leaseDuration=15"], "/reconciler/leaderElection/leaseDuration"),
        (["tls.mode=selfsigned"], "/tls/mode"),  # not an allowed value
        (["tls.mode=provided"], "/tls/provided"),  # provided without certs
        (["webhook.failurePolicy=Sometimes"], "/webhook/failurePolicy"),
        (["webhook.logLevel=verbose"], "/webhook/logLevel"),
        (["webhook.port=70000"], "/webhook/port"),
        (["config.nodeTypes.n4.cpuPerf=-1"], "/config/nodeTypes/n4/cpuPerf"),
        (["config.bounds.cpu.min=lots"], "/config/bounds/cpu/min"),
        (["image.pullPolicy=Sometimes"], "/image/pullPolicy"),
        (["networkPolicy.apiserverCIDRs[0]=10.0.0.1"], "/networkPolicy/apiserverCIDRs/0"),  # not a CIDR
        (["webhook.maxConnections=0"], "/webhook/maxConnections"),
        (["webhook.httpReadTimeout=soon"], "/webhook/httpReadTimeout"),
        (["reconciler.extraArgs[0]=dry-run"], "/reconciler/extraArgs/0"),
        (["webhook.hostNetwork=sometimes"], "/webhook/hostNetwork"),
        (["config.sidecars=sometimes"], "/config/sidecars"),
    ],
)
def test_schema_rejects_bad_values(helm: str, bad: list[str], where: str) -> None:
    proc = template(helm, set_values=bad, check=False)
    assert proc.returncode != 0, f"--set {bad} was accepted"
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    assert where in proc.stderr, proc.stderr


def test_host_network_is_off_by_default_and_per_component(helm: str) -> None:
    for deployment in find_all(render(helm), "Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        assert "hostNetwork" not in spec and "dnsPolicy" not in spec
    docs = render(helm, set_values=["reconciler.hostNetwork=true"])
    webhook = find(docs, "Deployment", "workload-resizer-webhook")["spec"]["template"]["spec"]
    reconciler = find(docs, "Deployment", "workload-resizer-reconciler")["spec"]["template"]["spec"]
    assert "hostNetwork" not in webhook
    # In the node's network namespace, cluster DNS still resolves Services.
    assert (reconciler["hostNetwork"], reconciler["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")


def test_kube_version_requirement(helm: str) -> None:
    proc = template(helm, extra=["--kube-version", "1.34.0"], check=False)
    assert proc.returncode != 0 and "kubeVersion" in proc.stderr
    template(helm, extra=["--kube-version", "1.35.0"])


def test_rbac_rules_are_exactly_least_privilege(helm: str) -> None:
    docs = render(helm, namespace=NS)
    assert [d["metadata"]["name"] for d in find_all(docs, "ClusterRole")] == [
        "workload-resizer-reconciler",
        "workload-resizer-webhook",
    ]
    assert find(docs, "ClusterRole", "workload-resizer-reconciler")["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        # Preflight (reconciler.preflightChecks) and VPA coexistence (reconciler.skipVPAManaged): read only.
        {"apiGroups": [""], "resources": ["limitranges", "resourcequotas"], "verbs": ["list", "watch"]},
        {"apiGroups": ["autoscaling.k8s.io"], "resources": ["verticalpodautoscalers"], "verbs": ["list", "watch"]},
        {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["list", "watch"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list", "watch"]},
    ]
    # Both off: none of those rights.
    docs_off = render(helm, namespace=NS, values={"reconciler": {"preflightChecks": [], "skipVPAManaged": False}})
    assert len(find(docs_off, "ClusterRole", "workload-resizer-reconciler")["rules"]) == 5
    assert [d["metadata"]["name"] for d in find_all(docs, "Role")] == [
        "workload-resizer-reconciler",
        "workload-resizer-webhook",
    ]
    assert find(docs, "Role", "workload-resizer-reconciler")["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["workload-resizer-config"],
            "verbs": ["get", "list", "watch"],
        },
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["workload-resizer-originals-keys"],
            "verbs": ["get"],
        },
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["workload-resizer-reconciler"],
            "verbs": ["get", "update"],
        },
    ]
    # The webhook (sizing at admission) reads node labels, LimitRanges, VPAs (reconciler.skipVPAManaged) and
    # its config; writes nothing.
    assert find(docs, "ClusterRole", "workload-resizer-webhook")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes", "limitranges"], "verbs": ["list", "watch"]},
        {"apiGroups": ["autoscaling.k8s.io"], "resources": ["verticalpodautoscalers"], "verbs": ["list", "watch"]},
    ]
    assert find(docs_off, "ClusterRole", "workload-resizer-webhook")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes", "limitranges"], "verbs": ["list", "watch"]}
    ]
    assert find(docs, "Role", "workload-resizer-webhook")["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["workload-resizer-config"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    # Each bound to its own ServiceAccount only.
    for kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        for component in ("reconciler", "webhook"):
            binding = find(docs, kind, f"workload-resizer-{component}")
            assert binding["roleRef"] == {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": role_kind,
                "name": f"workload-resizer-{component}",
            }
            assert binding["subjects"] == [
                {"kind": "ServiceAccount", "name": f"workload-resizer-{component}", "namespace": NS}
            ]
    # Without sizing at admission the webhook has no roles, no bindings and no token.
    docs_stamp_only = render(helm, namespace=NS, values={"webhook": {"sizeAtAdmission": False}})
    assert not [
        d
        for d in docs_stamp_only
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
        and d["metadata"]["name"] == "workload-resizer-webhook"
    ]
    stamp_only = find(docs_stamp_only, "Deployment", "workload-resizer-webhook")
    assert stamp_only["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert "--size-at-admission=false" in container(stamp_only)["args"]
    # With a Secret of one's own, no Secret rights.
    docs = render(helm, namespace=NS, values={"originalsKeys": {"existingSecret": "mine"}})
    assert all("secrets" not in r["resources"] for r in find(docs, "Role", "workload-resizer-reconciler")["rules"])
    # Without leader election, no Lease rights.
    docs = render(helm, namespace=NS, values=VARIANTS["no-leader-election"])
    assert all("leases" not in r["resources"] for r in find(docs, "Role", "workload-resizer-reconciler")["rules"])
    # (and with one replica, no PodDisruptionBudget that would block node drains)
    assert [d["metadata"]["name"] for d in find_all(docs, "PodDisruptionBudget")] == ["workload-resizer-webhook"]
    assert "--leader-elect" not in container(find(docs, "Deployment", "workload-resizer-reconciler"))["args"]


# --------------------------------------------------------------------------- `helm test`

HOOK = {"helm.sh/hook": "test", "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded"}


def hooks(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if (d["metadata"].get("annotations") or {}).get("helm.sh/hook")]


def selftest_settings(pod: dict[str, Any]) -> SelftestSettings:
    (c,) = pod["spec"]["containers"]
    assert c["args"][:2] == ["commands", "selftest"]  # the image's entrypoint is `python -m`
    settings = commands_parse(c["args"][1:])
    assert isinstance(settings, SelftestSettings)
    return settings


def test_helm_test_hooks_run_the_selftest_as_its_own_least_privileged_account(helm: str) -> None:
    """The test's objects are hooks only `helm test` creates (render() leaves them out, as `helm
    install` does), its Pod runs the product's image as the Deployments do, its command points at
    the release's reconciler and Lease, and its rights are exactly what the checks need."""
    assert not hooks(render(helm, namespace=NS))
    docs = render(helm, namespace=NS, tests=True)
    tests = hooks(docs)
    assert sorted((d["kind"], d["metadata"]["name"], d["metadata"]["namespace"]) for d in tests) == sorted(
        [
            ("ServiceAccount", "workload-resizer-test", NS),
            ("Role", "workload-resizer-test", NS),
            ("RoleBinding", "workload-resizer-test", NS),
            ("Role", "workload-resizer-test-probe", "default"),
            ("RoleBinding", "workload-resizer-test-probe", "default"),
            ("Pod", "workload-resizer-test", NS),
        ]
    )
    for doc in tests:
        assert HOOK.items() <= doc["metadata"]["annotations"].items(), doc["metadata"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/component"] == "test"
        # Helm runs test hooks by weight, then by name: the rights exist before the Pod starts.
        weight = "0" if doc["kind"] == "Pod" else "-1"
        assert doc["metadata"]["annotations"].get("helm.sh/hook-weight", "0") == weight, doc["metadata"]
    # Its output printed by helm test (without --logs, which Helm 3 asks of every hook as a pod).
    output_policy = find(tests, "Pod")["metadata"]["annotations"]["helm.sh/hook-output-log-policy"]
    assert output_policy == "hook-succeeded,hook-failed"
    assert sorted(d["kind"] for d in docs if d not in tests) == sorted(d["kind"] for d in render(helm, namespace=NS))

    pod = find(tests, "Pod")
    spec = pod["spec"]
    reconciler = find(docs, "Deployment", "workload-resizer-reconciler")
    deployed = reconciler["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert (c["image"], c["imagePullPolicy"]) == (container(reconciler)["image"], "IfNotPresent")
    assert c["securityContext"] == container(reconciler)["securityContext"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True and c["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"] == deployed["securityContext"]
    assert (spec["restartPolicy"], spec["activeDeadlineSeconds"]) == ("Never", 90)
    assert spec["serviceAccountName"] == "workload-resizer-test" and spec["automountServiceAccountToken"] is True
    assert find(tests, "ServiceAccount")["automountServiceAccountToken"] is False
    assert c["resources"] == {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}
    assert "hostNetwork" not in spec and "nodeSelector" not in spec and "affinity" not in spec

    settings = selftest_settings(pod)
    selector = dict(pair.split("=") for pair in settings.reconciler_selector.split(","))
    assert selector == reconciler["spec"]["selector"]["matchLabels"]
    assert (settings.namespace, settings.lease, settings.probe_namespace) == (
        NS,
        "workload-resizer-reconciler",
        "default",
    )
    assert (settings.probe_image, settings.timeout) == (c["image"], 30.0)
    assert settings.timeout < spec["activeDeadlineSeconds"]

    roles = {d["metadata"]["name"]: d["rules"] for d in tests if d["kind"] == "Role"}
    assert roles == {
        "workload-resizer-test": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": ["workload-resizer-reconciler"],
                "verbs": ["get"],
            },
        ],
        "workload-resizer-test-probe": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}],
    }
    for binding in (d for d in tests if d["kind"] == "RoleBinding"):
        assert binding["roleRef"]["name"] == binding["metadata"]["name"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "workload-resizer-test", "namespace": NS}]


def test_helm_test_follows_the_values(helm: str) -> None:
    custom = hooks(render(helm, namespace="other", values=CUSTOM, tests=True))
    settings = selftest_settings(find(custom, "Pod"))
    assert (settings.namespace, settings.lease) == ("other", "resizer-lock")
    assert "app.kubernetes.io/instance=workload-resizer" in settings.reconciler_selector
    assert settings.probe_image == "registry.example/workload-resizer:1.2.3"
    assert find(custom, "Role", "resizer-test")["rules"][1]["resourceNames"] == ["resizer-lock"]

    # Without leader election: no Lease to read, a Ready reconciler pod suffices.
    solo = hooks(render(helm, namespace=NS, values=VARIANTS["no-leader-election"], tests=True))
    assert selftest_settings(find(solo, "Pod")).lease == ""
    assert find(solo, "Role", "workload-resizer-test")["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}
    ]

    placed = {
        "probeNamespace": "apps",
        "timeout": "45s",
        "activeDeadlineSeconds": 120,
        "hostNetwork": True,
        "priorityClassName": "ops",
        "nodeSelector": {"type": "real"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {}},
        "podAnnotations": {"a": "b"},
        "podLabels": {"team": "platform"},
        "resources": {"requests": {"cpu": "20m", "memory": "80Mi"}},
    }
    tests = hooks(render(helm, namespace=NS, values={"tests": placed}, tests=True))
    pod = find(tests, "Pod")
    spec = pod["spec"]
    assert (spec["hostNetwork"], spec["dnsPolicy"], spec["priorityClassName"]) == (
        True,
        "ClusterFirstWithHostNet",
        "ops",
    )
    assert (spec["nodeSelector"], spec["tolerations"], spec["affinity"]) == (
        placed["nodeSelector"],
        placed["tolerations"],
        placed["affinity"],
    )
    assert pod["metadata"]["annotations"]["a"] == "b" and pod["metadata"]["labels"]["team"] == "platform"
    assert spec["activeDeadlineSeconds"] == 120
    assert spec["containers"][0]["resources"] == {**placed["resources"], "limits": {"memory": "128Mi"}}  # merged
    settings = selftest_settings(pod)
    assert (settings.probe_namespace, settings.timeout) == ("apps", 45.0)
    assert find(tests, "Role", "workload-resizer-test-probe")["metadata"]["namespace"] == "apps"

    assert not hooks(render(helm, namespace=NS, values={"tests": {"enabled": False}}, tests=True))
    proc = template(helm, set_values=["tests.probeNamespace=Not_A_Namespace"], check=False)
    assert proc.returncode != 0 and "/tests/probeNamespace" in proc.stderr, proc.stderr


def test_the_test_identity_may_run_its_checks_and_nothing_more(cluster, helm: str, namespace: str) -> None:
    """The hooks' RBAC installed for real (the probe namespace here the test's own): as the test's
    ServiceAccount, what `selftest` does is allowed, and little else."""
    names = chart_names(namespace)
    values = {"fullnameOverride": names["fullname"], "tests": {"probeNamespace": namespace}}
    tests = hooks(render(helm, namespace=namespace, values=values, tests=True))
    for doc in tests:
        if doc["kind"] != "Pod":
            cluster.kube.apply(doc, namespace)
    account = find(tests, "ServiceAccount")["metadata"]["name"]
    token = cluster.kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}},
    )
    me = Kube(kubeconfig_for_token(cluster, token["status"]["token"]))
    leases = "coordination.k8s.io"
    allowed = [
        ("create", "pods", namespace, None, ""),
        ("list", "pods", namespace, None, ""),
        ("get", "leases", namespace, names["lease"], leases),
    ]
    denied = [
        ("create", "pods", "default", None, ""),
        ("list", "pods", None, None, ""),
        ("get", "pods", namespace, "x", ""),
        ("delete", "pods", namespace, "x", ""),
        ("patch", "pods", namespace, "x", ""),
        ("update", "leases", namespace, names["lease"], leases),
        ("get", "leases", namespace, "other", leases),
        ("get", "secrets", namespace, f"{names['fullname']}-originals-keys", ""),
        ("get", "configmaps", namespace, names["config"], ""),
        ("create", "pods/exec", namespace, "x", ""),
    ]
    wait_for("the test's RBAC in force", lambda: can(me, "create", "pods", namespace), timeout=30)
    for verb, resource, ns, name, group in allowed:
        assert can(me, verb, resource, ns, name, group), (verb, resource, ns, name)
    for verb, resource, ns, name, group in denied:
        resource, _, sub = resource.partition("/")
        assert not can(me, verb, resource, ns, name, group, sub or None), (verb, resource, sub, ns, name)
    # The probe itself: a dry run is created (nothing stored).
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "probe-"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    me.request("POST", f"/api/v1/namespaces/{namespace}/pods", probe, params={"dryRun": "All"})
    assert not cluster.kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]


# --------------------------------------------------------------------------- the real apiserver


def _cert_manager_installed(kube: Kube) -> bool:
    try:
        resources = kube.get("/apis/cert-manager.io/v1")["resources"]
    except (ApiError, ValueError):  # ValueError: a plain-text "404 page not found"
        return False
    return {"issuers", "certificates"} <= {r["name"] for r in resources}


CERT_MANAGER_PLURALS = {"Issuer": "issuers", "Certificate": "certificates"}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_server_side_dry_run(cluster, helm: str, namespace: str, variant: str) -> None:
    """Every rendered object, `helm test`'s hooks included, is accepted by the real apiserver
    (strict field validation, dryRun=All: nothing is persisted but the test's ServiceAccount, which
    its Pod's admission looks up). cert-manager objects only where its CRDs are installed."""
    values = values_for(variant, namespace)
    values["fullnameOverride"] = chart_names(namespace)["fullname"]  # no clash with a real install
    docs = render(helm, namespace=namespace, values=values, tests=True)  # `helm test`'s hooks too
    with_cert_manager = _cert_manager_installed(cluster.kube)
    checked = []
    for doc in docs:
        if doc["kind"] in CERT_MANAGER_KINDS:
            if not with_cert_manager:
                continue
            path = f"/apis/cert-manager.io/v1/namespaces/{namespace}/{CERT_MANAGER_PLURALS[doc['kind']]}"
        else:
            path = collection_path(doc, namespace)
        # `helm test` creates its ServiceAccount before its Pod, whose admission looks the account up.
        dry_run = {} if doc in hooks(docs) and doc["kind"] == "ServiceAccount" else {"dryRun": "All"}
        try:
            created = cluster.kube.request("POST", path, doc, params={**dry_run, "fieldValidation": "Strict"})
        except ValueError:  # plain-text 404: cert-manager's CRDs went away meanwhile
            assert doc["kind"] in CERT_MANAGER_KINDS and not _cert_manager_installed(cluster.kube)
            continue
        except ApiError as err:
            if doc["kind"] in CERT_MANAGER_KINDS and err.status == 404 and not _cert_manager_installed(cluster.kube):
                continue
            raise AssertionError(f"{doc['kind']} {doc['metadata']['name']} rejected: {err}") from None
        assert created["metadata"]["name"] == doc["metadata"]["name"]
        checked.append(doc["kind"])
    assert {
        "Deployment",
        "Service",
        "MutatingWebhookConfiguration",
        "ClusterRole",
        "Role",
        "ConfigMap",
        "ServiceAccount",
        "Pod",
    } <= set(checked)
    # Nothing was persisted.
    assert not cluster.kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments")["items"]


# --------------------------------------------------------------------------- RBAC for real


def can(
    kube: Kube,
    verb: str,
    resource: str,
    namespace: str | None = None,
    name: str | None = None,
    group: str = "",
    subresource: str | None = None,
) -> bool:
    attrs: dict[str, Any] = {"verb": verb, "resource": resource, "group": group}
    for key, value in (("namespace", namespace), ("name", name), ("subresource", subresource)):
        if value:
            attrs[key] = value
    review = kube.create(
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attrs},
        },
    )
    return bool(review["status"]["allowed"])


def status(
    kube: Kube, method: str, path: str, body: Any = None, content_type: str = "application/json", **params: Any
) -> int:
    """HTTP status of a real request as kube's identity (watches are cut short by timeoutSeconds)."""
    with kube.http.stream(
        method,
        path,
        params=params or None,
        content=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": content_type} if body is not None else None,
    ) as resp:
        return resp.status_code


@pytest.fixture
def rbac(cluster, helm: str, namespace: str):
    tokens = install_rbac(cluster.kube, helm, namespace)
    yield tokens
    uninstall_rbac(cluster.kube, namespace)


def test_reconciler_identity_can_do_its_job_and_nothing_more(cluster, rbac, namespace: str) -> None:
    names = chart_names(namespace)
    me = Kube(kubeconfig_for_token(cluster, rbac["reconciler"]))
    review = me.create(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:{names['reconciler']}"

    cm, lease = names["config"], names["lease"]
    leases = "coordination.k8s.io"
    allowed = [
        ("list", "pods", None),
        ("watch", "pods", None),
        ("get", "pods", "default"),
        ("patch", "pods", "default"),
        ("list", "nodes", None),
        ("watch", "nodes", None),
        ("get", "nodes", None),
        ("create", "events", "default"),
        ("patch", "events", "default"),
        ("create", "events", namespace),
    ]
    for verb, resource, ns in allowed:
        assert can(me, verb, resource, ns), f"reconciler may not {verb} {resource} in {ns}"
    assert can(me, "patch", "pods", "default", subresource="resize")
    assert can(me, "get", "configmaps", namespace, name=cm)
    assert can(me, "list", "configmaps", namespace, name=cm)
    assert can(me, "watch", "configmaps", namespace, name=cm)
    assert can(me, "create", "leases", namespace, group=leases)
    assert can(me, "get", "leases", namespace, name=lease, group=leases)
    assert can(me, "update", "leases", namespace, name=lease, group=leases)
    # The originals key Secret: created at the first start, then only read, by name.
    keys = f"{names['fullname']}-originals-keys"
    assert can(me, "create", "secrets", namespace)
    assert can(me, "get", "secrets", namespace, name=keys)

    forbidden = [
        dict(verb="update", resource="secrets", namespace=namespace, name=keys),
        dict(verb="patch", resource="secrets", namespace=namespace, name=keys),
        dict(verb="delete", resource="secrets", namespace=namespace, name=keys),
        dict(verb="list", resource="secrets", namespace=namespace),
        dict(verb="watch", resource="secrets", namespace=namespace),
        dict(verb="get", resource="secrets", namespace=namespace, name="other"),
        dict(verb="create", resource="secrets", namespace="default"),
        dict(verb="delete", resource="pods", namespace="default"),
        dict(verb="create", resource="pods", namespace="default"),
        dict(verb="update", resource="pods", namespace="default"),
        dict(verb="patch", resource="pods", namespace="default", subresource="status"),
        dict(verb="create", resource="pods", namespace="default", subresource="eviction"),
        dict(verb="get", resource="secrets", namespace=namespace),
        dict(verb="list", resource="secrets", namespace="kube-system"),
        dict(verb="list", resource="configmaps", namespace=namespace),
        dict(verb="list", resource="configmaps", namespace="default"),
        dict(verb="get", resource="configmaps", namespace="default", name=cm),
        dict(verb="get", resource="configmaps", namespace=namespace, name="other"),
        dict(verb="update", resource="configmaps", namespace=namespace, name=cm),
        dict(verb="patch", resource="configmaps", namespace=namespace, name=cm),
        dict(verb="patch", resource="nodes"),
        dict(verb="update", resource="nodes"),
        dict(verb="delete", resource="events", namespace="default"),
        dict(verb="list", resource="events", namespace="default"),
        dict(verb="get", resource="leases", namespace=namespace, name="other", group=leases),
        dict(verb="update", resource="leases", namespace=namespace, name="other", group=leases),
        dict(verb="delete", resource="leases", namespace=namespace, name=lease, group=leases),
        dict(verb="list", resource="leases", namespace=namespace, group=leases),
        dict(verb="create", resource="leases", namespace="default", group=leases),
        dict(verb="list", resource="deployments", namespace="default", group="apps"),
        dict(verb="create", resource="serviceaccounts", namespace=namespace, subresource="token"),
    ]
    for attrs in forbidden:
        assert not can(me, **attrs), f"reconciler may {attrs}"

    # Real requests, as the reconciler makes them.
    assert status(me, "GET", "/api/v1/pods", fieldSelector="spec.nodeName!=", limit=10) == 200
    assert status(me, "GET", "/api/v1/pods", watch="true", timeoutSeconds=1, fieldSelector="spec.nodeName!=") == 200
    assert status(me, "GET", "/api/v1/nodes", limit=10) == 200
    assert status(me, "GET", "/api/v1/nodes", watch="true", timeoutSeconds=1) == 200
    cm_path = f"/api/v1/namespaces/{namespace}/configmaps"
    assert status(me, "GET", f"{cm_path}/{cm}") == 200
    # list and watch of the one ConfigMap are authorized by resourceNames through the
    # single-name field selector, exactly as reconciler/config_source.py watches it.
    assert status(me, "GET", cm_path, fieldSelector=f"metadata.name={cm}") == 200
    assert status(me, "GET", cm_path, fieldSelector=f"metadata.name={cm}", watch="true", timeoutSeconds=1) == 200
    assert status(me, "GET", cm_path) == 403
    assert status(me, "GET", cm_path, fieldSelector="metadata.name=other") == 403
    assert status(me, "GET", "/api/v1/namespaces/default/configmaps", fieldSelector=f"metadata.name={cm}") == 403
    # pods/resize: authorized (404: no such pod), while deleting a pod is not (403).
    assert (
        status(
            me,
            "PATCH",
            "/api/v1/namespaces/default/pods/no-such-pod/resize",
            {"spec": {}},
            "application/strategic-merge-patch+json",
        )
        == 404
    )
    assert status(me, "DELETE", "/api/v1/namespaces/default/pods/no-such-pod") == 403
    assert status(me, "PATCH", "/api/v1/nodes/no-such-node", {"metadata": {}}, "application/merge-patch+json") == 403
    assert status(me, "GET", f"/api/v1/namespaces/{namespace}/secrets") == 403
    # Its events and its Lease.
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "rbac-check", "namespace": namespace},
        "involvedObject": {"kind": "ConfigMap", "name": cm, "namespace": namespace, "apiVersion": "v1"},
        "type": "Warning",
        "reason": "InvalidConfig",
        "message": "rbac check",
        "source": {"component": "workload-resizer"},
    }
    me.create(f"/api/v1/namespaces/{namespace}/events", event)
    me.patch(f"/api/v1/namespaces/{namespace}/events/rbac-check", {"count": 2})
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    me.create(
        lease_path,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": lease},
            "spec": {"holderIdentity": "rbac-check"},
        },
    )
    current = me.get(f"{lease_path}/{lease}")
    current["spec"]["holderIdentity"] = "rbac-check-2"
    assert me.request("PUT", f"{lease_path}/{lease}", current)["spec"]["holderIdentity"] == "rbac-check-2"
    assert status(me, "DELETE", f"{lease_path}/{lease}") == 403


def test_webhook_identity_may_only_read_nodes_limit_ranges_vpas_and_its_config(cluster, rbac, namespace: str) -> None:
    names = chart_names(namespace)
    me = Kube(kubeconfig_for_token(cluster, rbac["webhook"]))
    for verb, resource, ns, name in (
        ("list", "nodes", None, None),
        ("watch", "nodes", None, None),
        ("list", "limitranges", None, None),
        ("watch", "limitranges", None, None),
        ("get", "configmaps", namespace, names["config"]),
        ("watch", "configmaps", namespace, names["config"]),
    ):
        assert can(me, verb, resource, ns, name=name), f"webhook may not {verb} {resource}"
    for verb in ("list", "watch"):
        assert can(me, verb, "verticalpodautoscalers", group="autoscaling.k8s.io"), f"webhook may not {verb} VPAs"
    for verb in ("get", "create", "patch", "delete"):
        assert not can(me, verb, "verticalpodautoscalers", namespace, group="autoscaling.k8s.io"), (
            f"webhook may {verb} VPAs"
        )
    for attrs in (
        dict(verb="get", resource="pods", namespace=namespace),
        dict(verb="list", resource="pods"),
        dict(verb="get", resource="configmaps", namespace=namespace, name="other"),
        dict(verb="list", resource="configmaps", namespace=namespace),
        dict(verb="get", resource="secrets", namespace=namespace),
        dict(verb="create", resource="events", namespace=namespace),
        dict(verb="get", resource="nodes"),
        dict(verb="patch", resource="nodes"),
        dict(verb="patch", resource="pods", namespace=namespace),
    ):
        assert not can(me, **attrs), f"webhook may {attrs}"
    rules = me.create(
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": namespace}},
    )["status"]["resourceRules"]
    # What every authenticated user has (self reviews) and the chart's read-only sizing rules.
    granted = {(g, r) for rule in rules for g in rule.get("apiGroups", []) for r in rule.get("resources", [])}
    assert granted <= {
        ("authorization.k8s.io", "selfsubjectaccessreviews"),
        ("authorization.k8s.io", "selfsubjectrulesreviews"),
        ("authentication.k8s.io", "selfsubjectreviews"),
        ("", "nodes"),
        ("", "limitranges"),
        ("", "configmaps"),
        ("autoscaling.k8s.io", "verticalpodautoscalers"),
    }, granted
    verbs = {
        v
        for rule in rules
        if set(rule.get("resources", [])) & {"nodes", "limitranges", "configmaps", "verticalpodautoscalers"}
        for v in rule.get("verbs", [])
    }
    assert verbs <= {"get", "list", "watch"}, verbs


def test_the_webhook_identity_is_enough_to_size_at_admission(cluster, rbac, namespace: str) -> None:
    """The webhook, with the chart's token only, watches nodes, LimitRanges, VerticalPodAutoscalers
    (their CRD installed) and its ConfigMap and sizes a pinned pod (a review sent straight to it)."""
    import uuid

    import httpx

    from devkit.kube import install_crd, remove_crd
    from tests.cluster.test_preflight import VPA_CRD

    crd = yaml.safe_load(VPA_CRD.read_text())
    install_crd(cluster.kube, crd)
    names = chart_names(namespace)
    label = f"e2e.workload-resizer.io/family-{uuid.uuid4().hex[:8]}"
    node = f"{namespace}-n4"[:63]
    cluster.add_node(node, labels={label: "n4"})
    proc = Webhook(
        "--size-at-admission=true",
        f"--kubeconfig={kubeconfig_for_token(cluster, rbac['webhook'])}",
        f"--config-namespace={namespace}",
        f"--config-name={names['config']}",
        f"--node-type-label={label}",
        name="webhook-chart-identity",
    )
    try:
        proc.wait_ready()
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": "web-",
                "namespace": "default",
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u", "controller": True}
                ],
            },
            "spec": {
                "nodeName": node,
                "containers": [
                    {"name": "app", "image": "x", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}
                ],
            },
        }
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "operation": "CREATE",
                "namespace": "default",
                "object": pod,
            },
        }
        context = ssl.create_default_context(cafile=proc.certs.ca_file)

        def sized() -> bool:
            answer = httpx.post(proc.url, json=review, verify=context, timeout=10).json()["response"]
            ops = json.loads(base64.b64decode(answer["patch"]))
            return {"op": "add", "path": "/spec/containers/0/resources/requests/cpu", "value": "800m"} in ops

        wait_for("the webhook to size with the chart's RBAC", sized, timeout=60)
        assert "VerticalPodAutoscaler CRD found" in proc.logs()  # and listed: sized only once it is
        assert "forbidden" not in proc.logs().lower()
    finally:
        proc.terminate()
        proc.close()
        cluster.kube.delete(f"/api/v1/nodes/{node}")
        remove_crd(cluster.kube, crd["metadata"]["name"])


def test_rbac_helper_objects_are_owned_by_the_namespace(cluster, rbac, namespace: str) -> None:
    names = chart_names(namespace)
    for plural in ("clusterroles", "clusterrolebindings"):
        obj = cluster.kube.get(f"/apis/rbac.authorization.k8s.io/v1/{plural}/{names['reconciler']}")
        (owner,) = obj["metadata"]["ownerReferences"]
        assert owner["kind"] == "Namespace" and owner["name"] == namespace
    cm = cluster.kube.get(f"/api/v1/namespaces/{namespace}/configmaps/{names['config']}")
    load_config(cm["data"]["config.yaml"])


# --------------------------------------------------------------------------- cert-manager for real


def test_cert_manager_mode_issues_and_injects(cluster, helm: str, namespace: str) -> None:
    """With cert-manager running (hack/certmanager/run install, done here if needed), the
    default TLS mode really works: the self-signed CA chain issues the serving certificate
    into the Secret the webhook mounts, the CA injector fills the webhook configuration's
    caBundle, and the real webhook serves with that Secret, verifiable as the Service's DNS
    name. The webhook configuration is created with a namespaceSelector that matches no
    namespace, so it never intercepts anything in the shared cluster."""
    kube = cluster.kube
    # Idempotent, and left running like the cluster (as tests/cluster/test_certmanager.py does).
    proc = run_visible([str(CERT_MANAGER_RUN), "install"])
    assert proc.returncode == 0, f"hack/certmanager/run install failed (exit {proc.returncode})"
    assert _cert_manager_installed(kube), "cert-manager's CRDs are missing after hack/certmanager/run install"
    names = chart_names(namespace)
    docs = render(helm, namespace=namespace, values={"fullnameOverride": names["fullname"]})
    issuers = f"/apis/cert-manager.io/v1/namespaces/{namespace}/issuers"
    certificates = f"/apis/cert-manager.io/v1/namespaces/{namespace}/certificates"
    for doc in docs:
        if doc["kind"] in CERT_MANAGER_KINDS:
            kube.create(issuers if doc["kind"] == "Issuer" else certificates, doc)

    def ready(path: str) -> bool:
        conditions = (kube.get(path).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    wait_for(
        "the self-signed Issuer Ready (cert-manager's controller running)",
        lambda: ready(f"{issuers}/{names['fullname']}-selfsigned"),
        timeout=60,
    )
    wait_for("the serving Certificate Ready", lambda: ready(f"{certificates}/{names['webhook']}"), timeout=90)
    secret = kube.get(f"/api/v1/namespaces/{namespace}/secrets/{names['fullname']}-webhook-tls")
    assert {"tls.crt", "tls.key", "ca.crt"} <= set(secret["data"])

    mwc = find(docs, "MutatingWebhookConfiguration")
    ns_obj = kube.get(f"/api/v1/namespaces/{namespace}")
    mwc["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Namespace", "name": namespace, "uid": ns_obj["metadata"]["uid"]}
    ]
    mwc["webhooks"][0]["namespaceSelector"]["matchLabels"] = {"workload-resizer.io/test-never-matches": namespace}
    path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{mwc['metadata']['name']}"
    kube.create("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", mwc)
    try:
        injected = wait_for(
            "the CA injected into the webhook configuration",
            lambda: kube.get(path)["webhooks"][0].get("clientConfig", {}).get("caBundle"),
            timeout=60,
        )
        assert base64.b64decode(injected) == base64.b64decode(secret["data"]["ca.crt"])
    finally:
        kube.delete(path)

    certs = _certs_from_secret(secret, "chart-cm-tls-")
    webhook = Webhook(certs=certs)  # type: ignore[arg-type]
    try:
        context = ssl.create_default_context(cafile=certs.ca_file)
        server_name = f"{names['webhook']}.{namespace}.svc"
        wait_for(f"webhook /readyz over TLS as {server_name}", lambda: _readyz_over_tls(webhook, context, server_name))
    finally:
        webhook.close()


# --------------------------------------------------------------------------- monitoring (opt-in)

MONITORING = {
    "monitoring": {
        "podMonitor": {"enabled": True, "labels": {"release": "kps"}},
        "prometheusRule": {
            "enabled": True,
            "alertLabels": {"team": "platform"},
            "runbookUrl": "https://example.com/operations",
        },
        "dashboard": {"enabled": True, "annotations": {"grafana_folder": "Platform"}},
    }
}


def test_helm_lint_with_monitoring(helm: str) -> None:
    proc = lint(helm, values=MONITORING)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[ERROR]" not in proc.stdout and "[WARNING]" not in proc.stdout, proc.stdout


def test_monitoring_objects_pass_the_prometheus_operators_crds(cluster, helm: str, namespace: str) -> None:
    """The PodMonitors and the PrometheusRule against the Prometheus Operator's own CRDs (pinned
    module version), and the dashboard ConfigMap: server-side dry-run, strict field validation."""
    from devkit.tools import prometheus_operator_crds

    def established(name: str) -> bool:
        crd = cluster.kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        return any(
            c["type"] == "Established" and c["status"] == "True"
            for c in (crd.get("status") or {}).get("conditions") or []
        )

    for crd in prometheus_operator_crds("prometheusrules", "podmonitors"):
        cluster.kube.apply(crd)
        wait_for(f"CRD {crd['metadata']['name']} established", lambda name=crd["metadata"]["name"]: established(name))
    docs = render(
        helm, namespace=namespace, values={**MONITORING, "fullnameOverride": chart_names(namespace)["fullname"]}
    )
    monitoring = [
        d for d in docs if d["kind"] in ("PrometheusRule", "PodMonitor") or d["metadata"]["name"].endswith("-dashboard")
    ]
    assert sorted(d["kind"] for d in monitoring) == ["ConfigMap", "PodMonitor", "PodMonitor", "PrometheusRule"]

    def dry_run(doc: dict[str, Any]) -> dict[str, Any]:
        # The CRD's discovery may lag its Established condition by a moment.
        return wait_for(
            f"{doc['kind']} {doc['metadata']['name']} accepted",
            lambda: cluster.kube.request(
                "POST", collection_path(doc, namespace), doc, params={"dryRun": "All", "fieldValidation": "Strict"}
            ),
            timeout=30,
        )

    for doc in monitoring:
        assert dry_run(doc)["metadata"]["name"] == doc["metadata"]["name"]
    # The validation is real: a misspelled field of a PodMonitor is refused.
    bad = json.loads(json.dumps(find_all(monitoring, "PodMonitor")[0]))
    bad["spec"]["podMetricsEndpoints"][0]["intervall"] = "30s"
    with pytest.raises(ApiError) as refused:
        cluster.kube.request(
            "POST", collection_path(bad, namespace), bad, params={"dryRun": "All", "fieldValidation": "Strict"}
        )
    assert "intervall" in str(refused.value)
