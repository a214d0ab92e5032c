"""Record the sysfs and /proc files ``gpufabric discover`` reads as a small tree.

    python tools/capture_sysfs.py DEST [ROOT]

copies only the small attribute files (PCI class, ids, NUMA node, link speed and width; NIC
speed; InfiniBand port rates; CPU topology, NUMA cpulists, /proc/cpuinfo) and recreates the
sysfs links as relative links, so that ``gpufabric discover --root DEST`` (and the tests)
read the tree as they read the live machine.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys

PCI_ATTRS = ("class", "vendor", "device", "numa_node", "current_link_speed",
             "current_link_width", "max_link_speed", "max_link_width")


def _copy(root: str, dest: str, rel: str) -> None:
    src = os.path.join(root, rel)
    try:
        with open(src, "rb") as f:
            data = f.read(1 << 20)
    except OSError:
        return
    out = os.path.join(dest, rel)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "wb") as f:
        f.write(data)


def _link(root: str, dest: str, rel: str) -> str:
    """Recreate the link ``rel`` relative inside ``dest``; return its target relative to root."""
    src = os.path.join(root, rel)
    target = os.path.relpath(os.path.realpath(src), root)
    out = os.path.join(dest, rel)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    os.makedirs(os.path.join(dest, target), exist_ok=True)
    os.symlink(os.path.relpath(os.path.join(dest, target), os.path.dirname(out)), out)
    return target


def capture(dest: str, root: str = "/") -> None:
    for d in sorted(glob.glob(os.path.join(root, "sys/bus/pci/devices/*"))):
        target = _link(root, dest, os.path.relpath(d, root))
        for a in PCI_ATTRS:
            _copy(root, dest, os.path.join(target, a))
    for d in sorted(glob.glob(os.path.join(root, "sys/class/net/*"))):
        target = _link(root, dest, os.path.relpath(d, root))
        _copy(root, dest, os.path.join(target, "speed"))
    for d in sorted(glob.glob(os.path.join(root, "sys/class/infiniband/*"))):
        rel = os.path.relpath(d, root)
        _link(root, dest, rel)
        _link(root, dest, os.path.join(rel, "device"))
        for p in glob.glob(os.path.join(d, "ports/*")):
            for a in ("rate", "link_layer"):
                _copy(root, dest, os.path.join(os.path.relpath(p, root), a))
    _copy(root, dest, "sys/devices/system/cpu/online")
    for c in sorted(glob.glob(os.path.join(root, "sys/devices/system/cpu/cpu[0-9]*"))):
        for a in ("physical_package_id", "core_id"):
            _copy(root, dest, os.path.join(os.path.relpath(c, root), "topology", a))
    for n in sorted(glob.glob(os.path.join(root, "sys/devices/system/node/node[0-9]*"))):
        _copy(root, dest, os.path.join(os.path.relpath(n, root), "cpulist"))
    _copy(root, dest, "proc/cpuinfo")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    if os.path.exists(sys.argv[1]):
        shutil.rmtree(sys.argv[1])
    capture(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else "/")
