"""`--log-to`: experiment tracking of every command that trains, in TensorBoard and MLflow.

Modules:
- base.py: the `Tracker`/`RunLog` protocol, `Tracking` (one run in every destination, each tracker's errors turned
  into one warning line), `tracked` (open and close around a command's work), run names and flat parameters.
- tb.py: TensorBoard event files (torch.utils.tensorboard).
- mlflow_process.py: the MLflow tracker of the training process, which sends every call as a JSON line to a writer
  process (mlflow_writer.py), which writes them to the store through mlflow_store.py (MlflowClient).
- feed.py: what each command logs: its progress reports as scalars per step, its typed result as final metrics,
  parameters, tags and artifacts.

Sits beside report/ (presentation): it reads the workflows' typed results and imports nothing above it. torch is
imported only when a run is opened, never for --help; mlflow only in the writer process. The trackers are the
optional extra `[track]`."""
