"""Which modules count as a user's own code, torch-free: a model factory from the standard library, torch, ticket
itself or the libraries it runs on is refused by name (user.py before importing it; `inspect --command` before
printing a command that names it)."""

from __future__ import annotations

import sys

from ticketcli.errors import UsageError

# not the user's code: torch and its companions, ticket itself and the libraries it runs on, and tools that open
# an interpreter, a debugger or an installer when called (besides the standard library, sys.stdlib_module_names)
NOT_USER_CODE = frozenset(
    {
        "__main__",
        "torch",
        "functorch",
        "torchgen",
        "triton",
        "ticketcli",
        "typer",
        "click",
        "rich",
        "numpy",
        "safetensors",
        "tomli",
        "pip",
        "setuptools",
        "pkg_resources",
        "IPython",
        "ipdb",
        "pytest",
        "_pytest",
    }
)


def foreign_package(module_name: str) -> str | None:
    """The top-level package of `module_name` when it is not the user's code (standard library, torch, ...)."""
    top = module_name.split(".")[0]
    return top if top in sys.stdlib_module_names or top in NOT_USER_CODE else None


def refuse_foreign(path: str, module_name: str) -> None:
    """One UsageError when `module_name` (of the factory `path`) is not the user's code."""
    top = foreign_package(module_name)
    if top is not None:
        where = "the standard library" if top in sys.stdlib_module_names else f"{top}"
        raise UsageError(
            f"model {path} names a function of {where} (module {module_name!r}), not a model factory of your own",
            hint="--trust-model-code trusts your own module only, never the standard library, torch or ticket's "
            "own dependencies; name a function in your module that returns an nn.Module",
        )
