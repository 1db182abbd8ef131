"""The kernel library: .tile sources and their per-arch configurations."""
