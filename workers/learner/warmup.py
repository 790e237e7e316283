"""Imported by the learner fork server: pays torch's lazy first-use costs once per slot.

The first optimizer imports much of torch lazily (its constructor imports torch._dynamo:
1.3 s of CPU on a quiet 2-core host, several seconds on a busy one), and so does its first
step; done here, every learner forked afterwards starts with it done (the drive's fork
server preloads it too). The fork server also becomes a subreaper: whatever a learner leaves
behind (``setsid`` children included) comes back to it, and the slot's worker kills it all
when the learner ends (``workers/sandbox.py``).
"""

from __future__ import annotations

import torch

from workers import sandbox


def _warm() -> None:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(2)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss = torch.nn.functional.cross_entropy(
        model(torch.zeros(2, 3, 8, 8)), torch.zeros(2, dtype=torch.long)
    )
    loss.backward()  # type: ignore[no-untyped-call]
    optimizer.step()
    torch.optim.Adam(model.parameters()).step()


_warm()
sandbox.become_subreaper()
