"""What the Python API can be asked for by name: the methods, model families, datasets and extract's options
(with their defaults), from the same registries and settings table as the command line."""

from __future__ import annotations

from ticketcli.api.extract import option_keywords
from ticketcli.data.registry import DATASETS
from ticketcli.methods import METHODS
from ticketcli.models.registry import MODELS
from ticketcli.settings.run import RUN


def list_methods() -> list[str]:
    """The extraction methods, by name (what `method=` takes)."""
    return list(METHODS.names())


def list_models() -> list[str]:
    """The built-in model families, by name (the first part of a model spec string)."""
    return list(MODELS.names())


def list_datasets() -> list[str]:
    """The registered datasets, by name (what `data=` takes as a string)."""
    return list(DATASETS.names())


def extract_options() -> dict[str, object]:
    """Every extract option by its Python name, with its default (None: decided by the dataset or method)."""
    defaults = RUN.defaults()
    return {k: defaults[k] for k in sorted(option_keywords())}
