"""Personal data over time: erasure of a data subject, and retention's purges.

``erasure`` erases a subject; ``retention`` (a package) purges runs by rule.
"""

__all__: list[str] = []  # the package promises no names: its modules do
