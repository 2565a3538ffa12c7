"""onnxruntime against the ticket's own network, per built-in model: `ticket export --format onnx` on a small ticket
of each, then the exported graph and the ticket's network (BatchNorm recalibrated, as evaluate does) on the whole
test split.

    python benchmarks/onnx_agreement.py                  # digits-sized models + the paper MLP and LeNet on FashionMNIST
    python benchmarks/onnx_agreement.py --no-fashion     # digits only (no files needed)

Tickets: augmented, --epochs 1 (0 for --method random), sparsity 90%, seed 0, on the dataset's default splits
(--n-extract to shrink them). gpt-nano has no image data: its ticket is seeded random masks over the weights its seed
draws (extract trains classifiers), checked on random character ids, "accuracy" there being the share of next-token
predictions on which onnxruntime and torch agree. One torch thread, one onnxruntime thread. Prints a Markdown table:
the largest |logit difference|, both test accuracies, the ONNX file's size and the export's wall time.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import onnxruntime as ort
import torch

from ticketcli.data.registry import DATASETS
from ticketcli.export.onnx import ONNX_INPUT, ONNX_OUTPUT
from ticketcli.export.run import export_ticket
from ticketcli.models.registry import parse_model
from ticketcli.runs import build as runs_build
from ticketcli.runs import extract as runs_extract
from ticketcli.runs.record import model_record
from ticketcli.seeding import fingerprint
from ticketcli.specs.run import DataSpec, InitSpec, MethodSpec, ReaderSpec, RunSpec
from ticketcli.ticketfile import ticket as ticket_io

DIRS = ("/usr/share/datasets",)
DIGITS_MODELS = [
    "mlp:64-32-32-10",
    "mlp:64-32-32-10+res+norm=batch",
    "mlp:64-32-32-10+res+norm=layer+bias",
    "mlp:64-32-32-10+norm=rms",
    "conv2",
    "conv4",
    "conv6",
    "vgg:16-M-32-M+bias",
    "resnet20",
    "resnet18",
    "wrn:16-2",
    "vit:p4-d32-l2-h4",
]
FASHION_MODELS = ["mlp:784-256-256-256-10", "lenet300"]
GPT = "gpt-nano:l2-d64-h4-c64-v96"


def session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def extract(d: Path, model: str, dataset: str, method: str, epochs: int, n_extract: int | None) -> Path:
    info = DATASETS.get(dataset)
    spec = RunSpec(
        model=parse_model(model).with_data(info.shape, info.classes),
        init=InitSpec(seed=0),
        data=DataSpec(
            name=dataset,
            n_extract=n_extract or info.n_extract,
            n_val=min(info.n_val, n_extract or info.n_val),
            split_seed=0,
            search_dirs=DIRS,
        ),
        method=MethodSpec(name=method, sparsity=0.9, epochs=epochs if method != "random" else 1),
        device="cpu",
    )
    out = d / f"{model.replace(':', '_')}.safetensors"
    runs_extract.extract_ticket(spec, out=out)
    return out


def image_row(ticket: Path, onnx_path: Path) -> dict:
    opened = runs_build.open_ticket(ticket, ReaderSpec(ReaderSpec(data=DataSpec(search_dirs=DIRS), device="cpu")))
    opened.net.calibrate(opened.masks)
    x, y = opened.splits.x_test, opened.splits.y_test
    with torch.no_grad():
        expected = opened.net(x, opened.masks)
    got = torch.from_numpy(session(onnx_path).run([ONNX_OUTPUT], {ONNX_INPUT: x.numpy()})[0])
    return {
        "n": len(y),
        "diff": float((got - expected).abs().max()),
        "torch": int((expected.argmax(1) == y).sum()) / len(y),
        "onnx": int((got.argmax(1) == y).sum()) / len(y),
    }


def gpt_ticket(d: Path, base: Path) -> Path:
    tk = ticket_io.load(base)
    model = parse_model(GPT)
    net, weights = runs_build.build_net(model, tk.init.spec(), None)
    g = torch.Generator().manual_seed(0)
    masks = {n: torch.rand(net.weights[n].shape, generator=g) < 0.1 for n in net.names}
    gt = replace(
        tk,
        masks=masks,
        shapes={},
        model=model_record(model, net),
        weights_sha256=fingerprint(weights),
        masks_sha256=None,
    )
    ticket_io.save(gt, d / "gpt.safetensors")
    return d / "gpt.safetensors"


def gpt_row(ticket: Path, onnx_path: Path) -> dict:
    tk = ticket_io.load(ticket)
    net, _ = runs_build.rebuild(tk, ticket, None)
    ids = torch.randint(0, 96, (256, 64), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = net(ids, tk.masks)
    got = torch.from_numpy(session(onnx_path).run([ONNX_OUTPUT], {ONNX_INPUT: ids.numpy()})[0])
    same = float((got.argmax(-1) == expected.argmax(-1)).float().mean())
    return {"n": ids.numel(), "diff": float((got - expected).abs().max()), "torch": None, "onnx": same}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", default="augmented")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--n-extract", type=int, default=None, help="extraction examples (default: the dataset's)")
    ap.add_argument("--no-fashion", action="store_true", help="skip the FashionMNIST models")
    args = ap.parse_args()
    torch.set_num_threads(1)
    runs = [(m, "digits") for m in DIGITS_MODELS]
    if not args.no_fashion:
        runs += [(m, "fashion-mnist") for m in FASHION_MODELS]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for model, dataset in [*runs, (GPT, "")]:
            if model == GPT:
                ticket = gpt_ticket(d, extract(d, "mlp:64-16-10", "digits", "random", 1, 64))
            else:
                ticket = extract(d, model, dataset, args.method, args.epochs, args.n_extract)
            out = d / f"{ticket.stem}.onnx"
            t0 = time.perf_counter()
            result = export_ticket(ticket, fmt="onnx", out=out, reader=ReaderSpec(data=DataSpec(search_dirs=DIRS)))
            wall = time.perf_counter() - t0
            row = gpt_row(ticket, out) if model == GPT else image_row(ticket, out)
            assert result.onnx is not None
            rows.append((model, dataset or "random ids", result, wall, row))
            print(f"  {model}: max |diff| {row['diff']:.2e}", flush=True)
    print(
        "\n| model | data | test examples | max abs logit diff | torch test acc | onnxruntime test acc "
        "| .onnx bytes | dense float32 bytes | export s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for model, dataset, result, wall, row in rows:
        torch_acc = "-" if row["torch"] is None else f"{100 * row['torch']:.2f}%"
        onnx_acc = f"{100 * row['onnx']:.2f}%" + (" (same argmax)" if row["torch"] is None else "")
        print(
            f"| {model} | {dataset} | {row['n']:,} | {row['diff']:.2e} | {torch_acc} | {onnx_acc} "
            f"| {result.file_bytes:,} | {result.dense_float32_bytes:,} | {wall:.1f} |"
        )
    print(f"\ntorch {torch.__version__}, onnxruntime {ort.__version__}, 1 thread each")


if __name__ == "__main__":
    main()
