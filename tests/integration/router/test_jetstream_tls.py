"""The JetStream Router over TLS: a nats-server of its own requiring client certificates
(`tls://`), reached with one and refused without."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.router import RouterUnavailable
from gateway.router.jetstream import JetStreamRouter, JetStreamSettings
from tests.certs import Pki, write_pki
from tests.servers import free_port, nats_server_binary
from tests.support import eventually
from tests.unit.router.contract_suite import send_all
from tests.unit.router.fakes import FakeVerifier, agent_ids, signed_envelope


@contextlib.contextmanager
def mtls_nats_server(root: Path, pki: Pki) -> Iterator[tuple[int, int]]:
    """A JetStream nats-server on loopback requiring certificates from `pki.ca`; yields
    its client and monitoring ports."""
    port, monitor = free_port(), free_port()
    config = root / "nats.conf"
    config.write_text(
        "\n".join(
            [
                f"listen: 127.0.0.1:{port}",
                f"http: 127.0.0.1:{monitor}",
                f'jetstream {{ store_dir: "{root / "js"}", max_file_store: 1GB }}',
                "tls {",
                f'  cert_file: "{pki.server_cert}"',
                f'  key_file: "{pki.server_key}"',
                f'  ca_file: "{pki.ca}"',
                "  verify: true",
                "}",
            ]
        )
        + "\n"
    )
    with (root / "nats.log").open("wb") as log:
        process = subprocess.Popen(
            [nats_server_binary(), "-c", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        yield port, monitor
    finally:
        process.terminate()
        process.wait(15)


def _healthy(monitor: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/healthz", timeout=1) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


async def test_a_router_reaches_a_tls_server_with_its_client_certificate_and_not_without(
    tmp_path: Path,
):
    alice, bob = agent_ids(2)
    pki = write_pki(tmp_path / "pki")
    with mtls_nats_server(tmp_path, pki) as (port, monitor):
        await eventually(lambda: asyncio.to_thread(_healthy, monitor), within=30.0)
        servers = [f"tls://127.0.0.1:{port}"]
        trusted = ssl.create_default_context(cafile=str(pki.ca))
        trusted.load_cert_chain(str(pki.client_cert), str(pki.client_key))
        async with await JetStreamRouter.connect(
            servers, verifier=FakeVerifier(), tls=trusted
        ) as router:
            await send_all(router, [signed_envelope(sender=alice, recipients=[alice, bob])])
        anonymous = ssl.create_default_context(cafile=str(pki.ca))
        with pytest.raises(RouterUnavailable):
            await JetStreamRouter.connect(
                servers,
                verifier=FakeVerifier(),
                tls=anonymous,
                options=JetStreamSettings(connect_timeout=1.0),
            )
