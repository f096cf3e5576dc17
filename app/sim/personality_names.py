"""The names of the fleet personalities (`app.sim.fleet.personality.named` builds each).

Apart from the simulator so that `sickbay simulate`'s arguments (`app.sim.commands`) can offer them
without importing it: `app.sim.fleet` loads numpy and pandas.
"""

NAMES: tuple[str, ...] = (
    "classic",
    "default-counters",
    "noisy-links",
    "hot-racks",
    "weak-precursors",
    "stress-10x",
    "random",
)
