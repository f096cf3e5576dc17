"""Degradation prediction: features, training, registry, scoring, backtest. The only place that imports sklearn.

- `features` (pure): DCGM samples → per-GPU features (`FEATURES`); `labels`, `split` (pure): training targets
  and the leak-free time/node split; `evaluate` (pure given scores): precision, alarms, lead time, traps.
- `dataset`: reads a dataset directory (time series + ground truth); `train`: the training pipeline and its
  command line; `registry`: skops models with JSON cards, checked loads, atomic swaps, promotion.
- `score`: samples → `domain.Risk` per GPU and node; `prometheus`: the reader (one query per metric);
  `service`: the scheduler's scoring job; `cli`: `train`, `evaluate`, `score`, `backtest`.
- `backtest`: replays a Prometheus range as the service would have scored it (batches of hosts, pure
  replay), judges the alarms against a simulator's truth or the failures `history` reads back from the
  samples; `costs` (pure): GPU-hours lost with and without the proactive ladder, capacity it held;
  `report`: the backtest as a self-contained HTML page with inline SVG plots.

Never imports `app.sim` (tests may).
"""
