"""User-written policies named ``package.module:ClassName`` (issue 22).

A spec may name ``{name: mypkg.policies:MyGuard, params: {...}}`` beside the built-in policies; a
sweep's ``--strategies`` and :func:`spotwise.sweep` accept such names, and the Python API accepts
:class:`~spotwise.policies.base.Policy` objects.  The contract (``docs/policies.md``) is the
built-ins': a subclass of :class:`~spotwise.policies.base.Policy` whose ``decide(observation)``
returns a list of decisions and is pure.

Trust: like a ``module:function`` workload, the module is imported where policies are built --
``spotwise run``, ``spotwise simulate`` (one run and trace sweeps) -- never by ``load_spec`` or a
validation-only command (README, "Security").  Everything the user's code gets wrong is an input
error (exit 2) that names the policy: a module that cannot be imported, a missing class, a class
that is not a Policy, bad parameters, and an exception raised inside ``decide`` -- reported with
the user's traceback (:class:`UserPolicyError`, its ``details``), the run directory keeping what
was committed before it.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from spotwise.errors import InputError
from spotwise.policies.base import Decision, Observation, Policy
from spotwise.policies.decision_checks import BadDecision, checked_decisions
from spotwise.user_failures import exit_fix, failure_text, is_user_failure
from spotwise.usercode import refuse_unsafe_reference, user_traceback

FIX_IMPORT = ("make the module importable: install its package in this environment, or add the folder that "
              "contains it to PYTHONPATH (export PYTHONPATH=/path/to/dir:$PYTHONPATH)")


class UserPolicyError(InputError):
    """A user policy's code failed: the policy's fault, so exit 2; ``details`` is its traceback."""

    def __init__(self, what: str, fix: str = "", where: str | None = None, details: str = "") -> None:
        super().__init__(what, fix, where)
        self.details = details


def is_user_policy(name: str) -> bool:
    return ":" in str(name)


def check_reference(name: str) -> None:
    """``package.module:ClassName`` syntax only (no import: ``load_spec`` never runs user code)."""
    mod, _, cls = str(name).partition(":")
    if not mod or not cls or not all(p.isidentifier() for p in mod.split(".")) or not cls.isidentifier():
        raise InputError(f"malformed policy reference {name!r}", "write a user policy as 'package.module:ClassName'", "policies")
    refuse_unsafe_reference(str(name), "policy", "policies")


def load_policy_class(name: str) -> type[Policy]:
    """Import ``package.module:ClassName`` and check it is a :class:`Policy` subclass."""
    check_reference(name)
    mod_name, _, cls_name = name.partition(":")
    try:
        module = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        if e.name is not None and (mod_name == e.name or mod_name.startswith(e.name + ".")):
            raise InputError(f"policy {name}: cannot import module {mod_name!r} ({e})", FIX_IMPORT, "policies") from None
        raise UserPolicyError(f"policy {name} raised {type(e).__name__} while importing {mod_name}: {e}",
                              "fix the module (its traceback is printed above)", "policies", user_traceback(e)) from None
    except BaseException as e:  # whatever the user's module raises (sys.exit too) is theirs to fix
        if not is_user_failure(e):
            raise
        raise UserPolicyError(f"policy {name} {failure_text(e, f'while importing {mod_name}')}",
                              exit_fix(e, "a policy module") + "fix the module (its traceback is printed above)",
                              "policies", user_traceback(e)) from None
    cls = getattr(module, cls_name, None)
    if cls is None:
        raise InputError(f"module {mod_name!r} has no class {cls_name!r} (policy {name})",
                         f"define class {cls_name}(spotwise.Policy) in {getattr(module, '__file__', mod_name)} or fix the name",
                         "policies")
    if not (inspect.isclass(cls) and issubclass(cls, Policy)):
        raise InputError(f"{name} is not a Policy (it is {type(cls).__name__} {cls!r})",
                         "subclass spotwise.Policy and implement decide(observation) -> list of decisions "
                         "(docs/policies.md)", "policies")
    if inspect.isabstract(cls):
        raise InputError(f"{name} does not implement decide(observation)", "define decide(self, obs) -> list[Decision] "
                         "(docs/policies.md)", "policies")
    return cls


class GuardedPolicy(Policy):
    """A user policy whose ``decide`` is checked: an exception, or a result that is not a list of
    :class:`Decision` values, becomes a :class:`UserPolicyError` naming the policy."""

    def __init__(self, inner: Policy, ref: str) -> None:
        self.inner = inner
        self.ref = ref
        self.name = str(getattr(inner, "name", "") or ref)  # type: ignore[misc]
        self.spot_only = bool(getattr(inner, "spot_only", False))  # type: ignore[misc]
        self.uses_places = bool(getattr(inner, "uses_places", False))  # type: ignore[misc]

    def decide(self, obs: Observation) -> list[Decision]:
        try:
            out = self.inner.decide(obs)
        except BaseException as e:  # the user's decide failed (sys.exit too): theirs to fix
            if not is_user_failure(e):
                raise
            raise UserPolicyError(f"policy {self.ref} {failure_text(e, f'in decide at step {obs.step}')}",
                                  exit_fix(e, "a policy") + "fix the policy (its traceback is printed above); the run "
                                  "directory keeps every step "
                                  "committed before it and resumes with `spotwise run --resume DIR`", "policies",
                                  user_traceback(e)) from None
        try:
            return checked_decisions(out)
        except BadDecision as e:
            raise UserPolicyError(f"policy {self.ref}: decide at step {obs.step} returned {e}", e.fix, "policies") from None

    def __repr__(self) -> str:
        return f"GuardedPolicy({self.inner!r})"


def make_user_policy(name: str, params: dict[str, Any] | None = None) -> Policy:
    """The user policy ``name`` built with ``params`` and guarded."""
    cls = load_policy_class(name)
    try:
        inner = cls(**(params or {}))
    except TypeError as e:
        raise InputError(f"bad parameters for policy {name}: {e}", "fix the policy's params to match its __init__", "policies") from None
    except BaseException as e:  # sys.exit in __init__ too
        if not is_user_failure(e):
            raise
        raise UserPolicyError(f"policy {name} {failure_text(e, 'when built')}",
                              exit_fix(e, "a policy") + "fix the policy's __init__ or its params (traceback above)",
                              "policies", user_traceback(e)) from None
    return guard(inner, name)


def guard(policy: Any, ref: str | None = None) -> Policy:
    """A policy object handed in through the Python API, checked and guarded like a named one."""
    if isinstance(policy, GuardedPolicy):
        return policy
    if not isinstance(policy, Policy):
        raise InputError(f"{policy!r} is not a Policy", "pass an instance of a spotwise.Policy subclass, or a "
                         "'package.module:ClassName' name", "policies")
    if getattr(type(policy), "__module__", "").startswith("spotwise.policies."):
        return policy  # a built-in: trusted as it is
    return GuardedPolicy(policy, ref or f"{type(policy).__module__}:{type(policy).__qualname__}")
