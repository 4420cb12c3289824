"""Renders the folded state for Prometheus.

A custom Collector rather than process-local Counter objects: the values are
the persisted fold, so they survive a restart instead of starting from zero.
Every family is yielded even while empty, so dashboards and alerts can name
them from the first scrape on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from .fold import DURATION_BUCKETS, METRICS, State


@dataclass
class Progress:
    """How far the fold is behind the committed stream."""

    folded: int
    stream_last: int

    @property
    def lag(self) -> int:
        # stream_last is refreshed periodically and may trail the fold.
        return max(0, self.stream_last - self.folded)


class LedgerCollector(Collector):
    def __init__(self, state: Callable[[], State], progress: Callable[[], Progress]) -> None:
        self._state = state
        self._progress = progress

    def collect(self) -> Iterator[Metric]:
        state = self._state()
        for spec in METRICS.values():
            if spec.kind == "histogram":
                histogram = HistogramMetricFamily(spec.name, spec.help, labels=spec.labels)
                for labels, hist in sorted(state.histograms[spec.name].items()):
                    cumulative, buckets = 0, []
                    for bound, count in zip((*DURATION_BUCKETS, float("inf")), hist.counts, strict=True):
                        cumulative += count
                        buckets.append((_le(bound), cumulative))
                    histogram.add_metric(list(labels), buckets, hist.sum_ns / 1e9)
                yield histogram
            else:
                kind = CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily
                family = kind(spec.name, spec.help, labels=spec.labels)
                for labels, value in sorted(state.values[spec.name].items()):
                    family.add_metric(list(labels), float(value))
                yield family

        labels_kept = GaugeMetricFamily(
            "laneledger_metrics_label_values",
            "Distinct values admitted per capped label and tenant (the cap bounds it; "
            "tenant is empty for the tenant label itself)",
            labels=["label", "tenant"],
        )
        for (scope, label), values in sorted(state.admitted.items()):
            labels_kept.add_metric([label, scope], len(values))
        yield labels_kept

        progress = self._progress()
        yield GaugeMetricFamily(
            "laneledger_metrics_folded_position",
            "Last ledger position folded into these metrics",
            value=progress.folded,
        )
        yield GaugeMetricFamily(
            "laneledger_metrics_stream_last_position",
            "Last sequence of the committed stream (LEDGER_EVENTS) when last asked",
            value=progress.stream_last,
        )
        yield GaugeMetricFamily(
            "laneledger_metrics_consumer_lag_events",
            "Committed events not yet folded: stream last sequence minus folded position",
            value=progress.lag,
        )


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))
