"""CLI: discover (the machine it runs on, as a system file)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
import yaml

from gpufabric.cli.common import app, emit_json
from gpufabric.errors import InputError
from gpufabric.fileio import check_output, write_output


@app.command()
def discover(
        output: Path | None = typer.Option(None, "-o", "--output",
                                           help="System file to write (YAML); default: print it."),
        json: bool = typer.Option(False, "--json",
                                  help="Print the discovery report (sources, CPU, PCI devices, "
                                       "NICs, GPUs, the system) as JSON."),
        nvidia_smi: Path | None = typer.Option(
            None, "--nvidia-smi", help="Read this saved `nvidia-smi topo -m` output instead of "
                                       "asking NVML and nvidia-smi."),
        gpu: str = typer.Option("", help="GPU model (catalog name) when the sources name none."),
        name: str = typer.Option("", help="System name (default: the output file's stem, else "
                                          "'discovered')."),
        root: Path = typer.Option(Path("/"), "--root",
                                  help="Read sysfs and /proc under this directory (a recorded "
                                       "tree); NVML and nvidia-smi are then not asked.")) -> None:
    """Describe this machine (GPUs, NVLink, PCIe, CPUs, NUMA, NICs) as a system file.

    Each source (NVML, nvidia-smi, sysfs, the CPU) is optional; a missing one is one note.

    The file is checked by the loader every command uses before it is written.
    """
    from gpufabric import catalog
    from gpufabric.measure.discover import discover as run
    from gpufabric.topology.build import from_yaml_text
    if gpu:
        gpu = catalog.gpu(gpu, field="--gpu").name
    if not root.is_dir():
        raise InputError("no such directory; expected / or a recorded tree "
                         "(tools/capture_sysfs.py)", file=str(root), field="--root")
    if output is not None:
        check_output(output, field="--output")
    d = run(root, name=name or (output.stem if output else ""), nvidia_smi=nvidia_smi, gpu=gpu)
    text = yaml.safe_dump(d.system, sort_keys=False)
    label = str(output) if output is not None else d.system["name"]
    from_yaml_text(text, label)    # as `show` reads the file, before it is written
    for line in d.notes:
        print(f"gpufabric: note: {line}", file=sys.stderr)
    if output is not None:
        write_output(output, text, field="--output")
    if json:
        emit_json(d.report())
    elif output is None:
        typer.echo(text, nl=False)
    else:
        kinds = [x["kind"] for x in d.system["devices"]]
        counts = [(kinds.count(k), what) for k, what in (
            ("gpu", "GPU"), ("cpu", "CPU socket"), ("nic", "NIC"), ("pcie_switch", "PCIe switch"))]
        typer.echo(f"wrote {output}: " + ", ".join(
            f"{n} {what}{'' if n == 1 else ('es' if what.endswith('h') else 's')}"
            for n, what in counts))
