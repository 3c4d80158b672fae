"""The admin's commands: `workload-resizer plan`, `report`, `restore`, `calibrate` and `selftest`.

Also reachable as `python -m commands plan|report|...` and, installed on $PATH, as the kubectl
plugin `kubectl workload-resizer plan|report|...` (console script `kubectl-workload_resizer`).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import re
import shlex
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from ops.flags import duration, is_namespaced_name, positive_float, positive_int, scope_flags, string_list
from reconciler.settings import (
    CONFIG_NAME,
    CONFIG_NAMESPACE,
    NODE_TYPE_LABEL,
    ORIGINALS_KEYS_SECRET,
    ApiSettings,
    CalibrateSettings,
    KeySettings,
    PlanSettings,
    ReportSettings,
    RestoreSettings,
    SelftestSettings,
)
from resizer.podstate import described_keys
from resizer.quantity import QuantityError, parse_quantity
from resizer.scope import ScopeError, namespace_scope

COMMANDS = ("plan", "report", "restore", "calibrate", "selftest")
_Settings = TypeVar("_Settings", PlanSettings, RestoreSettings, CalibrateSettings, SelftestSettings)
_COMMAND_OF: dict[type, str] = {
    PlanSettings: "plan",
    ReportSettings: "report",
    RestoreSettings: "restore",
    CalibrateSettings: "calibrate",
    SelftestSettings: "selftest",
}
_TOLERATION = re.compile(r"([^=:]+)(?:=([^:]*))?(?::(NoSchedule|PreferNoSchedule|NoExecute))?")


def _cluster_flags(p: argparse.ArgumentParser, default: ApiSettings) -> None:
    api = p.add_argument_group("Kubernetes API")
    api.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG") or None,
        help="path to a kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster)",
    )
    api.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    api.add_argument("--kube-api-qps", type=positive_float, default=default.qps, help="client-side requests per second")
    api.add_argument("--kube-api-burst", type=positive_int, default=default.burst, help="client-side burst")
    api.add_argument("--page-size", type=positive_int, default=default.page_size, help="items per LIST page")


def _scope_flags(group: argparse._ArgumentGroup) -> None:
    scope_flags(
        group,
        {
            "--namespace": "the product's own namespace (always out of scope)",
            "--exclude-namespaces": "namespaces out of scope besides kube-system and --namespace (the reconciler's flag)",
            "--namespace-selector": "label selector a pod's namespace must match to be in scope (the reconciler's flag)",
        },
        default=CONFIG_NAMESPACE,
        metavar=None,
    )


def _key_flags(p: argparse.ArgumentParser) -> None:
    keys = p.add_argument_group("originals keys (to verify the original-* annotations)")
    keys.add_argument(
        "--originals-key-dir",
        default="",
        metavar="DIR",
        help="directory of the HMAC keys, as the reconciler mounts it (default: read the Secret)",
    )
    keys.add_argument(
        "--originals-keys-secret",
        default=ORIGINALS_KEYS_SECRET,
        metavar="NAMESPACE/NAME",
        help="the Secret holding the keys (the chart's), read through the API",
    )


def _sizing_flags(p: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    sizing = p.add_argument_group("what to decide with (the reconciler's flags)")
    sizing.add_argument("--config-file", default=None, help="a candidate config.yaml to use instead of the ConfigMap")
    sizing.add_argument("--config-namespace", default=CONFIG_NAMESPACE)
    sizing.add_argument("--config-name", default=CONFIG_NAME)
    sizing.add_argument("--node-type-label", default=NODE_TYPE_LABEL)
    _scope_flags(sizing)
    sizing.add_argument("--resize-restart-containers", action="store_true")
    return sizing


def program_name(argv0: str) -> str:
    """For usage lines: `kubectl workload-resizer` when run as `kubectl-workload_resizer`, else `workload-resizer`."""
    return "kubectl workload-resizer" if os.path.basename(argv0).startswith("kubectl-") else "workload-resizer"


def build_parser(prog: str = "workload-resizer") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Admin commands of workload-resizer: preview what it would do (plan), show what it "
        "freed (report), undo everything it did (restore), measure each node type's cpuPerf "
        "(calibrate) and check that the installed product works (selftest).",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="{plan,report,restore,calibrate,selftest}")

    plan = sub.add_parser(
        "plan",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        help="print, per workload and node type, the pods the product would resize and the requests "
        "freed or added (read-only)",
        description="Read the cluster (one paged LIST of pods and nodes) and print what the reconciler "
        "would do with the product's ConfigMap or a candidate --config-file: per workload and "
        "node type the pods affected, current -> desired requests, and the CPU and memory "
        "requests freed (-) or added (+), per workload and in total. Writes nothing.",
    )
    _cluster_flags(plan, PlanSettings().api)
    sizing = _sizing_flags(plan)
    sizing.add_argument(
        "--no-realign",
        dest="realign",
        action="store_false",
        help="plan as a reconciler with --realign=false: pods already sized for their node type are left alone",
    )
    _key_flags(plan)
    output = plan.add_argument_group("output")
    output.add_argument("-o", "--output", choices=("table", "json"), default="table")
    output.add_argument("--show-aligned", action="store_true", help="also list workloads nothing changes for")

    report = sub.add_parser(
        "report",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        help="print the CPU and memory requests freed (or added) so far, per node type and workload, and "
        "the pods held back and why (read-only)",
        description="Read the cluster (one paged LIST of pods and nodes) and print what the product has "
        "done: the managed pods' requests as authored (their verified originals) and as now, "
        "per node type and per workload, what that freed (or added), and the pods it holds "
        "back (not resized yet, deferred or infeasible on their node, originals that cannot be "
        "verified, unknown node types) and why. The same decisions as `plan` and the "
        "reconciler. -o html writes one self-contained page (no external assets) with a "
        "chart per node type. Writes nothing to the cluster.",
    )
    _cluster_flags(report, ReportSettings().api)
    _sizing_flags(report)
    _key_flags(report)
    report.add_argument_group("output").add_argument(
        "-o", "--output", choices=("table", "json", "html"), default="table"
    )
    report.set_defaults(realign=True, show_aligned=False)  # `plan`'s flags, fixed for a report

    restore = sub.add_parser(
        "restore",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        help="resize every managed pod back to its originals and remove the workload-resizer.io annotations",
        description="Undo the product on a cluster (before or after uninstalling it): every pod carrying "
        "workload-resizer.io annotations is resized back to its original requests and limits "
        "(pods/resize), then its workload-resizer.io annotations are removed. Rate-limited, "
        "idempotent, and safe to interrupt and run again. Stop the reconciler first (helm "
        "uninstall, or scale it to 0), or it resizes the pods again. While the chart is "
        "installed, its admission policy lets only the principals in "
        "admissionPolicy.exemptGroups (default system:masters) or exemptUsers edit "
        f"{described_keys()} annotations: run restore with such credentials, or after "
        "helm uninstall.",
    )
    default = RestoreSettings()
    _cluster_flags(restore, default.api)
    _scope_flags(restore.add_argument_group("scope (the reconciler's flags): pods outside it are left alone"))
    _key_flags(restore)
    restore.add_argument(
        "--remove-unverified",
        action="store_true",
        help="pods whose originals cannot be verified keep their spec; also remove their "
        "workload-resizer.io annotations (default: keep them and report the pod)",
    )
    restore.add_argument(
        "--max-resizes-per-second",
        type=positive_float,
        default=default.max_resizes_per_second,
        help="pods restored per second at most",
    )
    restore.add_argument("--dry-run", action="store_true", help="print what would be restored, change nothing")
    restore.add_argument(
        "--only-namespace",
        default="",
        metavar="NS",
        help="restore only the pods of this namespace (default: every namespace)",
    )
    restore.add_argument(
        "--shutdown-timeout",
        type=duration,
        default=default.shutdown_timeout,
        help="on SIGTERM/SIGINT, finish the pod in progress for at most this long",
    )
    _calibrate_parser(sub)
    _selftest_parser(sub)
    return p


def _selftest_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    selftest = sub.add_parser(
        "selftest",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        help="check that the installed product works: the apiserver calls the webhook, a reconciler leads",
        description="What `helm test` runs. The webhook: a pod controlled by a ReplicaSet is created in "
        "--probe-namespace as a server-side dry run (nothing is stored), and the apiserver's answer "
        f"must carry the {described_keys('original-*')} annotations the webhook stamps. The "
        "reconciler: its Lease has a holder that renewed it within the lease duration, and the "
        "holder is a Running reconciler pod (without leader election: a Ready reconciler pod). Each "
        "check is retried until --timeout; prints one line per check, exit 1 with the reason when "
        "one fails. Needs: create pods in --probe-namespace (dry run only), list pods and get the "
        "Lease in --namespace.",
    )
    default = SelftestSettings()
    _cluster_flags(selftest, default.api)
    where = selftest.add_argument_group("the installed product")
    where.add_argument(
        "--namespace", default=default.namespace, help="the release namespace: the reconciler pods and its Lease"
    )
    where.add_argument(
        "--lease",
        default=default.lease,
        metavar="NAME",
        help="the reconciler's leader-election Lease; '' when it runs without leader election",
    )
    where.add_argument(
        "--reconciler-selector",
        default=default.reconciler_selector,
        metavar="SELECTOR",
        help="label selector of the reconciler pods",
    )
    probe = selftest.add_argument_group("the webhook's probe pod (created as a dry run only)")
    probe.add_argument(
        "--probe-namespace",
        default=default.probe_namespace,
        metavar="NS",
        help="a namespace the webhook covers (not kube-system, the release namespace or one scope.* excludes)",
    )
    probe.add_argument("--probe-image", default=default.probe_image, help="its image (never pulled: nothing runs)")
    selftest.add_argument(
        "--timeout", type=duration, default=default.timeout, help="retry a failing check for this long before failing"
    )


def _calibrate_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    calibrate = sub.add_parser(
        "calibrate",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        help="benchmark one node of each node type and suggest (or --apply) nodeTypes.<type>.cpuPerf",
        description="Run a short single-thread CPU benchmark pod (Guaranteed, --cpu) --repeats times on one "
        "node of each node type, all types at once, and report per type the score, its spread, "
        "the ratio to the baseline type with a confidence interval and the cpuPerf it suggests; "
        "--apply writes the changed values into the ConfigMap (a configured value inside the "
        "interval is kept). The benchmark pods are deleted as they finish and on any exit. A "
        "benchmark of your own (--image/--command) must print its result as its last line, "
        'JSON {"score": <work per second>}, or write that line to /dev/termination-log.',
    )
    default = CalibrateSettings()
    _cluster_flags(calibrate, default.api)
    what = calibrate.add_argument_group("what to measure")
    what.add_argument(
        "--node-types",
        type=string_list,
        default=[],
        metavar="TYPE[,TYPE...]",
        help="node types to measure (default: every value of --node-type-label on the nodes); "
        "the baseline is always measured",
    )
    what.add_argument(
        "--baseline-node-type",
        default="",
        metavar="TYPE",
        help="the type the ratios are relative to (default: the config's baselineNodeType)",
    )
    what.add_argument("--node-type-label", default=default.node_type_label)
    what.add_argument(
        "--repeats", type=positive_int, default=default.repeats, help="benchmark runs per node type (at least 2)"
    )
    what.add_argument(
        "--confidence", type=positive_float, default=default.confidence, help="of the ratio's interval (0..1)"
    )
    pods = calibrate.add_argument_group("the benchmark pods")
    pods.add_argument(
        "--namespace",
        default=default.namespace,
        help="where they run (default: the product's namespace, which it never resizes)",
    )
    pods.add_argument("--cpu", default=default.cpu, help="CPU request = limit of the benchmark container")
    pods.add_argument("--memory", default=default.memory, help="memory request = limit of the benchmark container")
    pods.add_argument(
        "--timeout", type=duration, default=default.timeout, help="per run: scheduling, start and the benchmark itself"
    )
    pods.add_argument("--image", default=default.image, help="the benchmark image")
    pods.add_argument(
        "--image-pull-policy", choices=("Always", "IfNotPresent", "Never"), default=default.image_pull_policy
    )
    pods.add_argument(
        "--command",
        dest="benchmark_command",
        default="",
        metavar="'CMD ARG...'",
        help="the benchmark command (shell words; default: the image's entrypoint)",
    )
    pods.add_argument(
        "--benchmark-duration",
        type=duration,
        default=default.benchmark_seconds,
        help="the built-in benchmark's wall time per kernel (three kernels)",
    )
    pods.add_argument(
        "--host-network",
        action="store_true",
        help="run the benchmark pods in the node's network namespace (nodes without a pod network)",
    )
    pods.add_argument(
        "--toleration",
        action="append",
        default=[],
        metavar="KEY[=VALUE][:EFFECT]",
        help="tolerate a taint of the nodes (repeatable)",
    )
    config = calibrate.add_argument_group("the config")
    config.add_argument("--config-namespace", default=default.config_namespace)
    config.add_argument("--config-name", default=default.config_name)
    config.add_argument(
        "--apply",
        action="store_true",
        help="write the suggested cpuPerf values into the ConfigMap (only if every type measured)",
    )
    calibrate.add_argument("-o", "--output", choices=("table", "json"), default="table")


def _calibrate_settings(
    parser: argparse.ArgumentParser, args: argparse.Namespace, api: ApiSettings
) -> CalibrateSettings:
    if args.repeats < 2:
        parser.error("--repeats must be at least 2: one run has no spread to judge the ratio by")
    if not 0 < args.confidence < 1:
        parser.error("--confidence must be between 0 and 1, e.g. 0.95")
    if args.timeout <= 0 or args.benchmark_duration <= 0:
        parser.error("--timeout and --benchmark-duration must be positive")
    tolerations = []
    for text in args.toleration:
        match = _TOLERATION.fullmatch(text)
        if match is None:
            parser.error(f"--toleration {text!r}: KEY[=VALUE][:NoSchedule|PreferNoSchedule|NoExecute]")
        tolerations.append((match.group(1), match.group(2) or "", match.group(3) or ""))
    try:
        command = tuple(shlex.split(args.benchmark_command))
    except ValueError as error:
        parser.error(f"--command: {error}")
    for flag, value in (("--cpu", args.cpu), ("--memory", args.memory)):
        try:
            if parse_quantity(value) <= 0:
                raise QuantityError("not positive")
        except QuantityError as error:
            parser.error(f"{flag} {value!r}: {error}")
    return _from_args(
        CalibrateSettings,
        args,
        api=api,
        node_types=tuple(args.node_types),
        command=command,
        benchmark_seconds=args.benchmark_duration,
        tolerations=tuple(tolerations),
    )


def _from_args(settings: type[_Settings], args: argparse.Namespace, **given: Any) -> _Settings:
    """``settings`` with ``given`` and, for every other field, the flag of the same name."""
    flags = {f.name: getattr(args, f.name) for f in dataclasses.fields(settings) if f.name not in given}
    return settings(**given, **flags)


def parse(
    argv: list[str], prog: str = "workload-resizer"
) -> PlanSettings | ReportSettings | RestoreSettings | CalibrateSettings | SelftestSettings:
    """The settings of the command `argv` names; exits with a usage error on bad flags."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    api = ApiSettings(
        kubeconfig=args.kubeconfig,
        context=args.context,
        qps=args.kube_api_qps,
        burst=args.kube_api_burst,
        page_size=args.page_size,
    )
    if args.command == "calibrate":
        return _calibrate_settings(parser, args, api)
    if args.command == "selftest":
        if args.timeout <= 0:
            parser.error("--timeout must be positive")
        return _from_args(SelftestSettings, args, api=api)
    try:
        scope = namespace_scope(args.namespace or None, args.exclude_namespaces, args.namespace_selector)
    except ScopeError as error:
        parser.error(str(error))
    if not is_namespaced_name(args.originals_keys_secret):
        parser.error("--originals-keys-secret must be NAMESPACE/NAME")
    keys = KeySettings(key_dir=args.originals_key_dir, secret=args.originals_keys_secret)
    if args.command == "restore":
        return _from_args(RestoreSettings, args, api=api, scope=scope, keys=keys)
    settings = ReportSettings if args.command == "report" else PlanSettings
    return _from_args(settings, args, api=api, scope=scope, keys=keys)


def main(argv: list[str] | None = None) -> int:
    settings = parse(sys.argv[1:] if argv is None else argv, program_name(sys.argv[0]))
    name = _COMMAND_OF[type(settings)]  # its module is imported only to run it
    run: Callable[[Any], int] = getattr(importlib.import_module(f"commands.{name}"), f"run_{name}")
    return run(settings)


if __name__ == "__main__":
    sys.exit(main())
