"""The Links tab's matrix and chart without Textual: the analysis' links (tracer/analysis/comms/bandwidth.py
`links_of`: bytes and GB/s per src → dst) laid out by rank, and the fastest of them."""

from __future__ import annotations

from dataclasses import dataclass

from disttrace.tracer.analysis.core.results import Link

CHART_LINKS = 24
"""Links the chart shows, the fastest first."""


@dataclass(frozen=True)
class LinkMatrix:
    """src × dst: the ranks that sent or received, each link by (src, dst), and the most bytes of any link."""

    ranks: list[int]
    by: dict[tuple[int, int], Link]
    most_bytes: int


def matrix(links: list[Link]) -> LinkMatrix:
    return LinkMatrix(sorted({l.src for l in links} | {l.dst for l in links}), {(l.src, l.dst): l for l in links},
                      max(l.bytes for l in links))


def fastest(links: list[Link], most: int = CHART_LINKS) -> list[Link]:
    """The links by their bandwidth, the fastest first (one without a measured one last), at most `most`."""
    return sorted(links, key=lambda l: -(l.gbps or 0))[:most]
