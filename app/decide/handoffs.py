"""Which remediator a quarantined node is handed to: the one place that choice is made.

The hardware plan (`plans`), a drain that reconciliation resumes or retries, and an escalation to
`replace` (`reconciling`) all carry what this returns in their decision, and `act` asks exactly that
remediator: it looks nothing up in the policy itself. Pure: policy in, parameters out.
"""

from __future__ import annotations

from app.config import rules
from app.domain import FaultClass, RemediationParams


def remediation_for(fault_class: FaultClass, policy: rules.Policy) -> RemediationParams:
    """The remediator the policy names for `fault_class` (a human, `none`, for a class it does not name)."""
    remediator = policy.remediator(fault_class)
    return RemediationParams(
        remediation=fault_class,
        remediator=remediator.kind,
        template=remediator.template,
        url=remediator.url,
    )
