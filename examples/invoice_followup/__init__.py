"""An invoice follow-up agent built on underway; ``demo.py`` runs it through a crash."""
