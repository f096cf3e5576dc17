"""Pure classification: one signal plus the XID catalog, the policy and recent context becomes one Fault.

No I/O, no asyncio, no clock: everything a rule needs is passed in."""
