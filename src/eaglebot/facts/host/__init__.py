"""The host itself: its processes, who listens on a port, its home and state folder, and the
workload scheduler's view of the node (Slurm, Kubernetes)."""
