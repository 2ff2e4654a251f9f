"""What produced a run and what it cost: provenance, run info, the ledger, the budget and prices."""
