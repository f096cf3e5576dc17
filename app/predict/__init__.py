"""Degradation prediction: features, training, registry, scoring, backtest. The only place that imports sklearn."""
