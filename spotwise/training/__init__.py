"""What a step does to the model beyond the gradient (issue 28): the optimizer, its schedule and precision.

* :mod:`spotwise.training.recipe` -- the spec side: ``workload.optimizer``, ``workload.schedule``,
  ``grad_clip_norm``, ``accumulate`` and ``precision``, validated when a spec loads (no torch
  import unless an optimizer is named), and the learning-rate schedule as a pure function of the
  committed samples.
* :mod:`spotwise.training.state` -- the model side: a model whose parameters and floating-point
  buffers are views into one flat float32 vector (the unit the planes ship), a real
  ``torch.optim`` optimizer over it, gradient clipping, mixed precision, and the whole training
  state as ``state_dict``\\ s.
"""
