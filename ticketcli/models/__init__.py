"""The networks: every built-in model, a user's own model, and MaskedNet, the frozen network whose forward pass
multiplies each masked weight by its mask.

Its modules, by concern, bottom to top:
- sites.py: activation sites (ActSite) and the Trace a forward pass can record; a study varies and measures them.
- cost.py: the terms a family's cost is written in (Estimate, Cost); family.py: Family, a family's torch-free facts.
- mlp_family.py, conv_family.py, resnet_family.py, vit_family.py, gpt_family.py: each family's Family, torch-free
  (description, the grammar of its ':' arguments, its cost from the spec alone, example specs, its builder's name).
- mlp.py, conv.py, resnet.py, vit.py, gpt.py: one model family each (gpt.py reuses vit.py's blocks): the
  nn.Module, its `forward_with` (the forward pass with given tensors as parameters) and its builder.
- user.py: a user's own model "pkg.module:function", imported only when the caller allows it; user_code.py: which
  modules count as the user's own code (torch-free: `inspect --command` refuses the others by name too).
- masked.py: MaskedNet, `masked_names` (which parameters get masks), `layer_of`, `fan_in`.
- registry.py: MODELS (every family's Family, one line each; torch-free), `parse_model` (spec strings), `estimate`
  and `declared_params` (costs from a spec).
- init.py: the init schemes registry and init_weights (torch-free to import).
- build.py: a spec to a frozen module (`build_model`, `frozen_copy`) and the budget every built-in model passes
  first (`planned_shapes`).

To add a model: write its network with a builder, declare its Family in <family>_family.py and register it with
one line in registry.py (CONTRIBUTING.md, "Adding a model").

What it may import: torch (never in registry.py, family.py, cost.py, the *_family.py modules or init.py at
import time: --help reads them), the foundations (ticketcli.errors, specs, registry) and
itself; nothing above the building blocks (tests/test_layers.py). This file imports nothing: import the module that
defines a name.
"""
