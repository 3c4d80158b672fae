"""Development scripts (the local cluster, the demo); never imported by the product."""
