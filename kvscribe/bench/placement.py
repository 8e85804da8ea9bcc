"""Where each bench cell runs: `--device` for every cell, by the same rule as `kvscribe FILE`
(kvscribe.devices). `auto` is a preference, so a backend that cannot run on the device it
picked runs where it can, with a note in its row; a device the user named is a demand, so
such a cell is skipped with the reason instead of being run elsewhere."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvscribe import profile as profiles
from kvscribe import registry
from kvscribe.bench.cells import Cell
from kvscribe.devices import DeviceChoice, device_for, require_cuda
from kvscribe.errors import KvscribeError
from kvscribe.machine import hardware

DEVICES = ("auto", "cpu", "cuda")


@dataclass
class Placement:
    requested: str  # --device as given
    found: hardware.Hardware
    devices: dict[Cell, DeviceChoice] = field(default_factory=dict)  # the cells that can run
    skipped: dict[str, str] = field(default_factory=dict)  # cell label -> why it cannot

    def describe(self, used: set[str]) -> str:
        """For the report header: what was asked, what the cells ran on, what the machine has."""
        ran_on = ", ".join(sorted(used)) or "nothing"
        return f"--device {self.requested}: ran on {ran_on} ({self.found.describe()})"


def check_requested(requested: str, found: hardware.Hardware) -> None:
    """Before anything runs: --device cuda on a machine without CUDA is one line, exit 6 (no
    cell could honour it)."""
    if requested == "cuda":
        require_cuda(found)


def place(cells: list[Cell], requested: str, found: hardware.Hardware) -> Placement:
    """Each cell's device, or why it cannot run."""
    placement = Placement(requested, found)
    for cell in cells:
        try:
            supported = registry.get(cell.backend).capabilities.devices
            profile = profiles.load(cell.profile)
            placement.devices[cell] = device_for(cell.backend, supported, profile, requested, found)
        except KvscribeError as exc:
            placement.skipped[cell.label] = exc.one_line()
    return placement
