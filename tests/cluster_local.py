"""A local Ray cluster on loopback only, for the `--cluster` tests and benchmark.

Ray binds and announces the machine's outward address even when told 127.0.0.1, so the
cluster and its driver run inside namespaces of their own (`unshare`, as root): a network
namespace where loopback is the only interface (Ray's node address is 127.0.0.1 there
and nothing leaves the machine), and a PID namespace, so `ray stop --force` reaches only
this cluster's processes and its end kills whatever is left: no stray process survives.

    python tests/cluster_local.py [--nodes N] -- COMMAND...

(inside the namespaces: see namespace_command) starts `ray start --head --num-cpus 1`
and N - 1 more nodes of 1 CPU, all with token authentication (Ray 2.60's RAY_AUTH_MODE
=token; the token reaches Ray's CLI, the nodes and the driver as RAY_AUTH_TOKEN), runs
COMMAND with RAY_ADDRESS set, stops the cluster, and exits with COMMAND's code. The
seconds the cluster took to start go to stderr as `cluster started in S s`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

PORT = 6379


def namespace_command(argv: list[str]) -> list[str]:
    """`argv` run in new network and PID namespaces, with loopback up."""
    return [
        "unshare",
        "--net",
        "--pid",
        "--fork",
        "--mount-proc",
        "bash",
        "-c",
        'ip link set lo up && exec "$@"',
        "namespace",
        *argv,
    ]


def namespace_problem() -> str | None:
    """Why namespaces cannot be made here (not root, no unshare, a sandbox), or None."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip (util-linux, iproute2) is not installed"
    try:
        probe = subprocess.run(
            namespace_command(["true"]), capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare failed: {exc}"
    if probe.returncode != 0:
        return f"unshare --net --pid is not permitted here: {probe.stderr.strip()[:200]}"
    return None


def _ray() -> str:
    return str(Path(sys.executable).parent / "ray")


@contextlib.contextmanager
def local_cluster(nodes: int = 2) -> Iterator[dict[str, str]]:
    """Start the cluster (call inside the namespaces); yields the drivers' environment."""
    temp = tempfile.mkdtemp(prefix="kvr-", dir="/tmp")  # short: Ray's socket paths
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    env.pop("RAY_ADDRESS", None)
    log = open(Path(temp) / "ray-start.log", "w")  # noqa: SIM115 (closed below)
    common = ["--num-cpus", "1", "--disable-usage-stats"]
    try:
        head = [_ray(), "start", "--head", "--port", str(PORT), "--temp-dir", temp]
        head += ["--include-dashboard", "false"]  # nothing reads it; its processes cost CPU
        subprocess.run([*head, *common], env=env, stdout=log, stderr=log, check=True)
        for _ in range(nodes - 1):
            node = [_ray(), "start", "--address", f"127.0.0.1:{PORT}"]
            subprocess.run([*node, *common], env=env, stdout=log, stderr=log, check=True)
        yield {**env, "RAY_ADDRESS": f"127.0.0.1:{PORT}"}
    finally:
        # SIGKILL without a grace period: nothing of the cluster is kept, and the PID
        # namespace ends with this process anyway (ray stop waited ~20 s here)
        stop = [_ray(), "stop", "--force", "--grace-period", "0"]
        subprocess.run(stop, env=env, stdout=log, stderr=log)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    started = time.perf_counter()
    with local_cluster(args.nodes) as env:
        sys.stderr.write(f"cluster started in {time.perf_counter() - started:.2f} s\n")
        sys.stderr.flush()
        return subprocess.run(command, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
