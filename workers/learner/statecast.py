"""Training state as a small header, flat byte buffers and large tensors in place, for the
broadcast at a resize.

Pickling the whole state (``torch.save``) costs a serialization, a CRC and several copies
of every byte on both sides: seconds for a state of a gigabyte. Instead:

- **large tensors** (``BIG_BYTES`` and over, on the transfer device) travel one broadcast
  each, straight from the sender's own tensor: no packing copy. A joiner receives them
  into its own tensor at the same place in its state (a parameter) where it has one of
  that dtype and shape, nothing to load afterwards, and its optimizer's state (which a new
  optimizer does not have yet) into spares it zeroed while starting up. A learner that
  holds the state already receives into new tensors and loads them once all are in
  (``Learner.sync_state``): a failure midway must not leave it with a torn state.
- **small tensors** are copied into one flat ``uint8`` buffer per part ("model" first, then
  the rest: optimizer, scaler, RNG), broadcast as it is; on the receiving side they are
  views into the received buffer.
- **the structure** (nested dicts and lists, with a marker where each tensor was) travels
  pickled in the header.

Memory this machine has not touched recently costs over a second per GB to fill for the
first time (bench/results/engine.md, section 5): receiving into tensors that exist is what
makes the in-place path several times faster for a large model.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

TENSOR = "__edt_tensor__"  # packed: (TENSOR, part, offset, dtype, shape, device)
BIG = "__edt_big__"  # in place: (BIG, index, dtype, shape, device)
ALIGN = 16  # bytes: every tensor starts aligned, so a byte view can be viewed as its dtype
BIG_BYTES = 1 << 18  # a broadcast each from 256 KiB (examples/mlp.py's first weight is 768 KiB)


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


class Packer:
    def __init__(self, device: torch.device, big_bytes: int = BIG_BYTES) -> None:
        self.device, self.big_bytes = device, big_bytes
        self.tensors: dict[str, list[tuple[int, torch.Tensor]]] = {}
        self.sizes: dict[str, int] = {}
        self.bigs: list[torch.Tensor] = []

    def strip(self, obj: Any, part: str) -> Any:
        """``obj`` with each tensor replaced by a marker."""
        if isinstance(obj, torch.Tensor):
            nbytes = obj.numel() * obj.element_size()
            dtype, shape, device = _dtype_name(obj), list(obj.shape), str(obj.device)
            if nbytes >= self.big_bytes and obj.device == self.device:
                self.bigs.append(obj.detach().contiguous())
                return (BIG, len(self.bigs) - 1, dtype, shape, device)
            offset = self.sizes.get(part, 0)
            self.tensors.setdefault(part, []).append((offset, obj))
            self.sizes[part] = offset + -(-nbytes // ALIGN) * ALIGN
            return (TENSOR, part, offset, dtype, shape, device)
        if isinstance(obj, dict):
            return {k: self.strip(v, part) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.strip(v, part) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.strip(v, part) for v in obj)
        return obj

    def flat(self, part: str) -> torch.Tensor:
        out = torch.empty(self.sizes.get(part, 0), dtype=torch.uint8, device=self.device)
        for offset, t in self.tensors.get(part, []):
            data = t.detach().reshape(-1).view(torch.uint8) if t.numel() else t.new_empty(0)
            out[offset : offset + data.numel()].copy_(data.view(torch.uint8))
        return out


@dataclass
class Packed:
    """What the sender broadcasts, in this order: ``header``, each part's flat buffer, each
    large tensor."""

    header: bytes
    flats: dict[str, torch.Tensor]
    bigs: list[torch.Tensor] = field(default_factory=list)


def pack(parts: dict[str, Any], device: torch.device, big_bytes: int = BIG_BYTES) -> Packed:
    packer = Packer(device, big_bytes)
    skeleton = {part: packer.strip(value, part) for part, value in parts.items()}
    header = {"skeleton": skeleton, "sizes": {p: packer.sizes.get(p, 0) for p in parts}}
    buf = io.BytesIO()
    torch.save(header, buf)
    return Packed(buf.getvalue(), {p: packer.flat(p) for p in parts}, packer.bigs)


def read_header(blob: bytes) -> dict[str, Any]:
    header: dict[str, Any] = torch.load(io.BytesIO(blob), weights_only=True)
    return header


def _marker(obj: Any, kind: str) -> bool:
    return isinstance(obj, tuple) and len(obj) == (6 if kind == TENSOR else 5) and obj[0] == kind


def _child(own: Any, key: Any) -> Any:
    if isinstance(own, dict):
        return own.get(key)
    if isinstance(own, list | tuple) and isinstance(key, int) and key < len(own):
        return own[key]
    return None


Spares = dict[tuple[str, tuple[int, ...], str], list[torch.Tensor]]


def spares_for(
    params: Sequence[torch.Tensor], per_param: int, big_bytes: int = BIG_BYTES
) -> Spares:
    """Zeroed tensors shaped like the large parameters, ``per_param`` of each: a joiner
    makes them while it starts up, so that the optimizer state it receives (which its own
    new optimizer does not have yet: a momentum buffer, Adam's moments) lands in memory
    already touched, not in new memory during the stall."""
    spares: Spares = {}
    for p in params:
        if p.numel() * p.element_size() >= big_bytes and p.is_contiguous():
            key = (_dtype_name(p), tuple(p.shape), str(p.device))
            spares.setdefault(key, []).extend(torch.zeros_like(p) for _ in range(per_param))
    return spares


def spare_count(optimizer: torch.optim.Optimizer) -> int:
    """State tensors per parameter that the usual optimizers keep: Adam's two moments;
    SGD's momentum buffer (none without momentum); RMSprop's average of squares, with a
    momentum buffer and an average of gradients where asked; else one (Adagrad's sum)."""
    defaults = optimizer.defaults
    if "betas" in defaults:
        return 2
    if isinstance(optimizer, torch.optim.SGD):
        return 1 if defaults.get("momentum") else 0
    if isinstance(optimizer, torch.optim.RMSprop):
        return 1 + bool(defaults.get("momentum")) + bool(defaults.get("centered"))
    return 1


def destinations(
    skeleton: Any, own: Any, spares: Spares | None = None
) -> tuple[list[torch.Tensor], set[int]]:
    """Where each large tensor of ``skeleton`` is received: the tensor at the same place in
    ``own`` (the receiver's own state) when it is contiguous and of the same dtype, shape and
    device, else a spare of that kind, else a new one. Also the indices received in place."""
    spares = spares if spares is not None else {}
    out: dict[int, torch.Tensor] = {}
    in_place: set[int] = set()

    def walk(skel: Any, mine: Any) -> None:
        if _marker(skel, BIG):
            _, index, dtype_name, shape, device = skel
            dtype = getattr(torch, dtype_name)
            if (isinstance(mine, torch.Tensor) and mine.dtype == dtype
                    and list(mine.shape) == shape and str(mine.device) == device
                    and mine.is_contiguous()):  # fmt: skip
                out[index] = mine.detach()
                in_place.add(index)
            elif spares.get((dtype_name, tuple(shape), device)):
                out[index] = spares[(dtype_name, tuple(shape), device)].pop()
            else:
                out[index] = torch.empty(shape, dtype=dtype, device=torch.device(device))
        elif isinstance(skel, dict):
            for k, v in skel.items():
                walk(v, _child(mine, k))
        elif isinstance(skel, list | tuple) and not _marker(skel, TENSOR):
            for i, v in enumerate(skel):
                walk(v, _child(mine, i))

    walk(skeleton, own)
    return [out[i] for i in range(len(out))], in_place


def rebuild(
    obj: Any, flats: dict[str, torch.Tensor], bigs: list[torch.Tensor] | None = None
) -> Any:
    """The inverse of ``Packer.strip``: views into ``flats`` on each tensor's own device,
    and the received large tensors themselves."""
    if _marker(obj, BIG):
        assert bigs is not None, "a large tensor's marker, but no large tensors given"
        return bigs[obj[1]]
    if _marker(obj, TENSOR):
        _, part, offset, dtype_name, shape, device = obj
        dtype = getattr(torch, dtype_name)
        numel = 1
        for n in shape:
            numel *= n
        nbytes = numel * torch.empty(0, dtype=dtype).element_size()
        data = flats[part][offset : offset + nbytes].view(dtype).view(shape)
        return data.to(torch.device(device))
    if isinstance(obj, dict):
        return {k: rebuild(v, flats, bigs) for k, v in obj.items()}
    if isinstance(obj, list):
        return [rebuild(v, flats, bigs) for v in obj]
    if isinstance(obj, tuple):
        return tuple(rebuild(v, flats, bigs) for v in obj)
    return obj


def in_place_keys(skeleton: dict[str, Any], in_place: set[int]) -> set[str]:
    """The top-level keys of a flat state (a model's ``state_dict``) received in place."""
    return {k for k, v in skeleton.items() if _marker(v, BIG) and v[1] in in_place}
