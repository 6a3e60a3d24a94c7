"""``ray start``, for the test cluster (tests/_ray_cluster.py): Ray's own CLI, except
that a node joining with REPRISE_RAY_KEEP_LOOPBACK=1 keeps a loopback ``--address`` as
given (Ray replaces 127.0.0.1 by the machine's outward address, where the head, kept
on loopback, does not listen)."""

import os
import sys

if __name__ == "__main__":
    if os.environ.get("REPRISE_RAY_KEEP_LOOPBACK") == "1":
        import ray._private.services as services

        services.resolve_ip_for_localhost = lambda host: host
    from ray.scripts.scripts import main

    sys.argv = ["ray", *sys.argv[1:]]
    main()
