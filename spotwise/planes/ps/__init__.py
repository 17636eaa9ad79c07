"""The parameter-server data plane: Ray worker actors computing mini-batch gradients against the coordinator's parameters (papers/000 Sec. III, papers/002)."""
