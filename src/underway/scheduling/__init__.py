"""Work that starts by itself: cron schedules, and outside events taken in.

``cron`` parses cron expressions; ``schedules`` fires them; ``intake`` turns an outside
event into a run or a signal; ``intake_sources`` reads queues and mail (a package).
"""

__all__: list[str] = []  # the package promises no names: its modules do
