"""Training state as a small header and flat byte buffers, for the broadcast at a resize.

Pickling the whole state (``torch.save``) costs a serialization, a CRC and several copies
of every byte on both sides: seconds for a state of a gigabyte. Instead every tensor of the
state is copied once into a flat ``uint8`` buffer per part ("model" first, then the rest:
optimizer, scaler, RNG), which the group broadcasts as it is; only the structure (nested
dicts and lists, with a marker where each tensor was) travels pickled. On the receiving
side the tensors are views into the received buffers: the model's are copied into the
parameters, so its buffer is freed; the rest (optimizer state) keep theirs.
"""

from __future__ import annotations

import io
from typing import Any

import torch

TENSOR = "__edt_tensor__"
ALIGN = 16  # bytes: every tensor starts aligned, so a byte view can be viewed as its dtype


class Packer:
    def __init__(self) -> None:
        self.tensors: dict[str, list[tuple[int, torch.Tensor]]] = {}
        self.sizes: dict[str, int] = {}

    def strip(self, obj: Any, part: str) -> Any:
        """``obj`` with each tensor replaced by a marker: (TENSOR, part, offset, dtype,
        shape, device)."""
        if isinstance(obj, torch.Tensor):
            offset = self.sizes.get(part, 0)
            nbytes = obj.numel() * obj.element_size()
            self.tensors.setdefault(part, []).append((offset, obj))
            self.sizes[part] = offset + -(-nbytes // ALIGN) * ALIGN
            dtype = str(obj.dtype).removeprefix("torch.")
            return (TENSOR, part, offset, dtype, list(obj.shape), str(obj.device))
        if isinstance(obj, dict):
            return {k: self.strip(v, part) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.strip(v, part) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.strip(v, part) for v in obj)
        return obj

    def flat(self, part: str, device: torch.device) -> torch.Tensor:
        out = torch.empty(self.sizes.get(part, 0), dtype=torch.uint8, device=device)
        for offset, t in self.tensors.get(part, []):
            data = t.detach().reshape(-1).view(torch.uint8) if t.numel() else t.new_empty(0)
            out[offset : offset + data.numel()].copy_(data.view(torch.uint8))
        return out


def pack(parts: dict[str, Any], device: torch.device) -> tuple[bytes, dict[str, torch.Tensor]]:
    """(header, flat buffer per part). The header lists each part's buffer size."""
    packer = Packer()
    skeleton = {part: packer.strip(value, part) for part, value in parts.items()}
    header = {"skeleton": skeleton, "sizes": {p: packer.sizes.get(p, 0) for p in parts}}
    buf = io.BytesIO()
    torch.save(header, buf)
    return buf.getvalue(), {p: packer.flat(p, device) for p in parts}


def read_header(blob: bytes) -> dict[str, Any]:
    header: dict[str, Any] = torch.load(io.BytesIO(blob), weights_only=True)
    return header


def rebuild(obj: Any, flats: dict[str, torch.Tensor]) -> Any:
    """The inverse of ``Packer.strip``: views into ``flats``, on each tensor's own device."""
    if isinstance(obj, tuple) and len(obj) == 6 and obj[0] == TENSOR:
        _, part, offset, dtype_name, shape, device = obj
        dtype = getattr(torch, dtype_name)
        numel = 1
        for n in shape:
            numel *= n
        nbytes = numel * torch.empty(0, dtype=dtype).element_size()
        data = flats[part][offset : offset + nbytes].view(dtype).view(shape)
        return data.to(torch.device(device))
    if isinstance(obj, dict):
        return {k: rebuild(v, flats) for k, v in obj.items()}
    if isinstance(obj, list):
        return [rebuild(v, flats) for v in obj]
    if isinstance(obj, tuple):
        return tuple(rebuild(v, flats) for v in obj)
    return obj
