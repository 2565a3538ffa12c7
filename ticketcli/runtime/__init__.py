"""Where and how a run executes: torchrun's environment and data parallelism, torch's CPU threads, the CPU and torch
build that decide a run's last bits, worker pools, and SIGINT/SIGTERM handling.

Imports only the foundations (errors, seeding, files); never a model, a method or a setting."""
