"""The development toolkit: what the tests, bench/ and hack/ share (never part of the product).

- devkit.kube       a small synchronous API client for tests, benchmarks and the demo
- devkit.cluster    hack/cluster in a state directory of its own (up, down, nodes, components)
- devkit.processes  the product's processes (webhook, reconciler) with their logs and metrics
- devkit.metrics    Prometheus text, read with prometheus_client.parser
- devkit.configs    config.yaml texts from one builder
- devkit.chart, devkit.rbac  the Helm chart rendered and its RBAC installed for real
- devkit.chart_variants  the chart's value sets the tests render
- devkit.schemas    the rendered chart checked against each pinned minor's OpenAPI (make lint)
- devkit.localchart the chart's objects applied as rendered, its programs run locally with the chart's args
- devkit.watch      every version of a namespace's pods, from a watch (for "never" assertions)
- devkit.labeller   another mutating webhook (adds a label), served from the test process
- devkit.progress   long first-use builds shown on the terminal, even under pytest
- devkit.ports      free ports below the kernel's ephemeral range, reserved across processes
"""
