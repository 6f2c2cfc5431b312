"""Offline checks of what operators deploy: the image, the chart, the manifests (no cluster,
no container engine)."""
