"""Teams and resource groups (docs/architecture.md, "Tenancy").

A **resource group** is a named set of slots, defined by ordered rules
(``scheduler/groups.py``); a slot no rule takes is in ``default``, which always exists. A
**team** has a weight, a guarantee and a limit (in slots), an optional parent team, a
default resource group and the other groups its jobs may use; its **members** see its jobs,
its **leads** may also change their priority or stop them. A user has at most one default
team, which their jobs go to unless they name another.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

from scheduler.groups import DEFAULT, NAME, Rule, RuleError, rule_from

NAMED = RegexValidator(
    NAME.pattern,
    "use letters, digits, '.', '_' and '-' (starting with a letter or a digit), at most 100",
)


class ResourceGroupManager(models.Manager["ResourceGroup"]):
    def default(self) -> ResourceGroup:
        """The ``default`` group, made again if it is missing (a data migration makes it;
        an emptied database loses it)."""
        group, _ = self.get_or_create(name=DEFAULT)
        return group


class ResourceGroup(models.Model):
    name = models.CharField(max_length=100, unique=True, validators=[NAMED])
    rules = models.JSONField(
        default=list, blank=True,
        help_text="ordered: each {host, device, model, slots}; a slot's group is its first "
        "matching rule's",
    )  # fmt: skip
    position = models.PositiveIntegerField(
        default=100, help_text="the groups' rules are tried in this order (then by name)"
    )
    shrink_idle = models.BooleanField(
        default=False, help_text="its idle jobs are shrunk to their minimum (never stopped)"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ResourceGroupManager()

    class Meta:
        ordering = ["position", "name"]

    def __str__(self) -> str:
        return self.name

    def parsed_rules(self) -> list[Rule]:
        return [rule_from(self.name, parts) for parts in self.rules]

    def clean(self) -> None:
        if not isinstance(self.rules, list) or not all(isinstance(r, dict) for r in self.rules):
            raise ValidationError({"rules": "a list of rules, each {host, device, model, slots}"})
        try:
            parsed = self.parsed_rules()
        except RuleError as exc:
            raise ValidationError({"rules": str(exc)}) from None
        self.rules = [r.as_dict() for r in parsed]


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True, validators=[NAMED])
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    weight = models.PositiveIntegerField(
        default=1, validators=[MinValueValidator(1)],
        help_text="its share beside its sibling teams, once their guarantees are met",
    )  # fmt: skip
    guarantee = models.PositiveIntegerField(default=0, help_text="slots it is owed when it asks")
    limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="the most slots it may hold; empty: no limit"
    )
    shrink_idle = models.BooleanField(
        default=False,
        help_text="its idle jobs, its sub-teams' too, are shrunk to their minimum (never stopped)",
    )
    resource_group = models.ForeignKey(
        ResourceGroup, to_field="name", db_column="resource_group", default=DEFAULT,
        on_delete=models.PROTECT, related_name="teams",
        help_text="the group its jobs run in unless they name another it may use",
    )  # fmt: skip
    allowed_groups = models.ManyToManyField(
        ResourceGroup, blank=True, related_name="allowing_teams",
        help_text="other groups its jobs may name",
    )  # fmt: skip
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="teams"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(limit__isnull=True) | models.Q(guarantee__lte=models.F("limit")),
                name="team_guarantee_within_limit",
                violation_error_message="a team's guarantee is at most its limit",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def groups_allowed(self) -> list[str]:
        """The groups its jobs may run in: its own first, then the others allowed."""
        others = [g.name for g in self.allowed_groups.all() if g.name != self.resource_group_id]
        return [str(self.resource_group_id), *others]

    def ancestors(self) -> list[Team]:
        """Its parent, the parent's parent, ... up to the top, or to where a chain of
        parents comes back to a team already in it (itself, say: a cycle)."""
        chain: list[Team] = []
        seen: set[int | None] = set()
        parent = self.parent
        while parent is not None and parent.pk not in seen:
            chain.append(parent)
            seen.add(parent.pk)
            parent = parent.parent
        return chain

    def clean(self) -> None:
        errors: dict[str, Any] = {}
        if self.limit is not None and self.guarantee > self.limit:
            errors["guarantee"] = f"a guarantee of {self.guarantee} is over the limit {self.limit}"
        if self.pk is not None and any(t.pk == self.pk for t in self.ancestors()):
            errors["parent"] = f"{self.parent} is {self.name} or one of its sub-teams"
        if errors:
            raise ValidationError(errors)


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    lead = models.BooleanField(
        default=False, help_text="may change the priority of the team's jobs and stop them"
    )
    default = models.BooleanField(
        default=False, help_text="the user's default team: their jobs go there unless named"
    )

    class Meta:
        ordering = ["team__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="one_membership_per_team"),
            models.UniqueConstraint(
                fields=["user"], condition=models.Q(default=True), name="one_default_team_per_user"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team}{' (lead)' if self.lead else ''}"


class SlotTime(models.Model):
    """One interval a job held slots (docs/architecture.md, "Tenancy"): appended when its
    timeline closes the interval (``edtweb/tenancy/ledger.py``), never changed, and kept
    when the job, its owner or its team is deleted: the ids are plain numbers and the names
    are kept beside them, so usage stays with whoever may see it."""

    job_id = models.PositiveIntegerField()
    owner_id = models.PositiveIntegerField(null=True)
    owner_name = models.CharField(max_length=150)
    team_id = models.PositiveIntegerField(null=True)
    team_name = models.CharField(max_length=100, blank=True)
    resource_group = models.CharField(max_length=100)
    start = models.DateTimeField()
    end = models.DateTimeField()
    slots = models.PositiveIntegerField()
    # 0..1: how busy its slots were as they last reported when it closed (NVML's GPU
    # utilisation, or the learner's CPU use of one core); None: not known.
    utilisation = models.FloatField(null=True)

    class Meta:
        indexes = [models.Index(fields=["end"]), models.Index(fields=["job_id"])]
