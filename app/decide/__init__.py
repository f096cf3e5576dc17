"""Pure decisions: a fault plus node state, history, policy and `now` becomes a Plan on two tracks.

No I/O and no clock of its own; `act` carries the plan out."""
