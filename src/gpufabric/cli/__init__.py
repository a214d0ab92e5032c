"""The ``gpufabric`` command: thin shells over the library, one module per area.

Each module registers its commands on :data:`gpufabric.cli.common.app` when imported:
``topo`` (systems, show, p2p, topo, import, compare), ``collective`` (collective, validate,
params), ``serve`` (serve, datasets), ``train`` (train, models), ``schedule`` (schedule),
``catalog`` (catalog), ``measure`` (discover), ``bench`` (bench), ``calibrate`` (calibrate),
``advise`` (advise), ``data`` (data), ``k8s`` (k8s), ``generate`` (generate),
``kernels`` (kernels).

A run imports only the module of the command it runs (:data:`COMMANDS`), so that a command
pays for nothing it does not use; ``--version`` imports no more than this file, and
``--help`` (or an unknown command) imports them all, to list every command.
"""

from gpufabric.cli.entry import COMMANDS, main, register

__all__ = ["COMMANDS", "main", "register"]
