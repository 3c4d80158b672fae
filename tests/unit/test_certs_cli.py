"""python -m certs and certs.manifest (webhook-config templates)."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from certs.__main__ import main
from certs.manifest import RenderError, render, render_file

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "webhook-config"


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def sans(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return ext.get_values_for_type(x509.DNSName), [str(i) for i in ext.get_values_for_type(x509.IPAddress)]


def test_service_and_namespace_give_the_four_service_names(tmp_path, capsys):
    assert main(["--service", "wr-webhook", "--namespace", "wr-system", "--out-dir", str(tmp_path)]) == 0
    dns, ips = sans(load(tmp_path / "tls.crt"))
    assert dns == [
        "wr-webhook",
        "wr-webhook.wr-system",
        "wr-webhook.wr-system.svc",
        "wr-webhook.wr-system.svc.cluster.local",
    ]
    assert ips == []
    bundle = capsys.readouterr().out.strip()
    assert base64.b64decode(bundle) == (tmp_path / "ca.crt").read_bytes()


def test_files_are_written_with_private_keys_0600(tmp_path):
    main(["--ip", "127.0.0.1", "--out-dir", str(tmp_path), "--ca-bundle-file", str(tmp_path / "ca.b64")])
    for name in ("tls.key", "ca.key"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o600
    for name in ("tls.crt", "ca.crt", "ca.b64"):
        assert (tmp_path / name).exists()


def test_serving_cert_chains_to_the_ca_and_is_for_servers(tmp_path):
    main(["--ip", "127.0.0.1", "--dns", "localhost", "--out-dir", str(tmp_path), "--days", "30"])
    ca, leaf = load(tmp_path / "ca.crt"), load(tmp_path / "tls.crt")
    leaf.verify_directly_issued_by(ca)
    assert sans(leaf) == (["localhost"], ["127.0.0.1"])
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in eku
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert 29 <= (leaf.not_valid_after_utc - leaf.not_valid_before_utc).days <= 31


def test_existing_ca_issues_a_new_serving_cert(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    main(["--ip", "127.0.0.1", "--out-dir", str(first)])
    assert (
        main(
            [
                "--ip",
                "127.0.0.1",
                "--out-dir",
                str(second),
                "--ca-cert",
                str(first / "ca.crt"),
                "--ca-key",
                str(first / "ca.key"),
            ]
        )
        == 0
    )
    assert (second / "ca.crt").read_bytes() == (first / "ca.crt").read_bytes()
    assert not (second / "ca.key").exists()
    load(second / "tls.crt").verify_directly_issued_by(load(first / "ca.crt"))
    assert (second / "tls.crt").read_bytes() != (first / "tls.crt").read_bytes()


def test_mismatched_ca_key_is_an_error(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    main(["--ip", "127.0.0.1", "--out-dir", str(a)])
    main(["--ip", "127.0.0.1", "--out-dir", str(b)])
    assert (
        main(
            [
                "--ip",
                "127.0.0.1",
                "--out-dir",
                str(tmp_path / "c"),
                "--ca-cert",
                str(a / "ca.crt"),
                "--ca-key",
                str(b / "ca.key"),
            ]
        )
        == 1
    )


def test_no_name_at_all_is_a_usage_error(tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["--out-dir", str(tmp_path)])
    assert exc.value.code == 2


def test_module_runs_as_a_command(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "certs", "--ip", "127.0.0.1", "--out-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert base64.b64decode(r.stdout.strip()).startswith(b"-----BEGIN CERTIFICATE-----")


# -- manifests ----------------------------------------------------------------------------
def webhook_of(doc: dict) -> dict:
    (hook,) = doc["webhooks"]
    return hook


@pytest.mark.parametrize("name", ["static-cabundle.yaml", "local-url.yaml", "cert-manager.yaml"])
def test_manifest_has_the_agreed_webhook_settings(name):
    text = (CONFIG / name).read_text()
    values = {"CA_BUNDLE": "Q0E=", "WEBHOOK_URL": "https://127.0.0.1:8443/mutate"}
    doc = yaml.safe_load(render(text, {k: v for k, v in values.items() if "${" + k + "}" in text}))
    assert doc["apiVersion"] == "admissionregistration.k8s.io/v1" and doc["kind"] == "MutatingWebhookConfiguration"
    assert doc["metadata"]["name"] == "workload-resizer"
    hook = webhook_of(doc)
    assert hook["name"] == "pods.workload-resizer.io"
    assert hook["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] == 3 and hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"] and hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["matchPolicy"] == "Equivalent" and "objectSelector" not in hook
    assert hook["namespaceSelector"] == {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["kube-system", "workload-resizer-system"],
            }
        ]
    }


def test_cert_manager_manifest_injects_the_ca():
    doc = yaml.safe_load((CONFIG / "cert-manager.yaml").read_text())
    assert (
        doc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        == "workload-resizer-system/workload-resizer-webhook"
    )
    cc = webhook_of(doc)["clientConfig"]
    assert "caBundle" not in cc
    assert cc["service"] == {
        "name": "workload-resizer-webhook",
        "namespace": "workload-resizer-system",
        "path": "/mutate",
        "port": 443,
    }


def test_static_manifest_renders_with_a_generated_bundle(tmp_path):
    main(
        [
            "--service",
            "workload-resizer-webhook",
            "--namespace",
            "workload-resizer-system",
            "--out-dir",
            str(tmp_path),
            "--ca-bundle-file",
            str(tmp_path / "ca.b64"),
        ]
    )
    bundle = (tmp_path / "ca.b64").read_text().strip()
    doc = yaml.safe_load(render_file(str(CONFIG / "static-cabundle.yaml"), {"CA_BUNDLE": bundle}))
    cc = webhook_of(doc)["clientConfig"]
    assert base64.b64decode(cc["caBundle"]) == (tmp_path / "ca.crt").read_bytes()
    assert cc["service"]["path"] == "/mutate"


def test_missing_value_leaves_no_placeholder_unnoticed():
    with pytest.raises(RenderError, match="WEBHOOK_URL"):
        render_file(str(CONFIG / "local-url.yaml"), {"CA_BUNDLE": "Q0E="})


@pytest.mark.parametrize("value", ["", "a b", "x\ny: z", "'quoted'", "#comment", "${CA_BUNDLE}"])
def test_unsafe_values_are_refused(value):
    with pytest.raises(RenderError):
        render_file(str(CONFIG / "static-cabundle.yaml"), {"CA_BUNDLE": value})


def test_unused_value_is_refused():
    with pytest.raises(RenderError, match="NOPE"):
        render_file(str(CONFIG / "cert-manager.yaml"), {"NOPE": "x"})


def test_render_script_prints_the_manifest(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            str(CONFIG / "render.py"),
            str(CONFIG / "local-url.yaml"),
            "WEBHOOK_URL=https://127.0.0.1:9443/mutate",
            "CA_BUNDLE=Q0E=",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert webhook_of(yaml.safe_load(r.stdout))["clientConfig"]["url"] == "https://127.0.0.1:9443/mutate"
    r = subprocess.run(
        [sys.executable, str(CONFIG / "render.py"), str(CONFIG / "local-url.yaml")], capture_output=True, text=True
    )
    assert r.returncode == 1 and "no value for placeholder" in r.stderr
