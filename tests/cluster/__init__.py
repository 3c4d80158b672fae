"""Tests against the real local control plane from hack/cluster."""
