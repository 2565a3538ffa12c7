"""The forms a ticket's network runs in, each written to its own file and loaded back from it (the load is timed,
and what runs is what was loaded): dense W * M, the sparse runtime form, ONNX Runtime, block-sparse (BSR) and
semi-structured 2:4. A form that cannot run here raises Unavailable with the reason, which the bench reports."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file
from safetensors.torch import save as st_save
from torch import nn

from ticketcli.bench import kernels
from ticketcli.bench import sparse_form as bench_sparse
from ticketcli.export import run as export_run
from ticketcli.export.sparse import graph as sparse_graph
from ticketcli.models.masked import MaskedNet

Run = Callable[[torch.Tensor], torch.Tensor]  # a batch of inputs -> its logits, on the bench's device


class Unavailable(Exception):
    """A form that cannot run on this device or for these masks; its message is the reason."""


@dataclass
class Source:
    """What every form is made from: the ticket's network (BatchNorm statistics recalibrated for its masks) and
    masks on the bench's device, and a scratch folder for the forms' files."""

    net: MaskedNet
    masks: dict[str, torch.Tensor]
    device: torch.device
    workdir: Path
    dataset: str

    def masked_state(self) -> dict[str, torch.Tensor]:
        """The plain state dict with W * M (CPU tensors), what the dense file holds."""
        return export_run.masked_state(self.net, self.masks)

    def skeleton(self) -> nn.Module:
        """A copy of the module on the device, in eval mode: the architecture a file's tensors are loaded into."""
        return copy.deepcopy(self.net.module).to(self.device).eval()


@dataclass
class Built:
    """A form loaded from its file: how to run it, the file's size, the load's time and its tensors' bytes."""

    run: Run
    file_bytes: int
    load_s: float | None  # None: not loaded from its file (a model factory's sparse form)
    memory_bytes: int
    detail: str = ""  # what the form holds, e.g. "3 of 4 Linear layers as 4x4 blocks"


def written(src: Source, name: str, blob: bytes) -> Path:
    path = src.workdir / name
    path.write_bytes(blob)
    return path


def timed_load(path: Path, load: Callable[[Path], nn.Module]) -> tuple[nn.Module, float]:
    t0 = time.perf_counter()
    module = load(path)
    return module, time.perf_counter() - t0


def dense(src: Source) -> Built:
    """W * M as a plain state dict, loaded into the module."""
    path = written(src, "dense.safetensors", st_save(src.masked_state()))
    skeleton = src.skeleton()

    def load(p: Path) -> nn.Module:
        skeleton.load_state_dict(load_file(p, device=str(src.device)))
        return skeleton

    module, load_s = timed_load(path, load)
    return Built(module, path.stat().st_size, load_s, kernels.module_bytes(module))


def sparse(src: Source) -> Built:
    """The sparse runtime form (export/sparse/): each masked layer with a CSR kernel where it measured faster than
    dense on this device, dense where it did not."""
    module, size, load_s, note = bench_sparse.sparse_form(src.net, src.masks, src.device, src.dataset, src.workdir)
    dense = [r for r in module.layers if r.reason == sparse_graph.DIRECT]
    detail = f"{len(module.sparse_layers)} of {len(module.layers)} masked layers sparse"
    detail += "".join(f"; {r.name} dense: an embedding table, read not called" for r in dense)
    detail += f"; {note}" if note else ""
    return Built(module, size, load_s, module.nbytes(), detail)


def linear_weights(src: Source) -> dict[str, nn.Linear]:
    """The masked Linear weights by parameter name -> their Linear modules; of a character-level GPT, those its
    forward pass calls (its token embedding's weight is read as a table: no sparse layer can stand in for it)."""
    owners = dict(src.net.module.named_modules())
    out = {}
    for n in src.net.names:
        owner, _, attr = n.rpartition(".")
        if attr == "weight" and isinstance(owners.get(owner), nn.Linear):
            out[n] = owners[owner]
    example = sparse_graph.ids_example(src.net.module, 1, src.device)
    if example is not None:
        called = sparse_graph.layer_inputs(src.net.module, [n.rpartition(".")[0] for n in out], example)
        out = {n: layer for n, layer in out.items() if n.rpartition(".")[0] in called}
    return out


def replaced(module: nn.Module, weight_name: str, new: nn.Module) -> None:
    """Put `new` where the Linear layer owning `weight_name` is."""
    owner = weight_name.rpartition(".")[0]
    parent, _, attr = owner.rpartition(".")
    setattr(module.get_submodule(parent) if parent else module, attr, new)


Layer = Callable[[torch.Tensor, torch.Tensor | None], nn.Module]  # (W * M, bias) -> the layer computing with it


def structured(src: Source, name: str, layers: dict[str, Layer]) -> Built:
    """A form whose Linear layers in `layers` (weight name -> the sparse layer made of its W * M and bias) are
    sparse and the rest dense W * M: the file holds W * M (the sparse weights are made at load, which is timed)."""
    path = written(src, f"{name}.safetensors", st_save(src.masked_state()))
    skeleton = src.skeleton()

    def load(p: Path) -> nn.Module:
        state = load_file(p, device=str(src.device))
        skeleton.load_state_dict(state)
        for n, make in layers.items():
            bias = state.get(n.rpartition(".")[0] + ".bias")
            replaced(skeleton, n, make(state[n], bias))
        return skeleton

    module, load_s = timed_load(path, load)
    return Built(module, path.stat().st_size, load_s, kernels.module_bytes(module))


BSR_PARTS = ("crow_indices", "col_indices", "values", "shape")


