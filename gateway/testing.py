"""Start real gateways for tests and examples (house style 22).

`async with run_gateway() as gw:` starts a real `Gateway` in this process on 127.0.0.1:0
with a temporary data directory and yields a handle with its `address`, `admin_token` and
`await gw.register("alice")` (the agent's token). Nothing is mocked: real gRPC, real SQLite
files, the real certification protocol.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from gateway.app import Gateway
from gateway.endpoint.api import RegisteredAgent
from gateway.settings import Settings


@dataclass
class RunningGateway:
    """A gateway started by `run_gateway`."""

    gateway: Gateway
    data_dir: Path
    settings: Settings
    agents: dict[str, RegisteredAgent] = field(default_factory=dict)

    @property
    def address(self) -> str:
        """`127.0.0.1:PORT`."""
        return self.gateway.address

    @property
    def admin_token(self) -> str:
        """The operator token."""
        assert self.gateway.admin_token_path is not None
        return self.gateway.admin_token_path.read_text(encoding="utf-8").strip()

    async def register(self, name: str) -> str:
        """Register an agent through the core and return its API token."""
        registered = await self.gateway.register_agent(name)
        self.agents[name] = registered
        return registered.token

    async def restart(self) -> None:
        """Shut down and start again on the same data directory (a Router restart too)."""
        await self.gateway.shutdown(skip_waits=True)
        self.gateway = await Gateway.start(self.settings)


@contextlib.asynccontextmanager
async def run_gateway(
    settings: Settings | None = None, *, data_dir: Path | None = None
) -> AsyncIterator[RunningGateway]:
    """A real gateway on 127.0.0.1:0 with a temporary (or given) data directory."""
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="harness-")))
        base = settings or Settings()
        effective = replace(
            base,
            listen="127.0.0.1:0",
            metrics_listen=None,
            data_dir=data_dir,
            shutdown_grace=min(base.shutdown_grace, 2.0),
        )
        running = RunningGateway(
            gateway=await Gateway.start(effective), data_dir=data_dir, settings=effective
        )
        try:
            yield running
        finally:
            await running.gateway.shutdown(skip_waits=True)
