"""An invoice-collections agent on underway: reminders, disputes, refunds and write-offs
under a policy, with durable waits, signed approvals and a worker killed mid-run.

``demo.py`` (``make demo``) tells the whole story; ``README.md`` explains the parts.
"""
