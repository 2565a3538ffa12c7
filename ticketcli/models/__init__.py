"""The networks: every built-in model, a user's own model, and MaskedNet, the frozen network whose forward pass
multiplies each masked weight by its mask.

Its modules, by concern, bottom to top:
- sites.py: activation sites (ActSite) and the Trace a forward pass can record; drift varies and measures them.
- mlp.py, conv.py, resnet.py, vit.py, gpt.py: one model family each (gpt.py reuses vit.py's blocks): the
  nn.Module, its `forward_with` (the forward pass with given tensors as parameters) and its builder.
- user.py: a user's own model "pkg.module:function", imported only when the caller allows it.
- masked.py: MaskedNet, `masked_names` (which parameters get masks), `layer_of`, `fan_in`.
- registry.py: MODELS (importing it registers every built-in model) and `parse_model` (spec strings).
- build.py: a spec to a frozen module (`build_model`, `frozen_copy`) and the budget every built-in model passes
  first (`planned_shapes`, `check_param_count`).

To add a model: write its family module with a builder, register the builder in registry.py (and describe it in
catalog.py and cost.py; ARCHITECTURE.md, "Adding a model").

What it may import: torch, the foundations (ticketcli.errors, specs, spec_syntax, registry, cost, budget) and
ticketcli.models.batchnorm; nothing above the building blocks (tests/test_layers.py). This file imports nothing:
import the module that defines a name.
"""
