"""`recorded_xid.merged`: the XID features of the GPUs read raw, 0 for the others, NaN where the table has none.

The reads themselves (which hosts, the raw gauge, the raw path's function) are checked end to end against
the raw path through a real Prometheus in test_recorded_parity.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from app.predict import recorded_xid

T = 1_000_000.0


def _table() -> pd.DataFrame:
    # Three GPUs at one instant, as the short window's table has them: two with XID samples (a value, to be
    # replaced), one without any (NaN, to stay NaN).
    keys = {"node": ["n1", "n1", "n2"], "gpu": [0, 1, 0], "uuid": ["a", "b", "c"], "timestamp": [T, T, T]}
    features = {name: np.array([5.0, 5.0, np.nan], dtype=np.float32) for name in recorded_xid.FEATURES}
    return pd.DataFrame({**keys, **features})


def test_the_gpus_read_raw_get_their_values_the_others_none_and_nan_stays() -> None:
    xid = pd.DataFrame(
        {"node": ["n1"], "gpu": [1], "uuid": ["b"], "timestamp": [T]}
        | {name: [float(i + 1)] for i, name in enumerate(recorded_xid.FEATURES)}
    )
    out = recorded_xid.merged(_table(), xid)
    for i, name in enumerate(recorded_xid.FEATURES):
        values = out[name].to_numpy(dtype=np.float64)
        assert values[0] == 0.0  # no event in its week: the rules did not name its host
        assert values[1] == i + 1  # classified from its raw gauge
        assert np.isnan(values[2])  # no XID sample: as the raw path has it
        assert out[name].dtype == np.float32


def test_no_gpu_with_an_event_gives_zeros() -> None:
    empty = pd.DataFrame(columns=["node", "gpu", "uuid", "timestamp", *recorded_xid.FEATURES])
    out = recorded_xid.merged(_table(), empty)
    for name in recorded_xid.FEATURES:
        assert out[name].iloc[:2].tolist() == [0.0, 0.0]
        assert np.isnan(out[name].iloc[2])
