"""The Compute Engine machine types a Vertex AI pool may name, with their memory (torch-free).

The resource config accepts only the machine types listed here (a typo such as ``n2-highmem-23``
is a config problem, not a failed job an hour later), and ``python -m pipeline plan`` compares
each storage machine's memory with what its partition needs. Memory is Compute Engine's
``memoryMb`` of the type (the GCE docs' "GB" are GiB: ``n2-highmem-32`` has 262144 MiB); vCPUs
are the type's ``guestCpus``. The families and sizes are those Vertex AI custom training offers
for CPU and GPU pools (configure-compute docs); a type Vertex AI adds later needs a line here.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping


@dataclass(frozen=True, kw_only=True, slots=True)
class MachineType:
    """One machine type: its name, vCPUs and memory in MiB."""

    name: str
    vcpus: int
    memory_mib: int

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024


def _family(prefix: str, gib_per_vcpu: float, sizes: tuple[int, ...]) -> dict[str, MachineType]:
    return {f"{prefix}-{n}": MachineType(name=f"{prefix}-{n}", vcpus=n,
                                         memory_mib=round(n * gib_per_vcpu * 1024))
            for n in sizes}


def _fixed(table: dict[str, tuple[int, float]]) -> dict[str, MachineType]:
    return {name: MachineType(name=name, vcpus=cpus, memory_mib=round(gib * 1024))
            for name, (cpus, gib) in table.items()}


_TYPES: dict[str, MachineType] = {
    **_family("e2-standard", 4, (4, 8, 16, 32)),
    **_family("e2-highmem", 8, (2, 4, 8, 16)),
    **_family("e2-highcpu", 1, (16, 32)),
    **_family("n1-standard", 3.75, (4, 8, 16, 32, 64, 96)),
    **_family("n1-highmem", 6.5, (2, 4, 8, 16, 32, 64, 96)),
    **_family("n1-highcpu", 0.9, (16, 32, 64, 96)),
    **_family("n2-standard", 4, (4, 8, 16, 32, 48, 64, 80)),
    **_family("n2-highmem", 8, (2, 4, 8, 16, 32, 48, 64, 80)),
    **_family("n2-highcpu", 1, (16, 32, 64, 80, 96)),
    **_family("c2-standard", 4, (4, 8, 16, 30, 60)),
    **_fixed({"m1-ultramem-40": (40, 961), "m1-ultramem-80": (80, 1922),
              "m1-ultramem-160": (160, 3844), "m1-megamem-96": (96, 1433.6)}),
    **_fixed({"a2-highgpu-1g": (12, 85), "a2-highgpu-2g": (24, 170), "a2-highgpu-4g": (48, 340),
              "a2-highgpu-8g": (96, 680), "a2-megagpu-16g": (96, 1360),
              "a2-ultragpu-1g": (12, 170), "a2-ultragpu-2g": (24, 340),
              "a2-ultragpu-4g": (48, 680), "a2-ultragpu-8g": (96, 1360),
              "a3-highgpu-8g": (208, 1872)}),
    **_fixed({"g2-standard-4": (4, 16), "g2-standard-8": (8, 32), "g2-standard-12": (12, 48),
              "g2-standard-16": (16, 64), "g2-standard-24": (24, 96), "g2-standard-32": (32, 128),
              "g2-standard-48": (48, 192), "g2-standard-96": (96, 384)}),
}
MACHINE_TYPES: Mapping[str, MachineType] = MappingProxyType(_TYPES)
"""Every machine type we allow, by name."""


def lookup(name: str) -> MachineType | None:
    """The machine type called ``name``, or None when it is not one we allow."""
    return MACHINE_TYPES.get(name)


def unknown_reason(name: str) -> str:
    """Why ``name`` is refused: a did-you-mean when one is close, else where the list is."""
    close = difflib.get_close_matches(name, list(MACHINE_TYPES), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (f"is not a machine type Vertex AI training offers that we know ({hint}the list: "
            "docs/configs.md#machine-types)")


HOURLY_RATES_USD: Mapping[str, tuple[float, float]] = MappingProxyType({
    "e2": (0.021811, 0.002923), "n1": (0.031611, 0.004237), "n2": (0.031611, 0.004237)})
"""Compute Engine on-demand list prices in us-central1, USD per vCPU-hour and per GiB-hour, by
family (:data:`PRICE_SOURCE`). Families without a rate here (c2, m1, the GPU families) have no
price: :func:`cheapest_holding` never picks them."""
PRICE_SOURCE = ("Compute Engine on-demand rates for us-central1 as quoted by third-party price "
                "books (retrieved 2026-09-25; Google's pricing page was not readable here): "
                "e2 $0.021811/vCPU-h + $0.002923/GiB-h, n1 and n2 $0.031611 + $0.004237. Vertex AI "
                "training charges a premium on top: n1-standard-4 is $0.2185/h there (2026-10-07) "
                "against $0.19 on Compute Engine, ~1.15x")
"""Where :data:`HOURLY_RATES_USD` come from, as ``pipeline plan`` states it."""


def hourly_price_usd(kind: MachineType) -> float | None:
    """Compute Engine's on-demand price of ``kind`` (:data:`HOURLY_RATES_USD`), None when its
    family has no rate here."""
    rates = HOURLY_RATES_USD.get(kind.name.split("-", 1)[0])
    if rates is None:
        return None
    return kind.vcpus * rates[0] + kind.memory_gib * rates[1]


def cheapest_holding(memory_mib: int) -> MachineType | None:
    """The machine type with a price (:func:`hourly_price_usd`) and at least ``memory_mib`` of
    memory that costs least per hour (fewest vCPUs on a tie); None when none holds it."""
    fits = [t for t in MACHINE_TYPES.values()
            if t.memory_mib >= memory_mib and hourly_price_usd(t) is not None]
    return min(fits, key=lambda t: (hourly_price_usd(t), t.vcpus, t.name)) if fits else None


def smallest_holding(memory_mib: int, families: tuple[str, ...] = ("n2-highmem", "n2-standard",
                                                                   "m1-ultramem")) -> MachineType | None:
    """The machine type of ``families`` with the least memory that is at least ``memory_mib``."""
    fits = [t for t in MACHINE_TYPES.values()
            if t.name.rsplit("-", 1)[0] in families and t.memory_mib >= memory_mib]
    return min(fits, key=lambda t: (t.memory_mib, t.name)) if fits else None


def markdown_table() -> str:
    """The table for docs/configs.md: name, vCPUs, memory (GiB)."""
    rows = ["| machine type | vCPUs | memory (GiB) |", "| --- | --- | --- |"]
    rows += [f"| `{t.name}` | {t.vcpus} | {t.memory_gib:g} |" for t in MACHINE_TYPES.values()]
    return "\n".join(rows)
