"""HTTP intake: the Alertmanager webhook and agent events, validated into signals and recorded in the inbox.

Payload models are pydantic (the typed boundary); handlers answer 2xx only after the inbox has committed."""