def bsr_state(src: Source, blocks: dict[str, tuple[int, int]]) -> dict[str, torch.Tensor]:
    """W * M with each weight of `blocks` as its BSR arrays (`<name>.crow_indices`, `.col_indices`, `.values` of
    shape (blocks, R, C), `.shape`), the rest dense: the form's file."""
    state = src.masked_state()
    for n, block in blocks.items():
        w = state.pop(n)
        b = kernels.bsr(w, block)
        parts = (b.crow_indices(), b.col_indices(), b.values(), torch.tensor(list(w.shape)))
        state |= {f"{n}.{p}": t.contiguous() for p, t in zip(BSR_PARTS, parts)}
    return state


def bsr(src: Source) -> Built:
    """Block-sparse: each masked Linear layer whose mask is whole square blocks (torch's BSR product takes square
    blocks only) as BSR of its largest such block, in its file too; the other layers dense."""
    blocks = {n: kernels.block_of(src.masks[n], square=True) for n in linear_weights(src)}
    found = {n: b for n, b in blocks.items() if b is not None}
    if not found:
        raise Unavailable("no masked Linear layer's mask is whole square blocks of 2x2 or larger")
    path = written(src, "bsr.safetensors", st_save(bsr_state(src, found)))
    skeleton = src.skeleton()

    def load(p: Path) -> nn.Module:
        state = load_file(p, device=str(src.device))
        skeleton.load_state_dict({k: v for k, v in state.items() if k.rpartition(".")[0] not in found}, strict=False)
        for n in found:
            crow, col, values, shape = (state[f"{n}.{part}"] for part in BSR_PARTS)
            weight = kernels.bsr_tensor(crow, col, values, (int(shape[0]), int(shape[1])))
            replaced(skeleton, n, kernels.SparseLinear(weight, state.get(n.rpartition(".")[0] + ".bias")))
        return skeleton

    module, load_s = timed_load(path, load)
    sizes = sorted({f"{r}x{c}" for r, c in found.values()})
    detail = f"{len(found)} of {len(blocks)} Linear layers as {', '.join(sizes)} blocks"
    return Built(module, path.stat().st_size, load_s, kernels.module_bytes(module), detail)


def semi_structured(src: Source) -> Built:
    """2:4 semi-structured: each masked Linear layer keeping at most 2 of every 4 inputs (CUDA only)."""
    if src.device.type != "cuda":
        raise Unavailable(
            f"torch's semi-structured (2:4) sparse kernels run on CUDA only; this bench runs on {src.device}"
        )
    candidates = [n for n in linear_weights(src) if kernels.is_n_of_m(src.masks[n])]
    if not candidates:
        raise Unavailable("no masked Linear layer keeps at most 2 of every 4 consecutive inputs (a 2:4 mask)")
    layers: dict[str, Layer] = {}
    refused = []
    for n in candidates:  # torch's kernels take some shapes and dtypes only: a layer they refuse stays dense
        try:
            kernels.SemiStructuredLinear(src.masks[n].to(torch.float32), None)
        except (RuntimeError, ValueError) as e:
            refused.append(f"{n}: {str(e).splitlines()[0][:80]}")
            continue
        layers[n] = kernels.SemiStructuredLinear
    if not layers:
        raise Unavailable("torch refuses every 2:4 layer here (" + "; ".join(refused)[:200] + ")")
    built = structured(src, "semi", layers)
    built.detail = f"{len(layers)} of {len(linear_weights(src))} Linear layers as 2:4"
    return built


def onnx(src: Source) -> Built:
    """The masked network as an ONNX model (the `onnx` export), run by onnxruntime with torch's thread count."""
    from ticketcli.export import onnx as export_onnx
    from ticketcli.export.request import require_onnx

    try:
        require_onnx()
    except Exception as e:  # a UsageError naming what is missing
        raise Unavailable(str(e)) from None
    import onnxruntime as ort

    providers = ["CUDAExecutionProvider"] if src.device.type == "cuda" else ["CPUExecutionProvider"]
    if providers[0] not in ort.get_available_providers():
        raise Unavailable(f"onnxruntime has no {providers[0]} here (installed: onnxruntime without CUDA)")
    example = export_onnx.onnx_example(src.net, src.dataset, 2, 0).to(src.device)
    blob, _ = export_onnx.onnx_bytes(src.net, src.masked_state(), example.cpu(), {"format": "ticket-export-onnx"})
    path = written(src, "model.onnx", blob)
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    t0 = time.perf_counter()
    session = ort.InferenceSession(str(path), options, providers=providers)
    load_s = time.perf_counter() - t0

    def run(x: torch.Tensor) -> torch.Tensor:
        out = session.run([export_onnx.ONNX_OUTPUT], {export_onnx.ONNX_INPUT: x.cpu().numpy()})[0]
        return torch.from_numpy(out).to(x.device)

    return Built(run, path.stat().st_size, load_s, path.stat().st_size, "onnxruntime, " + providers[0])


@dataclass(frozen=True)
class Form:
    name: str
    description: str
    build: Callable[[Source], Built]


FORMS = {
    f.name: f
    for f in (
        Form("dense", "W * M as a plain state dict, dense kernels", dense),
        Form("sparse", "the sparse runtime form (export --format sparse), CSR where it pays", sparse),
        Form("onnx", "the onnx export run by ONNX Runtime", onnx),
        Form("bsr", "block-sparse (BSR) Linear layers where the masks are whole blocks", bsr),
        Form("2:4", "semi-structured 2:4 Linear layers (CUDA only)", semi_structured),
    )
}
