"""Resource groups: which group a slot belongs to, by the first rule it matches.

Pure (docs/architecture.md, "Tenancy"): no Django, Redis or Celery. A rule names its group
and says what a slot must be for it: a host name glob, a device kind (``cpu`` or ``gpu``),
a GPU model glob (the name NVML reports, e.g. ``NVIDIA H100 80GB HBM3``) and the number of
slots on its host. An empty or ``*`` part matches anything. The rules are tried in order
(the groups' positions, then each group's own order); a slot no rule takes is in
``default``.

A rule as people write it (``edt admin groups add``, the API): comma-separated
``key=value`` parts, e.g. ``host=gpu*,device=gpu,model=*H100*,slots=8``.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

DEFAULT = "default"
KINDS = ("cpu", "gpu")
KEYS = ("host", "device", "model", "slots")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class SlotFacts(Protocol):
    """What a rule reads of a slot (``protocol.slots.SlotInfo`` has it)."""

    @property
    def host(self) -> str: ...
    @property
    def device(self) -> str: ...  # "cpu", or the GPU's UUID
    @property
    def model(self) -> str: ...  # the GPU's model name (NVML); "" for a CPU slot
    @property
    def host_slots(self) -> int: ...  # slots on its host; 0 where unknown


@dataclass(frozen=True)
class Rule:
    """One rule of ``group``: every part given must hold."""

    group: str
    host: str = ""  # glob on the host name, case-insensitive
    device: str = ""  # "cpu", "gpu" or "" (either)
    model: str = ""  # glob on the GPU model's name, case-insensitive
    slots: int | None = None  # exactly this many slots on the host

    def matches(self, slot: SlotFacts) -> bool:
        if self.device and kind_of(slot.device) != self.device:
            return False
        if not _glob(slot.host, self.host) or not _glob(slot.model, self.model):
            return False
        return self.slots is None or slot.host_slots == self.slots

    def text(self) -> str:
        """The rule as people write it (:func:`parse_rule` reads it back)."""
        parts = [f"{k}={v}" for k, v in (("host", self.host), ("device", self.device),
                                          ("model", self.model)) if v]  # fmt: skip
        if self.slots is not None:
            parts.append(f"slots={self.slots}")
        return ",".join(parts) or "host=*"

    def as_dict(self) -> dict[str, Any]:
        """The rule's parts as stored (without its group)."""
        return {k: v for k, v in asdict(self).items() if k != "group"}


def kind_of(device: str) -> str:
    """A slot's device kind: ``cpu``, else ``gpu`` (its device is a GPU's UUID)."""
    return "cpu" if device == "cpu" else "gpu"


def _glob(value: str, pattern: str) -> bool:
    return not pattern or pattern == "*" or fnmatch.fnmatchcase(value.lower(), pattern.lower())


def group_of(slot: SlotFacts, rules: Iterable[Rule]) -> str:
    """The group of the first rule ``slot`` matches; ``default`` when none does."""
    for rule in rules:
        if rule.matches(slot):
            return rule.group
    return DEFAULT


def partition(slots: Iterable[Any], rules: Sequence[Rule]) -> dict[str, list[Any]]:
    """Group name -> its slots, in the order given (a snapshot is built per group)."""
    out: dict[str, list[Any]] = {}
    for slot in slots:
        out.setdefault(group_of(slot, rules), []).append(slot)
    return out


class RuleError(ValueError):
    """A rule that cannot be read, with a sentence saying what to write instead."""


def parse_rule(group: str, text: str) -> Rule:
    """``host=gpu*,device=gpu,model=*H100*,slots=8`` as a rule of ``group``."""
    parts: dict[str, str] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not sep or key not in KEYS:
            keys = ", ".join(k + "=" for k in KEYS)
            raise RuleError(f"rule {text!r}: {item!r} is not one of {keys} "
                            "(e.g. host=gpu*,device=gpu,model=*H100*,slots=8)")  # fmt: skip
        if key in parts:
            raise RuleError(f"rule {text!r}: {key}= is given twice")
        parts[key] = value
    return rule_from(group, parts)


def rule_from(group: str, parts: Mapping[str, Any]) -> Rule:
    """A rule of ``group`` from its stored parts (``host``, ``device``, ``model``,
    ``slots``), each checked."""
    unknown = sorted(set(parts) - set(KEYS))
    if unknown:
        raise RuleError(f"a rule has no part {', '.join(unknown)}; its parts: {', '.join(KEYS)}")
    device = str(parts.get("device") or "").lower()
    if device not in ("", *KINDS):
        raise RuleError(f"device={device}: a device kind is cpu or gpu")
    slots = parts.get("slots")
    if slots is not None and slots != "":
        try:
            count = int(slots)
        except (TypeError, ValueError):
            raise RuleError(f"slots={slots}: the slots on a host are a whole number") from None
        if count < 1:
            raise RuleError(f"slots={slots}: a host has at least 1 slot")
    else:
        count = None
    host, model = (str(parts.get(k) or "").strip() for k in ("host", "model"))
    host, model = ("" if glob == "*" else glob for glob in (host, model))  # "*": anything
    if device == "cpu" and model not in ("", "*"):
        raise RuleError(f"model={model} with device=cpu: a CPU slot has no GPU model")
    return Rule(group, host=host, device=device, model=model, slots=count)
