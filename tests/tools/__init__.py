"""Tests that build or run external tools: helm and promtool (hack/tools, cached after the first
build), hadolint, and pip replaying the image's install steps. No cluster."""
