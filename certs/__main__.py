"""``python -m certs``: a CA and a serving certificate for the webhook.

Examples::

    # new CA + serving cert for the in-cluster Service, caBundle on stdout
    python -m certs --service workload-resizer-webhook --namespace workload-resizer-system --out-dir /tmp/wr-certs

    # a webhook running on this machine, reached as https://127.0.0.1:8443
    python -m certs --ip 127.0.0.1 --dns localhost --out-dir /tmp/wr-certs --ca-bundle-file /tmp/wr-certs/ca.b64

    # rotate: new serving cert from the existing CA
    python -m certs --ip 127.0.0.1 --ca-cert /tmp/wr-certs/ca.crt --ca-key /tmp/wr-certs/ca.key --out-dir /tmp/wr-certs2
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from certs import ca_bundle, dedupe, generate_ca, issue_serving_cert, load_ca, service_dns_names, write_pair


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m certs",
        description="Generate a CA (or reuse one) and an ECDSA P-256 serving certificate for the webhook; write "
        "ca.crt, tls.crt, tls.key (0600) and ca.key (0600, new CA only) into --out-dir and print the base64 caBundle.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--out-dir", required=True, metavar="DIR", help="Directory to write the files into.")
    p.add_argument(
        "--service",
        metavar="NAME",
        help="Service name: adds NAME, NAME.NS, NAME.NS.svc and NAME.NS.svc.<cluster-domain> (needs --namespace).",
    )
    p.add_argument("--namespace", metavar="NS", help="Namespace of --service.")
    p.add_argument("--cluster-domain", default="cluster.local", help="Cluster DNS domain for --service.")
    p.add_argument("--dns", action="append", default=[], metavar="NAME", help="Extra DNS SAN (repeatable).")
    p.add_argument("--ip", action="append", default=[], metavar="IP", help="IP SAN, e.g. 127.0.0.1 (repeatable).")
    p.add_argument("--days", type=float, default=365, help="Validity of the serving certificate, in days.")
    p.add_argument("--ca-days", type=float, default=3650, help="Validity of a newly generated CA, in days.")
    p.add_argument(
        "--ca-cert", metavar="PATH", help="Reuse this CA certificate (with --ca-key) instead of generating one."
    )
    p.add_argument("--ca-key", metavar="PATH", help="Private key (EC, as this tool generates) of --ca-cert.")
    p.add_argument("--ca-common-name", default="workload-resizer-webhook-ca", help="CN of a newly generated CA.")
    p.add_argument(
        "--ca-bundle-file", metavar="PATH", help="Write the base64 caBundle to this file instead of printing it."
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if bool(args.service) != bool(args.namespace):
        p.error("--service and --namespace go together")
    if bool(args.ca_cert) != bool(args.ca_key):
        p.error("--ca-cert and --ca-key go together")
    dns = dedupe(
        (service_dns_names(args.service, args.namespace, args.cluster_domain) if args.service else []) + args.dns
    )
    ips = dedupe(args.ip)
    if not dns and not ips:
        p.error("give --service/--namespace, --dns or --ip: the certificate needs at least one name")
    try:
        ca = load_ca(args.ca_cert, args.ca_key) if args.ca_cert else generate_ca(args.ca_common_name, days=args.ca_days)
        serving = issue_serving_cert(ca, dns, ips, days=args.days)
        paths = write_pair(args.out_dir, serving, ca, ca_key_file=not args.ca_cert)  # a new CA's key too
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    bundle = ca_bundle(ca.cert)
    for path in paths.values():
        print(f"wrote {path}", file=sys.stderr)
    if args.ca_bundle_file:
        with open(args.ca_bundle_file, "w") as f:
            f.write(bundle + "\n")
        print(f"wrote {args.ca_bundle_file}", file=sys.stderr)
    else:
        print(bundle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
