"""Selection: scores become masks here, and nowhere else.

Every method that thresholds values into a mask (score training, the pruning baselines, the random mask) goes
through this package: which parameters compete together and at what density (groups.scope_groups, the one place
where per layer or global is decided), and the exact top-k that keeps exactly k of them, ties to the lowest index
(groups.select_group over exact.joint_topk_masks).

Modules, bottom to top:
- exact.py: the definition: keep_count, joint_topk_masks, topk_mask, the k-th largest by algorithm and device.
- band.py: the band search (numpy only): the k-th largest within a band of values, answered exactly or declined.
- warm.py: TopKSelector, the warm-started search score training uses every step (speed only, the same bits).
- groups.py: the front end: Scope and Group, scope_groups, select_group, and select for one-shot scores.
- scored.py: Selection, score training's front end (ranking, augmented parts, active entries, the warm state).

What it may import: torch, numpy, the foundations (ticketcli.errors, ticketcli.specs.run) and ticketcli.models (the
masked network's parameter names, sizes and layers). Never the methods or anything above them: methods import
from here. This file imports nothing: import the module that defines a name.
"""
