"""Device descriptions: memory and the host link, with presets and command-line overrides."""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from hybrid.errors import FormatError, HybridError
from hybrid.units import parse_bandwidth, parse_bytes, parse_duration

GiB = 2**30


@dataclass(frozen=True)
class Device:
    """What a plan is made for: device memory and the PCIe link to host memory."""

    name: str
    memory_bytes: int
    h2d_bytes_per_s: float
    d2h_bytes_per_s: float
    transfer_latency_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any], where: str = "device") -> "Device":
        if not isinstance(d, dict):
            raise FormatError(f"{where}: expected an object with name, memory_bytes, h2d_bytes_per_s, d2h_bytes_per_s")
        try:
            dev = Device(
                name=str(d.get("name", "custom")),
                memory_bytes=int(d["memory_bytes"]),
                h2d_bytes_per_s=float(d["h2d_bytes_per_s"]),
                d2h_bytes_per_s=float(d["d2h_bytes_per_s"]),
                transfer_latency_s=float(d.get("transfer_latency_s", 0.0)),
            )
        except KeyError as e:
            raise FormatError(f"{where}: missing field {e.args[0]!r}") from None
        except (TypeError, ValueError) as e:
            raise FormatError(f"{where}: a field is not a number ({e})") from None
        if dev.memory_bytes <= 0:
            raise FormatError(f"{where}.memory_bytes must be positive, got {dev.memory_bytes}")
        if dev.h2d_bytes_per_s <= 0 or dev.d2h_bytes_per_s <= 0:
            raise FormatError(f"{where}: bandwidths must be positive")
        if dev.transfer_latency_s < 0:
            raise FormatError(f"{where}.transfer_latency_s must not be negative")
        return dev

    def h2d_time(self, nbytes: int) -> float:
        return nbytes / self.h2d_bytes_per_s + self.transfer_latency_s

    def d2h_time(self, nbytes: int) -> float:
        return nbytes / self.d2h_bytes_per_s + self.transfer_latency_s


# Host-link rates are per direction, as sustained by pinned-memory copies, not
# the raw signalling rate:
# - v100-16gb: the SwapAdvisor paper's setting (ASPLOS'20 §6: 16 GB V100,
#   PCIe 3.0 x16, 12 GB/s each way measured).
# - a100-40gb / a100-80gb: PCIe 4.0 x16 is 31.5 GB/s per direction raw
#   (PCI-SIG PCIe 4.0 spec, 16 GT/s x 16 lanes, 128b/130b); NVIDIA's
#   bandwidthTest on A100 reports about 25 GB/s pinned, which we use.
# - h100-80gb: PCIe 5.0 x16 is 63 GB/s per direction raw (PCI-SIG PCIe 5.0,
#   32 GT/s); pinned copies sustain about 50 GB/s (NVIDIA H100 datasheet lists
#   128 GB/s bidirectional for PCIe Gen5), which we use.
# Memory sizes are the marketed capacities in GiB.
PRESETS: dict[str, Device] = {
    "v100-16gb": Device("v100-16gb", 16 * GiB, 12e9, 12e9, 0.0),
    "a100-40gb": Device("a100-40gb", 40 * GiB, 25e9, 25e9, 0.0),
    "a100-80gb": Device("a100-80gb", 80 * GiB, 25e9, 25e9, 0.0),
    "h100-80gb": Device("h100-80gb", 80 * GiB, 50e9, 50e9, 0.0),
}


def preset(name: str) -> Device:
    try:
        return PRESETS[name]
    except KeyError:
        raise HybridError(f"unknown device {name!r}: choose one of {', '.join(PRESETS)} or give --memory/--h2d/--d2h") from None


def resolve_device(
    base: Device | None,
    name: str | None = None,
    memory: str | int | None = None,
    h2d: str | float | None = None,
    d2h: str | float | None = None,
    latency: str | float | None = None,
) -> Device:
    """Start from a preset (or the graph's own device) and apply flag overrides."""
    dev = preset(name) if name else base
    if dev is None:
        dev = PRESETS["v100-16gb"]
    changes: dict[str, Any] = {}
    if memory is not None:
        changes["memory_bytes"] = parse_bytes(memory, "--memory")
        if changes["memory_bytes"] <= 0:
            raise HybridError(f"--memory must be positive, got {memory!r}")
    if h2d is not None:
        changes["h2d_bytes_per_s"] = parse_bandwidth(h2d, "--h2d")
    if d2h is not None:
        changes["d2h_bytes_per_s"] = parse_bandwidth(d2h, "--d2h")
    if latency is not None:
        changes["transfer_latency_s"] = parse_duration(latency, "--latency")
    return replace(dev, **changes) if changes else dev
