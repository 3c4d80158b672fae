"""devkit.cluster: what `hack/cluster up` prints, read back (its last lines are the export lines)."""

from __future__ import annotations

import pytest

from devkit.cluster import ClusterError, cluster_env

UP = (
    "export PATH=/root/.cache/workload-resizer/bin/kubernetes-v1.36.4:$PATH\n"
    "export KUBECONFIG=/tmp/wr-drills-x/soak/admin.kubeconfig\n"
)


def test_the_export_lines_give_the_kubeconfig_and_the_kubernetes_binaries() -> None:
    assert cluster_env(UP) == (
        "/tmp/wr-drills-x/soak/admin.kubeconfig",
        "/root/.cache/workload-resizer/bin/kubernetes-v1.36.4",
    )


def test_other_lines_around_the_exports_are_ignored() -> None:
    assert cluster_env("node/x Ready\n" + UP + "\n") == cluster_env(UP)


@pytest.mark.parametrize(
    "printed",
    [
        UP[5:],  # its first bytes read by somebody else (the drills' flake)
        UP.split("\n", 1)[1],  # no PATH line
        UP.split("\n", 1)[0] + "\n",  # no KUBECONFIG line
        "",
    ],
    ids=["first-bytes-read-elsewhere", "no-path", "no-kubeconfig", "nothing"],
)
def test_output_without_both_export_lines_is_a_cluster_error_that_shows_it(printed: str) -> None:
    with pytest.raises(ClusterError) as err:
        cluster_env(printed)
    assert "hack/cluster up" in str(err.value) and repr(printed) in str(err.value)
