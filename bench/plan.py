"""Who the gateway run's agents are, what each sender sends to, and which daemon hosts whom.

Pure code, so a unit test checks the layout without starting a process. The bench is a client
of the API and does not import the gateway: the group size bounds and the `group:` syntax
below restate the contract (clients/python/contract/src/harness_contract/addresses.py), and a unit test pins them to it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

PAIR_SIZE: Final = 2
"""`--group-size` of the direct pair mode: a sender and one receiver."""
GROUP_MIN_MEMBERS: Final = 3
"""Fewest members of a group conversation, the sender included (the contract's bound)."""
GROUP_MAX_MEMBERS: Final = 32
"""Most members of a group conversation, the sender included (the contract's bound)."""
MAX_DAEMONS: Final = 2
"""Most daemons: with two, every sender is on one and its receivers on the other."""
AGENT_PREFIX: Final = "agent:"
GROUP_PREFIX: Final = "group:"


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentPlan:
    """One agent to register: its name and the daemon (index) that hosts it."""

    name: str
    daemon: int

    @property
    def address(self) -> str:
        """`agent:<name>`."""
        return AGENT_PREFIX + self.name


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupPlan:
    """One sender and the agents it sends to: a direct pair (one receiver) or a group."""

    index: int
    sender: AgentPlan
    receivers: tuple[AgentPlan, ...]

    @property
    def address(self) -> str:
        """What the sender sends to: `agent:<receiver>` for a pair, else the group address."""
        if len(self.receivers) == 1:
            return self.receivers[0].address
        return group_address(receiver.name for receiver in self.receivers)


def group_address(others: Iterable[str]) -> str:
    """`group:<names>` naming the members other than the sender, sorted. The gateway adds
    the sender to the membership (engine.md §1.2), so this names the same conversation as
    the canonical address that lists the sender too."""
    return GROUP_PREFIX + ",".join(sorted(others))


def check_layout(*, group_size: int, daemons: int) -> None:
    """Raise ValueError for a conversation size or daemon count the bench cannot run."""
    if group_size != PAIR_SIZE and not GROUP_MIN_MEMBERS <= group_size <= GROUP_MAX_MEMBERS:
        raise ValueError(
            f"group size must be {PAIR_SIZE} (direct pairs) or {GROUP_MIN_MEMBERS}.."
            f"{GROUP_MAX_MEMBERS}, not {group_size}"
        )
    if not 1 <= daemons <= MAX_DAEMONS:
        raise ValueError(f"daemons must be 1..{MAX_DAEMONS}, not {daemons}")


def plan_groups(count: int, *, group_size: int, daemons: int) -> tuple[GroupPlan, ...]:
    """`count` conversations of `group_size` agents. With one daemon every agent is on it;
    with two, each sender is on daemon 0 and its receivers on daemon 1, so every post
    crosses the Router."""
    check_layout(group_size=group_size, daemons=daemons)
    receivers_on = 0 if daemons == 1 else 1
    plans: list[GroupPlan] = []
    for index in range(count):
        if group_size == PAIR_SIZE:
            # The pair mode's names predate groups; kept so runs stay comparable in logs.
            names = [f"bench-receiver-{index}"]
        else:
            names = [f"bench-receiver-{index}-{member}" for member in range(1, group_size)]
        plans.append(
            GroupPlan(
                index=index,
                sender=AgentPlan(name=f"bench-sender-{index}", daemon=0),
                receivers=tuple(AgentPlan(name=name, daemon=receivers_on) for name in names),
            )
        )
    return tuple(plans)
