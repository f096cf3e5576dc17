"""Degradation prediction: features, training, registry, scoring, backtest. The only place that imports sklearn.

In layers (`.importlinter`, `predict-layers`; top imports bottom):

- commands and report: `commands` (the arguments of `sickbay train|evaluate|score|backtest|models` and
  the installed models directory; light, no pandas or scikit-learn), `cli` (what each command runs),
  `backtest_cli`, `backtest_table`, `train_gate` (training behind the promotion gate), `truth_file`
  (`--truth`), `cli_common` (loading a model, times), `report` + `report_svg` (the HTML page);
- backtest: `replay_range` (Prometheus in batches of hosts, warm-up) → `replay` (pure: scores every step as
  the service would, the rules baseline beside the model) → `backtest` (pure: judges alarms against truth,
  alarm by alarm in `backtest_judge`),
  `proactive_replay` (the ladder and its budget over the alarms), `costs` (GPU-hours), `backtest_summary`,
  `backtest_json`;
- scoring: `service` (the scheduler's job), `score` (samples → `domain.Risk`);
- model: `train` (with `train_config`, `prepare`, `thresholds`, `steps`, `train_cli`), `retrain` (with
  `retrain_inputs` and `retrain_outcome`), `promotion` (the gate: beat the rules baseline and the current model),
  `registry` (versions, atomic swaps), `model_card` (the card and the checked load), `baseline` (the rules);
- reading: `prometheus` (one query per metric; its PromQL in `promql`, its answers parsed by
  `range_answers`), `recent_window` (the service's look-back), `dataset`, `journal_labels` (the journal's
  hardware faults, read-only);
- pure core: `features`, `labels`, `split`, `history`, `evaluate`, `coverage` (which of the model's source
  fields a fleet lacks), `hysteresis` (the hold on the way down, one step for serve and backtest).

Never imports `app.sim` (tests may).
"""
