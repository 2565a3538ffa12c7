"""`--log-to`: experiment tracking of extract, train-weak, sweep-k and drift in TensorBoard and MLflow.

Modules:
- base.py: the `Tracker`/`RunLog` protocol, `Tracking` (one run in every destination, each tracker's errors turned
  into one warning line), `tracked` (open and close around a command's work), run names and flat parameters.
- tb.py: TensorBoard event files (torch.utils.tensorboard); mlflow_store.py: an MLflow store (MlflowClient).
- feed.py: what each command logs: its progress reports as scalars per step, its typed result as final metrics,
  parameters, tags and artifacts.

Sits beside report/ (presentation): it reads the workflows' typed results and imports nothing above it. torch and
mlflow are imported only when a run is opened, never for --help. The trackers are the optional extra `[track]`."""
