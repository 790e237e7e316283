"""Resource groups' rules (scheduler/groups.py, pure): a slot's group is the group of the
first rule it matches, else ``default``; rules as people write them, and the errors for
those that cannot be read. Tables, each run with the rules given and reversed where order
does not decide."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from protocol.slots import SlotInfo
from scheduler.groups import DEFAULT, Rule, RuleError, group_of, parse_rule, partition, rule_from


@dataclass(frozen=True)
class Slot:
    host: str
    device: str = "cpu"
    model: str = ""
    host_slots: int = 4


H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"
RULES = [
    parse_rule("h100", "host=gpu*,device=gpu,model=*H100*"),
    parse_rule("big", "device=gpu,slots=8"),
    parse_rule("cpu", "device=cpu"),
]

CASES = [
    # (slot, group)
    (Slot("gpu-01", "GPU-1", H100, 8), "h100"),  # the first rule wins over "big"
    (Slot("GPU-02", "GPU-2", H100.lower(), 4), "h100"),  # globs ignore case
    (Slot("node-01", "GPU-3", H100, 8), "big"),  # not a gpu* host: the next rule
    (Slot("gpu-03", "GPU-4", A100, 8), "big"),
    (Slot("gpu-04", "GPU-5", A100, 4), DEFAULT),  # no rule takes it
    (Slot("gpu-05", "cpu", "", 4), "cpu"),
]


@pytest.mark.parametrize(("slot", "group"), CASES)
def test_a_slot_is_in_the_group_of_the_first_rule_it_matches(slot: Slot, group: str) -> None:
    assert group_of(slot, RULES) == group


def test_order_decides_between_rules_that_both_match() -> None:
    slot = Slot("gpu-01", "GPU-1", H100, 8)
    assert group_of(slot, RULES) == "h100"
    assert group_of(slot, list(reversed(RULES))) == "big"


@pytest.mark.parametrize("reverse", [False, True], ids=["given-order", "reversed"])
def test_partition_keeps_each_groups_slots_in_order(reverse: bool) -> None:
    slots = [slot for slot, _ in CASES]
    rules = list(reversed(RULES)) if reverse else RULES
    groups = partition(slots, rules)
    assert sum(len(g) for g in groups.values()) == len(slots)
    for name, members in groups.items():
        assert all(group_of(s, rules) == name for s in members)
        assert members == [s for s in slots if s in members]


def test_no_rules_put_every_slot_in_default() -> None:
    assert group_of(Slot("anything"), []) == DEFAULT


def test_a_registered_slot_carries_what_the_rules_read() -> None:
    info = SlotInfo("gpu-01.0", "gpu-01", 0, "GPU-1", "q", "ALIVE", model=H100, host_slots=8)
    assert group_of(info, RULES) == "h100"
    cpu = SlotInfo("gpu-01.1", "gpu-01", 1, "cpu", "q", "ALIVE", host_slots=8)
    assert group_of(cpu, RULES) == "cpu"


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("host=gpu*,device=gpu,model=*H100*,slots=8",
         Rule("g", host="gpu*", device="gpu", model="*H100*", slots=8)),
        (" device = CPU ", Rule("g", device="cpu")),
        ("host=*,model=*", Rule("g")),
        ("", Rule("g")),
    ],
)  # fmt: skip
def test_a_rule_is_read_from_what_people_write_and_written_back(text: str, rule: Rule) -> None:
    assert parse_rule("g", text) == rule
    assert parse_rule("g", rule.text()) == rule
    assert rule_from("g", rule.as_dict()) == rule


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("gpu=yes", "'gpu=yes' is not one of host=, device=, model=, slots="),
        ("hostgpu*", "'hostgpu*' is not one of"),
        ("device=tpu", "device=tpu: a device kind is cpu or gpu"),
        ("slots=many", "slots=many: the slots on a host are a whole number"),
        ("slots=0", "slots=0: a host has at least 1 slot"),
        ("host=a,host=b", "host= is given twice"),
        ("device=cpu,model=*H100*", "a CPU slot has no GPU model"),
    ],
)
def test_a_rule_that_cannot_be_read_says_what_to_write(text: str, words: str) -> None:
    with pytest.raises(RuleError) as refused:
        parse_rule("g", text)
    assert words in str(refused.value)


def test_a_stored_rule_with_an_unknown_part_is_refused() -> None:
    with pytest.raises(RuleError, match="a rule has no part gpus"):
        rule_from("g", {"gpus": 8})
