"""The simulator: the same control logic as ``spotwise run`` with modelled compute and loss."""
