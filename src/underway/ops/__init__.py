"""Operating runs: audit, evaluation, replay, deploy checks, drills, and renderers.

They sit on top of the executor and read journals; nothing below imports them.
``timeline`` says what each event means in one line; ``charts`` draws charts.
"""

__all__: list[str] = []  # the package promises no names: its modules do
