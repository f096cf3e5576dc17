"""Degradation prediction: features, training, registry, scoring, backtest. The only place that imports sklearn.

- `features` (pure): DCGM samples → per-GPU features (`FEATURES`); `labels`, `split` (pure): training targets
  and the leak-free time/node split; `evaluate` (pure given scores): precision, alarms, lead time, traps.
- `dataset`: reads a dataset directory (time series + ground truth); `train`: the training pipeline and its
  command line; `registry`: skops models with JSON cards, checked loads, atomic swaps, promotion.
- `score`: samples → `domain.Risk` per GPU and node; `prometheus`: the reader (one query per metric);
  `service`: the scheduler's scoring job; `cli`: `train`, `evaluate`, `score`.

Never imports `app.sim` (tests may). The backtest over a Prometheus range is not written yet.
"""
