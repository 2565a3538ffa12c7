"""Export sizes of the paper's MLP and conv6 tickets in every format (onnx included) vs the dense float32 checkpoint.

    python benchmarks/export_sizes.py                    # FashionMNIST, seed 0, requested sparsity 90%
    python benchmarks/export_sizes.py --epochs 100       # augmented MLP at the full budget

Rows: the paper's MLP with an augmented ticket (--epochs score-training epochs; its achieved sparsity is lower
than requested) and with a random ticket at exactly 90%; conv6 with a random ticket at exactly 90% (the density
edge-popup keeps; no training needed for sizes). "dense" is the model's float32 state dict as safetensors.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from ticketcli.export.run import FORMATS, export_ticket
from ticketcli.runs.extract import extract_ticket
from ticketcli.settings.readers import read_by
from ticketcli.settings.resolve import build_extract_spec, merge_settings

SUFFIX = {"masked": ".safetensors", "prune": ".pt", "csr": ".safetensors", "masks": ".safetensors", "onnx": ".onnx"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--sparsity", type=float, default=0.9)
    args = ap.parse_args()
    runs = [("mlp:784-256-256-256-10", "augmented"), ("mlp:784-256-256-256-10", "random"), ("conv6", "random")]
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for i, (model, method) in enumerate(runs):
            spec = build_extract_spec(
                merge_settings(
                    {
                        "model": model,
                        "method": method,
                        "sparsity": args.sparsity,
                        **read_by(method, {"epochs": args.epochs}),
                        "device": "cpu",
                    },
                    None,
                )
            )
            ticket = Path(d) / f"t{i}.safetensors"
            s = extract_ticket(spec, out=ticket)
            sizes = {fmt: export_ticket(ticket, fmt=fmt, out=Path(d) / f"{i}-{fmt}{SUFFIX[fmt]}") for fmt in FORMATS}
            rows.append((s, sizes))
            print(f"  {s['model']} {method}: achieved {100 * s['sparsity']['achieved']:.2f}%", flush=True)
    print(
        "\n| model | ticket | achieved sparsity % | dense float32 | ticket file | "
        + " | ".join(f"{f} ({SUFFIX[f]})" for f in FORMATS)
        + " | csr payload |"
    )
    print("|---|---|---|---|---|" + "---|" * (len(FORMATS) + 1))
    for s, sizes in rows:
        dense = sizes["masked"]["dense_float32_bytes"]
        cells = [f"{sizes[f]['file_bytes']:,} ({sizes[f]['ratio']:.3f})" for f in FORMATS]
        print(
            f"| {s['model']} | {s['method']['name']} | {100 * s['sparsity']['achieved']:.2f} | {dense:,} | "
            f"{s['file_bytes']:,} ({s['file_bytes'] / dense:.3f}) | "
            + " | ".join(cells)
            + f" | {sizes['csr']['csr_payload_bytes']:,} |"
        )
    print("\nbytes (ratio to the dense float32 checkpoint)")


if __name__ == "__main__":
    main()
