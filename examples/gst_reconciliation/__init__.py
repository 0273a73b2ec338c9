"""A GST input-tax-credit reconciliation agent built on underway: the purchase register
against GSTR-2B, with every mismatch reviewed by a person; ``demo.py`` runs it."""
