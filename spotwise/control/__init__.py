"""Control: the job controller (run loop, policy loop) and its components (accounting, checkpoints, market actions), sync rules, sampler, run directory IO and the run entry point."""
