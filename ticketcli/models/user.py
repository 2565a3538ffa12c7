"""A user's own model, named "pkg.module:function": imported only when the caller allows it (a ticket alone never
does, runs/build.py), built under a fixed global seed, and refused with one line when it is not a factory.

The opt-in (--trust-model-code, or --model naming the factory) trusts the user's own code, nothing else: a factory
from the standard library (every module Python lists in sys.stdlib_module_names, builtins and __main__ included),
from torch, or from ticket itself and the libraries it runs on is refused by name before anything is imported
(importing `antigravity` or `idlelib.idle` already acts), and again when the function found was defined in such a
module (a user module re-exporting code.interact). Whatever its kind: code:interact, pdb:set_trace,
http.server:test, os:system, torch.nn:Linear. Model libraries such as torchvision stay usable.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from functools import partial
from typing import cast

import torch
from torch import nn

from ticketcli.errors import UsageError
from ticketcli.models.user_code import refuse_foreign
from ticketcli.specs.run import FACTORY_SEED


def import_factory(path: str) -> Callable[..., nn.Module]:
    """The function named by "pkg.module:function" (imported with the current directory on sys.path).

    Callers decide whether importing is allowed: a ticket alone never is (runs/build.py). Even then only the
    user's own code is: a standard-library, torch or ticket function is refused, by name before importing and
    by the module that defined the function after."""
    module_name, _, attr = path.partition(":")
    refuse_foreign(path, module_name)
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # `python -m` puts the cwd first; the console script does not
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:  # (a built-in's name, "mlp:x", never gets here: the spec parser keeps it built-in)
        raise UsageError(
            f"cannot import {module_name} for model {path}: {e}",
            hint=f"a factory ticket imports its module wherever it is rebuilt: run from the folder that holds "
            f"{module_name.partition('.')[0]}, put that folder on PYTHONPATH, or install the package",
        ) from None
    except (Exception, SystemExit) as e:  # the user's module raised (or called sys.exit) while importing
        raise UsageError(f"importing {module_name} for model {path} failed: {type(e).__name__}: {e}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UsageError(f"{module_name} has no function {attr!r} (model {path})")
    if inspect.isbuiltin(fn):  # sys.exit, os.abort, signal.pause, builtins.exec: never a model factory
        raise UsageError(f"model {path} names a built-in function, not a factory returning an nn.Module")
    inner = fn
    while isinstance(inner, partial):  # a partial's own __module__ is functools: judge what it calls
        inner = inner.func
    defined_in = getattr(inner, "__module__", None)
    if isinstance(defined_in, str):  # `from code import interact as build_net` in the user's module
        refuse_foreign(path, defined_in)
    return cast(Callable[..., nn.Module], fn)  # callable; build_user_model checks that it returns an nn.Module


def takes_num_classes(fn: Callable[..., object]) -> bool:
    """Whether a factory accepts num_classes= (by name or **kwargs, as torchvision.models' builders do)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return False
    return any(p.name == "num_classes" or p.kind is p.VAR_KEYWORD for p in params)


def build_user_model(path: str, classes: int | None = None) -> nn.Module:
    """The factory's module, built under FACTORY_SEED; with `classes` (the spec's @CxHxW-K) as num_classes=K."""
    fn = import_factory(path)
    if classes is not None and not takes_num_classes(fn):
        raise UsageError(
            f"model {path}@...-{classes} passes num_classes={classes}, which {path} does not take",
            hint=f"drop the @CxHxW-K part, or give {path} a num_classes parameter",
        )
    kwargs = {} if classes is None else {"num_classes": classes}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(FACTORY_SEED)
        try:
            module = fn(**kwargs)
        except (Exception, SystemExit) as e:  # a factory's sys.exit() must not become our exit code
            raise UsageError(f"model factory {path} failed: {type(e).__name__}: {e}") from None
    if not isinstance(module, nn.Module):
        raise UsageError(f"model factory {path} returned {type(module).__name__}, not an nn.Module")
    return module.cpu().float().eval()
