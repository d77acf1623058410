"""ropelab training application: model, data, training loop, metrics."""
