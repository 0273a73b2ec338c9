"""UPI collect requests followed to a settled status on durable timers, reconciled by
transaction reference when an outcome is unknown; ``demo.py`` runs every state and fault."""
