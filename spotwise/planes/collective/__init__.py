"""The collective data plane (issue 10, paper 001 Spotnik): workers all-reduce among themselves.

So far: :mod:`spotwise.planes.collective.group`, a regroupable gloo process group with failure
propagation (a dead or frozen peer never hangs the others) and in-place regrouping by generation.
"""
