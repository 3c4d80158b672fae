"""Operational helpers shared by the webhook (app/) and the reconciler."""
