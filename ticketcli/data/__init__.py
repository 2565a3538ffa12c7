"""Datasets: the torch-free registry (registry.py), the loaders and their seeded splits (datasets.py), CIFAR-10's
pickles read without unpickling them (cifar.py), the caller's in-memory tensors (memory.py), the plain text
character-level models train on (text.py) and that text as next-character blocks, `--dataset text` (lm.py).

Imports the foundations (errors, registry, seeding, specs, files) only."""
