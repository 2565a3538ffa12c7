"""`ticket train-weak`'s settings: the weight training of a ticket's surviving weights (the paper's weak-ticket
protocol, Appendix B), each a field of WeakSpec (specs/weak.py), which holds its default."""

from __future__ import annotations

from ticketcli.settings.run import BATCH, EPOCHS, LR, RUN
from ticketcli.settings.setting import Panel, Setting, Table
from ticketcli.specs.weak import WeakSpec

WEAK = Table(
    Setting("epochs", "Weight-training epochs (Appendix B).", Panel.TRAINING, int, EPOCHS, (WeakSpec, "epochs")),
    Setting("lr", "Adam learning rate for the weights.", Panel.TRAINING, float, LR, (WeakSpec, "optim.lr")),
    Setting("batch_size", "Minibatch size.", Panel.TRAINING, int, BATCH, (WeakSpec, "batch_size")),
    RUN["precision"].but(per_method=False, field=(WeakSpec, "precision")),
)
