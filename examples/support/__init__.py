"""A support-ticket monitor built on underway: a per-ticket agent started by desk events,
a durable wait for customers' missing details, signed approvals, and an SLA sweep."""
