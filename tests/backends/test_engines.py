"""The test engines themselves: every listener they open is on loopback."""

from __future__ import annotations

import pytest


def _assert_loopback_only(sockets, pids: list[int], expected_port: int) -> None:
    found = sockets.listeners(pids)
    ports = {int(addr.rsplit(":", 1)[1]) for _, _, addr in found}
    # the check sees real sockets: the port the test configured is among them
    assert expected_port in ports, found
    outside = [(pid, proto, addr) for pid, proto, addr in found if not sockets.is_loopback(addr)]
    assert outside == []


@pytest.mark.ray
def test_ray_head_listens_on_loopback_only(ray_head, sockets):
    pids = ray_head.pids()
    assert len(pids) >= 3  # gcs_server, raylet, dashboard at least
    _assert_loopback_only(sockets, pids, int(ray_head.address.rsplit(":", 1)[1]))


@pytest.mark.slurm
def test_slurm_daemons_listen_on_loopback_only(slurm_cluster, sockets):
    pids = slurm_cluster.pids()
    assert len(pids) == 3  # munged, slurmctld, slurmd
    port = int(next(l for l in slurm_cluster.conf.read_text().splitlines() if l.startswith("SlurmctldPort=")).split("=")[1])
    _assert_loopback_only(sockets, pids, port)
