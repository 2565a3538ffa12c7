"""The sparse runtime form from Python: `load_sparse` and `sparse_module` (export/sparse/), speaking in keywords as
every call of the API does (api/keywords.py): an unknown keyword names the closest one, and a bool or int keyword
of another type is one UsageError naming it, before anything is read or built."""

from __future__ import annotations

from ticketcli.api.keywords import speaks_keywords
from ticketcli.export.sparse import load as sparse_load
from ticketcli.export.sparse import net as sparse_net

load_sparse = speaks_keywords("load_sparse")(sparse_load.load_sparse)
sparse_module = speaks_keywords("sparse_module")(sparse_net.sparse_module)
