"""Real machines in the loop: what the machine is (:mod:`~gpufabric.measure.discover`), its
collectives measured with a real backend (:mod:`~gpufabric.measure.bench`, ranks of
:mod:`~gpufabric.measure.bench_worker`), and the model fitted to measurements of it
(:mod:`~gpufabric.measure.calibrate`, applied through :mod:`~gpufabric.measure.profile`).

Each source of facts is a small adapter that answers "not available" with a note instead of
failing, and reads under a root path (``"/"`` by default) so that a recorded tree of a real
machine can stand in for the live one:

* :mod:`~gpufabric.measure.nvml`: NVML through nvidia-ml-py (GPUs, NVLink peers, PCIe levels,
  link generation and width, NUMA, MIG);
* :mod:`~gpufabric.measure.smi`: the ``nvidia-smi`` command (``topo -m`` and the GPU name);
* :mod:`~gpufabric.measure.sysfs`: Linux sysfs (the PCI tree, NICs, InfiniBand ports);
* :mod:`~gpufabric.measure.cpu`: CPU sockets, cores and NUMA nodes (sysfs, /proc/cpuinfo).
"""
