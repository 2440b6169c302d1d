"""Ground-floor plumbing every package shares: typed configs, the generic registry, the command wrapper."""
